// The money view (issue 29), a file of its own (web/money.js.gz) that the page loads only when the view opens:
// cost today / month / year, a day's hourly cost bars, the price curve of the next 36 hours with the cheapest
// window of today and tomorrow, and the monthly peaks. Plain DOM and SVG: no second copy of the page's framework.
const WORDS = {
  de: {
    title: 'Kosten', today: 'Heute', month: 'Monat', year: 'Jahr', cost: 'Bezugskosten', revenue: 'Einspeisevergütung',
    net: 'Saldo', fee: 'Grundgebühr', energy: 'Bezug', unknown: 'unbekannt', partly: 'teilweise ohne Preis',
    hourly: 'Kosten je Stunde', day: 'Tag', prices: 'Preise der nächsten 36 Stunden', cheapest: 'Günstigstes Fenster',
    hours: 'Stunden', tomorrow: 'Morgen', none: 'keins', peaks: 'Leistungsspitzen', quarter: 'Höchste Viertelstunde',
    top3: 'Drei höchste Stunden (verschiedene Tage)', mean: 'Mittel', off: 'Kein Tarif eingestellt (unten: Tarif).',
    priceNow: 'Preis jetzt', fetch: 'Preisabruf', noPrice: 'ohne Preis', perKwh: '/kWh', current: 'Laufender Monat',
    tariff: 'Tarif', mode: 'Art', m_off: 'aus', m_fixed: 'Festpreis', m_tou: 'Zeitvariabel (HT/NT, §14a Modul 3)',
    m_dynamic: 'Dynamisch (Börsenpreis)', importPrice: 'Arbeitspreis je kWh', exportPrice: 'Einspeisevergütung je kWh',
    baseFee: 'Grundgebühr je Monat', currency: 'Währung', surcharge: 'Aufschlag je kWh (Netzentgelt, Umlagen, Marge)',
    vatPercent: 'MwSt. %', priceUrl: 'Preisquelle (URL)', tou: 'Zeitfenster (JSON)', save: 'Speichern', saved: 'Gespeichert.',
    f_idle: 'keiner nötig', f_fetching: 'läuft', f_ok: 'aktuell', f_failed: 'fehlgeschlagen',
  },
  en: {
    title: 'Cost', today: 'Today', month: 'Month', year: 'Year', cost: 'Import cost', revenue: 'Feed-in revenue',
    net: 'Net', fee: 'Base fee', energy: 'Import', unknown: 'unknown', partly: 'partly without a price',
    hourly: 'Cost per hour', day: 'Day', prices: 'Prices of the next 36 hours', cheapest: 'Cheapest window',
    hours: 'hours', tomorrow: 'Tomorrow', none: 'none', peaks: 'Power peaks', quarter: 'Highest quarter hour',
    top3: 'Three highest hours (different days)', mean: 'mean', off: 'No tariff set (below: Tariff).',
    priceNow: 'Price now', fetch: 'Price fetch', noPrice: 'no price', perKwh: '/kWh', current: 'This month',
    tariff: 'Tariff', mode: 'Kind', m_off: 'off', m_fixed: 'Fixed price', m_tou: 'Time of use (peak/off-peak, §14a Modul 3)',
    m_dynamic: 'Dynamic (day-ahead market)', importPrice: 'Energy price per kWh', exportPrice: 'Feed-in compensation per kWh',
    baseFee: 'Base fee per month', currency: 'Currency', surcharge: 'Surcharge per kWh (grid fee, levies, margin)',
    vatPercent: 'VAT %', priceUrl: 'Price source (URL)', tou: 'Windows (JSON)', save: 'Save', saved: 'Saved.',
    f_idle: 'none needed', f_fetching: 'in progress', f_ok: 'up to date', f_failed: 'failed',
  },
};

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => '&#' + c.charCodeAt(0) + ';');
const SVG = 'http://www.w3.org/2000/svg';

