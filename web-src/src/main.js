// The app shell: navigation by hash, the token prompt (401/403), busy/offline banners, the language and theme
// switches (kept in this browser).
import { render } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, backoffLeft, bus, getToken, poller, setToken } from './api.js';
import { Dashboard, INFO_MS } from './dashboard.js';
import { History } from './history.js';
import { getLang, setLang, t } from './i18n.js';
import { Rotation, Security } from './security.js';
import { Settings } from './settings.js';
import { System } from './system.js';
import { SCHEMA, check } from './rules.js';
import { Money, MoneyRow, noteDoc } from './moneyhook.js'; // issue 29: the money view lives in web/money.js
import { applyTheme, getTheme, getPath, html, mqttWords, noteInfo, sectionMap, wifiDown } from './ui.js';

const PAGES = { dashboard: Dashboard, history: History, money: Money, settings: Settings, security: Security, system: System };
const pageOf = () => {
  const p = location.hash.replace(/^#\/?/, '').split('/')[0]; // #/settings/mqtt: the settings page, its MQTT section
  return PAGES[p] ? p : 'dashboard';
};

// Keeps Tab and Shift+Tab inside a modal dialog (WAI-ARIA dialog pattern): focus wraps at either end.
function trapTab(e) {
  if (e.key !== 'Tab') return;
  // Only what can take focus now: a closed <details> hides its buttons, its <summary> is focusable itself.
  const shut = (el) => el.tagName !== 'SUMMARY' && el.closest('details') && !el.closest('details').open;
  const items = [...e.currentTarget.querySelectorAll('input,button,select,textarea,a[href],summary')].filter((el) => !el.disabled && !shut(el));
  if (!items.length) return;
  const first = items[0];
  const last = items[items.length - 1];
  if (e.shiftKey && document.activeElement === first) {
    e.preventDefault();
    last.focus();
  } else if (!e.shiftKey && document.activeElement === last) {
    e.preventDefault();
    first.focus();
  }
}

// The token from what the user gave: a pasted or loaded token file (its WRITE line, else its READ line) or a token.
function tokenFrom(text) {
  const pick = (name) => (new RegExp(name + ':\\s*([0-9a-f]{64})', 'i').exec(text) || [])[1];
  return pick('WRITE') || pick('READ') || text.trim();
}

function TokenPrompt({ ask, onDone }) {
  const [value, setValue] = useState('');
  const [keep, setKeep] = useState(false);
  const input = useRef(null);
  useEffect(() => {
    const before = document.activeElement; // focus goes back where it was when the dialog closes
    if (input.current) input.current.focus();
    return () => before && before.focus && document.contains(before) && before.focus();
  }, []);
  const submit = (e) => {
    e.preventDefault();
    setToken(tokenFrom(value), keep);
    onDone(true);
  };
  const load = async (e) => {
    const f = e.target.files[0];
    if (f) setValue(await f.text());
  };
  const keys = (e) => {
    if (e.key === 'Escape') onDone(false);
    else trapTab(e);
  };
  const why = ask.wrong ? (ask.status === 403 ? t('tokenReadOnly') : t('tokenWrong')) : ask.status === 403 ? t('tokenWrite') : t('tokenAsk');
  return html`<div class="overlay" onKeyDown=${keys}>
    <div class="dialog card" role="dialog" aria-modal="true" aria-labelledby="tok-h" aria-describedby="tok-why"><form onSubmit=${submit}>
      <h2 id="tok-h">${t('tokenTitle')}</h2>
      <p id="tok-why" class=${ask.wrong ? 'ferr' : ''} role=${ask.wrong ? 'alert' : undefined} data-test="tok-why">${why}</p>
      <p class="small" data-test="tok-recover">${t('recover')}</p>
      <label for="tok-in">${ask.status === 403 ? t('writeToken') : t('tokenTitle')}</label>
      <input id="tok-in" ref=${input} type="password" autocomplete="off" value=${value} onInput=${(e) => setValue(e.target.value)} required />
      <label class="file">${t('tokenFile')} <input type="file" accept=".txt,text/plain" data-test="tok-file" onChange=${load} /></label>
      <label class="check"><input type="checkbox" checked=${keep} onChange=${(e) => setKeep(e.target.checked)} /> ${t('remember')}</label>
      <div class="row"><button type="submit">${t('signIn')}</button>
        <button type="button" onClick=${() => onDone(false)}>${t('cancel')}</button></div>
      <details data-test="tok-lost"><summary>${t('tokenLost')}</summary><p>${t('tokenLostHelp')}</p>
        <${Rotation} name="Meter Plus" prompt=${false} recovery onConfirmed=${() => onDone(true)} /></details>
    </form></div></div>`;
}

// Light, dark or as the system says; kept in this browser (the device serves many browsers).
const THEMES = ['auto', 'light', 'dark'];
function ThemeSwitch({ onChange }) {
  const [theme, setTheme] = useState(getTheme());
  const next = () => {
    const n = THEMES[(THEMES.indexOf(theme) + 1) % THEMES.length];
    applyTheme(n);
    setTheme(n);
    onChange(); // charts draw with the theme's colours: redraw them
  };
  return html`<button type="button" class="link" data-test="theme" onClick=${next}>${t('theme_' + theme)}</button>`;
}

// Deutsch / English for this browser; the page re-renders in it.
const LangSwitch = ({ onChange }) => {
  const other = getLang() === 'de' ? 'en' : 'de';
  return html`<button type="button" class="link" data-test="lang" lang=${other}
    onClick=${() => setLang(other) && onChange()}>${other === 'de' ? 'Deutsch' : 'English'}</button>`;
};

// One chip of the status strip: a state (ok, warn, err, off) and its words.
const Chip = ({ kind, name, children, test }) =>
  html`<li class=${'chip ' + kind} data-test=${test}><span class="chip-name">${name}</span> ${children}</li>`;

// Meter, WiFi, MQTT, Modbus, clock and update at a glance on every page, from the shared /system/info.
function StatusStrip({ info }) {
  if (!info) return null;
  const meter = sectionMap(info.meter);
  const wifi = sectionMap(info.wifi);
  const ap = sectionMap(info.ap);
  const mqtt = sectionMap(info.mqtt);
  const modbus = sectionMap(info.modbus);
  const clock = sectionMap(info.clock);
  const ota = sectionMap(info.ota);
  const age = meter.age_s === undefined ? -1 : +meter.age_s;
  const m = meter.state === undefined ? ['off', t('stMeterNone')]
    : age < 0 ? ['err', t('stMeterNone')]
    : meter.stale ? ['warn', t('stMeterStale', age)]
    : ['ok', t('stMeterLive', age)];
  const w = wifi.connected ? ['ok', [wifi.ssid, wifi.signal_strength + ' dBm', wifi.ip_address].filter(Boolean).join(' · ')]
    : ap.active ? ['warn', t('stAp', ap.ssid, ap.ip)] : ['err', wifiDown(wifi)];
  const q = mqttWords(mqtt);
  const mb = modbus.enabled ? ['ok', t('stModbusOn', modbus.clients || 0)] : ['off', t('stOff')];
  const c = clock.synced ? ['ok', t('stClockOk')] : ['warn', t('stClockNot')];
  return html`<ul class="strip" data-test="status-strip">
    <${Chip} kind=${m[0]} name=${t('stMeter')} test="st-meter">${m[1]}<//>
    <${Chip} kind=${w[0]} name=${wifi.connected ? t('stWifi') : ap.active ? t('stApName') : t('stWifi')} test="st-wifi">${w[1]}<//>
    <${Chip} kind=${q[0]} name="MQTT" test="st-mqtt">${q[1]}<//>
    <${Chip} kind=${mb[0]} name="Modbus" test="st-modbus">${mb[1]}<//>
    <${Chip} kind=${c[0]} name=${t('stClock')} test="st-clock">${c[1]}<//>
    ${ota.update_available && html`<${Chip} kind="warn" name=${t('stUpdate')} test="st-update"><a href="#/system">${t('stUpdateAvail', ota.available_version)}</a><//>`}
  </ul>`;
}

// The first-run path while the device is new: WiFi, time zone, a password for the access point, tokens; each step
// links to its place and says when it is done. Shown in the factory state (no settings stored yet) and after it
// until every step is done or the owner hides it in this browser.
function Setup({ doc, info }) {
  const [hidden, setHidden] = useState(localStorage.getItem('mp.setup') === 'hide');
  const s = sectionMap(info.settings);
  const steps = [
    ['setupWifi', '#/settings/wifiPrimary', !!(getPath(doc, 'wifi.primary.ssid') || getPath(doc, 'wifi.secondary.ssid'))],
    ['setupZone', '#/settings/general', !s.factory],
    ['setupAp', '#/settings/ap', !!(getPath(doc, 'accessPoint.password_enable') && getPath(doc, 'accessPoint.password_set'))],
    ['setupTokens', '#/security', !!s.tokens_set],
  ];
  if (!s.factory && (hidden || steps.every((x) => x[2]))) return null;
  const hide = () => {
    localStorage.setItem('mp.setup', 'hide');
    setHidden(true);
  };
  return html`<section class="card" aria-labelledby="h-setup" data-test="setup"><h2 id="h-setup">${t('setupTitle')}</h2>
    <p>${t('setupHelp')}</p><ol>${steps.map(([k, href, done]) => html`<li data-done=${done}><a href=${href}>${t(k, doc.timezone)}</a>${done ? ' ✓ ' + t('setupDone') : ''}</li>`)}</ol>
    ${!s.factory && html`<button type="button" class="link" onClick=${hide}>${t('setupHide')}</button>`}</section>`;
}

function App() {
  const [page, setPage] = useState(pageOf());
  const [gen, setGen] = useState(0); // remounts the page after a new token or language
  const [auth, setAuth] = useState(0);
  const [busy, setBusy] = useState(0);
  const [offline, setOffline] = useState(false);
  const [info, setInfo] = useState(null);
  const [name, setName] = useState('Meter Plus');
  const [doc, setDoc] = useState(null);
  const [, setLangTick] = useState(0);

  const applyDoc = (doc) => {
    if (!doc) return;
    noteDoc(doc);
    setDoc(doc);
    if (doc.device_name) {
      setName(doc.device_name);
      document.title = doc.device_name;
    }
  };
  useEffect(() => {
    const onHash = () => setPage(pageOf());
    const onAuth = (e) => setAuth(e.detail);
    const onOffline = (e) => setOffline(e.detail);
    let timer = 0;
    const onBusy = () => {
      const tick = () => {
        const s = Math.ceil(backoffLeft() / 1000);
        setBusy(s);
        timer = s > 0 ? setTimeout(tick, 1000) : 0;
      };
      if (!timer) tick();
    };
    addEventListener('hashchange', onHash);
    bus.addEventListener('auth', onAuth);
    bus.addEventListener('offline', onOffline);
    bus.addEventListener('busy', onBusy);
    api('/settings').then(applyDoc, () => {});
    // /system/info every 20 s for the strip (and the dashboard's meter health): one request per 20 s per tab.
    const stopInfo = poller(async () => {
      const i = await api('/system/info');
      noteInfo(i);
      setInfo(i);
      bus.dispatchEvent(new CustomEvent('info', { detail: i }));
    }, INFO_MS);
    return () => {
      stopInfo();
      removeEventListener('hashchange', onHash);
      bus.removeEventListener('auth', onAuth);
      bus.removeEventListener('offline', onOffline);
      bus.removeEventListener('busy', onBusy);
    };
  }, []);
  useEffect(() => {
    const h1 = document.querySelector('main h1');
    if (h1) {
      h1.tabIndex = -1; // keyboard and screen reader users land on the new page's heading
      h1.focus();
    }
  }, [page]);

  const Page = PAGES[page];
  // The refused requests wait for this answer and are sent again with the token: the page and its edits stay.
  const done = (ok) => {
    auth.resolve(ok);
    setAuth(0);
  };
  // The skip link must not change the hash: the router would read "#main" as an unknown page (the dashboard).
  const skip = (e) => {
    e.preventDefault();
    const target = document.querySelector('main h1') || document.getElementById('main');
    target.tabIndex = -1;
    target.focus();
  };
  return html`<a class="skip" href="#main" onClick=${skip}>${t('skip')}</a>
    <header><span class="brand">${name}</span>
      <nav aria-label="main"><ul>${Object.keys(PAGES).map((p) => html`<li><a href=${'#/' + p}
        aria-current=${p === page ? 'page' : undefined}>${t(p)}</a></li>`)}</ul></nav></header>
    <section aria-label=${t('status')}><${StatusStrip} info=${info} />
    ${offline && html`<p class="banner err" role="alert">${t('offline')}</p>`}
    ${busy > 0 && html`<p class="banner warn" role="status" data-test="busy">${t('busy', busy)}</p>`}</section>
    <main id="main" lang=${getLang()}>${page === 'dashboard' && doc && info && html`<${Setup} doc=${doc} info=${info} />`}${page === 'dashboard' && html`<${MoneyRow} />`}<${Page} key=${page + gen + getLang()} onDoc=${applyDoc} /></main>
    ${auth !== 0 && html`<${TokenPrompt} key=${auth.wrong} ask=${auth} onDone=${done} />`}
    <footer class="small">${getToken() ? '🔑 ' : ''}Meter Plus · <${LangSwitch} onChange=${() => setLangTick((x) => x + 1)} /> · <${ThemeSwitch} onChange=${() => setGen(gen + 1)} /></footer>`;
}

// The page's copy of the settings rules, for the test that holds it against core/settings.py.
window.meterplus = { SCHEMA, check };

applyTheme(getTheme());
render(html`<${App} />`, document.getElementById('app'));
