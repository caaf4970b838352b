// The money view's door in the main bundle (issue 29): web/money.js is loaded only when the view opens (a script
// element made by this trusted script: the page's policy allows it through 'strict-dynamic'); and the dashboard's
// row with the price now and today's cost.
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, bus, poller } from './api.js';
import { getLang, num, t } from './i18n.js';
import { html, sectionMap, useInfo } from './ui.js';

// The money answers need the device's clock (503 before it is set, which would hold every request back a while).
const synced = (info) => !!(info && sectionMap(info.clock).synced);

let loading = null;
const load = () => loading || (loading = new Promise((ok, no) => {
  const s = document.createElement('script');
  s.src = '/money.js';
  s.onload = ok;
  s.onerror = () => {
    loading = null;
    no(new Error('money.js'));
  };
  document.head.appendChild(s);
}));

export function Money() {
  const box = useRef(null);
  const [err, setErr] = useState('');
  const on = synced(useInfo());
  useEffect(() => {
    if (on) {
      load().then(() => window.meterplusMoney.mount(box.current, { api, lang: getLang(), noteDoc, num }))
        .catch((e) => setErr(String(e.message || e)));
    }
  }, [on]);
  return html`<div ref=${box} data-test="money">${!on && html`<h1>${t('money')}</h1><p>${t('stClock')}: ${t('stClockNot')}</p>`}</div>
    ${err && html`<p class="ferr" role="alert">${err}</p>`}`;
}

// The tariff's mode from the settings document the shell reads anyway: with the tariff off the dashboard asks for
// nothing more (its requests stay inside the device's rate budget).
let mode = 'off';
export function noteDoc(doc) {
  if (doc && doc.tariff && doc.tariff.mode !== mode) {
    mode = doc.tariff.mode;
    bus.dispatchEvent(new CustomEvent('tariff', { detail: mode }));
  }
}

export function MoneyRow() {
  const [c, setC] = useState(null);
  const [m, setM] = useState(mode);
  useEffect(() => {
    const on = (e) => setM(e.detail);
    bus.addEventListener('tariff', on);
    return () => bus.removeEventListener('tariff', on);
  }, []);
  const on = synced(useInfo()) && m !== 'off';
  useEffect(() => (on ? poller(async () => setC(await api('/cost')), 60000) : undefined), [on]);
  if (!c || c.mode === 'off') return null;
  const cost = c.today.import_cost;
  // One text per value: htm drops the whitespace between a line's end and the next expression ("Preis jetzt0,27").
  const price = c.price_now === null ? '–' : num(c.price_now, 4) + ' ' + c.currency + '/kWh';
  const today = cost === null ? '–' : num(cost, 2) + ' ' + c.currency;
  return html`<p class="banner" data-test="money-row"><a href="#/money">${t('money')}</a>: ${t('priceNow') + ' ' + price} · ${t('costToday') + ' ' + today}</p>`;
}