// Numbers in the page's language (0,30 EUR on the German page) by the page's own num(), which mount() is given:
// money to the cent, prices to 1/100 ct, energy to the Wh.
let dec = null;
const kwh = (v) => dec(v, 3) + ' kWh';
const price = (v, cur, w) => dec(v, 4) + ' ' + cur + w.perKwh;

function money(v, cur) {
  return v === null || v === undefined ? null : dec(v, 2) + ' ' + cur;
}

// One period (today, month, year) as label and value lines: readable at any width (no table to scroll sideways).
function sums(w, s, cur) {
  const cell = (v) => (v === null ? `<span class="small">${w.unknown}</span>` : esc(money(v, cur)));
  return `<dl class="facts"><dt>${w.energy}</dt><dd>${esc(kwh(s.import_kwh))}</dd><dt>${w.cost}</dt><dd data-test="m-cost">${cell(s.import_cost)}</dd>` +
    `<dt>${w.revenue}</dt><dd>${cell(s.export_revenue)}</dd><dt>${w.net}</dt><dd>${cell(s.net)}</dd>` +
    (s.base_fee === undefined ? '' : `<dt>${w.fee}</dt><dd>${esc(money(s.base_fee, cur))}</dd>`) +
    '</dl>' + (s.complete || s.import_cost === null ? '' : `<p class="small">(${w.partly})</p>`);
}

function svg(tag, attrs, parent) {
  const el = document.createElementNS(SVG, tag);
  for (const k in attrs) el.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(el);
  return el;
}

// Bars of the day's hourly import cost; an hour without a price is a grey stub marked "?".
function bars(box, items, cur, w) {
  box.textContent = '';
  const W = 720;
  const H = 160;
  const vals = items.map((i) => i.import_cost);
  const max = Math.max(0.01, ...vals.filter((v) => v !== null).map(Math.abs));
  const s = svg('svg', { viewBox: `0 0 ${W} ${H + 20}`, role: 'img', 'aria-label': w.hourly, 'data-test': 'm-bars' }, box);
  const bw = W / Math.max(24, items.length);
  items.forEach((it, i) => {
    const v = it.import_cost;
    const h = v === null ? 6 : Math.max(1, (Math.abs(v) / max) * (H - 10));
    const r = svg('rect', { x: i * bw + 1, y: H - h, width: bw - 2, height: h, fill: v === null ? 'var(--muted, #999)' : v < 0 ? 'var(--ok, #2a2)' : 'var(--accent, #36c)', 'data-test': 'm-bar' }, s);
    const tip = svg('title', {}, r);
    tip.textContent = it.start.slice(11) + ': ' + (v === null ? w.noPrice : money(v, cur)) + ', ' + kwh(it.import_kwh);
    if (i % 3 === 0) svg('text', { x: i * bw + 2, y: H + 14, 'font-size': 11, fill: 'currentColor' }, s).textContent = it.start.slice(11, 13);
  });
}

// The price curve (quarter hours) with the cheapest windows shaded.
function curve(box, t, w) {
  box.textContent = '';
  const W = 720;
  const H = 160;
  const ps = t.prices;
  const known = ps.filter((p) => p.import_price !== null).map((p) => p.import_price);
  if (!known.length) {
    box.textContent = w.unknown;
    return;
  }
  const lo = Math.min(0, ...known);
  const hi = Math.max(...known);
  const y = (v) => H - 5 - ((v - lo) / (hi - lo || 1)) * (H - 10);
  const x = (i) => (i / ps.length) * W;
  const s = svg('svg', { viewBox: `0 0 ${W} ${H + 20}`, role: 'img', 'aria-label': w.prices, 'data-test': 'm-curve' }, box);
  for (const name of ['today', 'tomorrow']) {
    const win = t.cheapest[name];
    if (!win) continue;
    const a = ps.findIndex((p) => p.timestamp === win.timestamp);
    if (a < 0) continue;
    const n = t.cheapest.hours * 4;
    svg('rect', { x: x(a), y: 0, width: x(Math.min(a + n, ps.length)) - x(a), height: H, fill: 'var(--ok, #2a2)', 'fill-opacity': 0.2, 'data-test': 'm-window' }, s);
  }
  let d = '';
  ps.forEach((p, i) => {
    if (p.import_price === null) return;
    d += (d && ps[i - 1] && ps[i - 1].import_price !== null ? 'L' : 'M') + x(i).toFixed(1) + ' ' + y(p.import_price).toFixed(1);
  });
  svg('path', { d, fill: 'none', stroke: 'var(--accent, #36c)', 'stroke-width': 2 }, s);
  if (lo < 0) svg('line', { x1: 0, x2: W, y1: y(0), y2: y(0), stroke: 'currentColor', 'stroke-dasharray': '4 4' }, s);
  ps.forEach((p, i) => {
    if (p.start.endsWith('00:00')) svg('text', { x: x(i) + 2, y: H + 14, 'font-size': 11, fill: 'currentColor' }, s).textContent = p.start.slice(5, 10);
  });
}

// The monthly peaks, a month to a block of label and value lines (no table: it scrolled sideways on a phone).
function peaksList(p, w) {
  const row = (m, label) => {
    if (!m) return '';
    const q = m.quarter_peak ? `${esc(dec(m.quarter_peak.power_W, 0))} W · ${esc(m.quarter_peak.start.replace('T', ' '))}` : '–';
    const top = m.hourly_top3.map((h) => `${esc(h.start.replace('T', ' '))}: ${esc(kwh(h.energy_kWh))}`).join('<br>');
    return `<div data-test="m-peak"><h3>${esc(label || m.month)}</h3><dl class="facts"><dt>${w.quarter}</dt><dd>${q}</dd>` +
      `<dt>${w.top3}</dt><dd>${top || '–'}</dd><dt>${w.mean}</dt><dd>${m.hourly_top3_mean_kWh === null ? '–' : esc(kwh(m.hourly_top3_mean_kWh))}</dd></dl></div>`;
  };
  return row(p.current, w.current) + p.months.map((m) => row(m)).join('');
}

// The tariff settings: money goes to the device as decimal text (it reads it exactly; never a float on the way).
// Each label holds its field, the words above it (class field); a field shows only for the kinds it applies to.
const FIELDS = ['importPrice', 'exportPrice', 'baseFee', 'currency', 'surcharge', 'vatPercent', 'priceUrl'];
const USED = { importPrice: 'fixed tou', surcharge: 'dynamic', vatPercent: 'dynamic', priceUrl: 'dynamic', tou: 'tou' };

async function tariffForm(box, api, w, reload, noteDoc) {
  const doc = (await api('/settings')).tariff;
  const field = (k) => `<label class="field" data-k="${k}">${w[k]} <input name="${k}" data-test="t-${k}" value="${esc(doc[k])}"></label>`;
  box.innerHTML = `<form data-test="t-form"><label class="field">${w.mode} <select name="mode" data-test="t-mode">${['off', 'fixed', 'tou', 'dynamic']
    .map((m) => `<option value="${m}"${m === doc.mode ? ' selected' : ''}>${w['m_' + m]}</option>`).join('')}</select></label>
    ${FIELDS.map(field).join('')}<label class="field" data-k="tou">${w.tou} <textarea name="tou" rows="3" data-test="t-tou">${esc(JSON.stringify(doc.tou))}</textarea></label>
    <button type="submit">${w.save}</button><p data-test="t-msg" role="status"></p></form>`;
  const form = box.querySelector('form');
  // Only the fields of the chosen kind (the others keep their values and are sent unchanged).
  const kind = () => {
    for (const l of form.querySelectorAll('[data-k]')) {
      const m = form.mode.value;
      l.style.display = m !== 'off' && (USED[l.dataset.k] || 'fixed tou dynamic').includes(m) ? '' : 'none';
    }
  };
  form.mode.addEventListener('change', kind);
  kind();
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const msg = form.querySelector('[data-test=t-msg]');
    const patch = { mode: form.mode.value };
    for (const k of FIELDS) patch[k] = form[k].value.trim();
    try {
      patch.tou = JSON.parse(form.tou.value || '[]');
      for (const win of patch.tou) if (typeof win.price === 'number') win.price = String(win.price);
      await api('/settings', { method: 'POST', body: { tariff: patch } });
      if (noteDoc) noteDoc({ tariff: patch }); // the dashboard's row follows the new mode
      msg.className = '';
      msg.textContent = w.saved;
      reload();
    } catch (err) {
      msg.className = 'ferr';
      msg.textContent = err.fields ? Object.entries(err.fields).map(([k, v]) => k + ': ' + v).join('; ') : String(err.message || err);
    }
  });
}

async function mount(el, { api, lang, noteDoc, num }) {
  const w = WORDS[lang] || WORDS.de;
  dec = num;
  el.innerHTML = `<h1>${w.title}</h1><div data-test="m-totals"></div>
    <section class="card"><h2>${w.hourly}</h2><label>${w.day} <input type="date" data-test="m-date"></label><div data-test="m-barbox"></div></section>
    <section class="card"><h2>${w.prices}</h2><label>${w.cheapest} <select data-test="m-hours">${[1, 2, 3, 4, 6].map((n) => `<option value="${n}">${n} ${w.hours}</option>`).join('')}</select></label>
    <p data-test="m-windows" class="small"></p><div data-test="m-curvebox"></div></section>
    <section class="card"><h2>${w.peaks}</h2><div data-test="m-peaks"></div></section>
    <section class="card"><h2>${w.tariff}</h2><div data-test="m-tariff"></div></section>`;
  const q = (t) => el.querySelector(`[data-test=${t}]`);
  const cost = await api('/cost');
  const cur = cost.currency;
  const totals = q('m-totals');
  if (cost.mode === 'off') totals.insertAdjacentHTML('afterbegin', `<p data-test="m-off">${w.off}</p>`);
  totals.insertAdjacentHTML('beforeend', `<p data-test="m-price">${w.priceNow}: ${cost.price_now === null ? w.unknown : esc(price(cost.price_now, cur, w))}</p>
    <div class="cards">${['today', 'month', 'year'].map((k) => `<section class="card" data-test="m-${k}"><h2>${w[k]}</h2>${sums(w, cost[k], cur)}</section>`).join('')}</div>`);
  const date = q('m-date');
  date.value = cost.date;
  bars(q('m-barbox'), cost.items, cur, w);
  date.addEventListener('change', async () => {
    if (!date.value) return;
    const c = await api('/cost?date=' + encodeURIComponent(date.value));
    bars(q('m-barbox'), c.items, cur, w);
  });
  const prices = async () => {
    const t = await api('/tariff?from=today&hours=' + q('m-hours').value); // the curve: today from midnight and tomorrow
    const win = (name) => {
      const x = t.cheapest[name];
      return `${name === 'today' ? w.today : w.tomorrow}: ${x ? esc(x.start.slice(11) + '–' + x.end.slice(11) + ', Ø ' + price(x.mean_price, cur, w)) : w.none}`;
    };
    q('m-windows').innerHTML = `${win('today')} · ${win('tomorrow')} · ${w.fetch}: ${esc(w['f_' + t.fetch.state] || t.fetch.state)}${t.fetch.error ? ' (' + esc(t.fetch.error) + ')' : ''}`;
    curve(q('m-curvebox'), t, w);
  };
  q('m-hours').addEventListener('change', prices);
  await prices();
  q('m-peaks').innerHTML = peaksList(await api('/peaks'), w);
  await tariffForm(q('m-tariff'), api, w, () => mount(el, { api, lang, noteDoc, num }), noteDoc);
  el.dataset.ready = '1';
}

window.meterplusMoney = { mount };
