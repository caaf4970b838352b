// History: a day of quarter hours and a range of days as charts and CSV, labelled in the device's time zone.
import { useEffect, useMemo, useState } from 'preact/hooks';
import { api, csvField, download } from './api.js';
import { Chart, bars, noPoints, steps } from './chart.js';
import { getLang, num, t } from './i18n.js';
import { Msg, addDays, cssVar, deviceToday, errText, html, span } from './ui.js';

// Labels come from the device's own local time strings (item.date), so a DST day's 92 or 100 quarter hours and the
// repeated autumn hour are labelled as the device counted them; the browser's zone plays no part.
function labeller(items, withDay) {
  const at = new Map(items.map((it) => [it.timestamp, it.date]));
  return (v) => {
    const d = at.get(v);
    if (!d) return '';
    return withDay ? d.slice(5, 10).split('-').reverse().join('.') : d.slice(11, 16);
  };
}

// Axis ticks on item instants: every stepH-th local hour of the day chart, every k-th day of the range chart.
function daySplits(items, stepH) {
  return items.filter((it) => it.date.endsWith(':00') && +it.date.slice(11, 13) % stepH === 0).map((it) => it.timestamp);
}

function axisX(label, splits) {
  return { splits: () => splits, values: (u, vals) => vals.map(label), stroke: cssVar('--muted'), grid: { stroke: cssVar('--line2') } };
}
const axisY = (size) => ({ size: size || 56, stroke: cssVar('--muted'), grid: { stroke: cssVar('--line2') } });


// "HH:MM" k quarter hours before an item's local time (the labels of the quarter hours a gap left without a record).
function before(date, k) {
  const m = ((+date.slice(11, 13) * 60 + +date.slice(14, 16) - 15 * k) % 1440 + 1440) % 1440;
  return String(Math.floor(m / 60)).padStart(2, '0') + ':' + String(m % 60).padStart(2, '0');
}

// A quarter hour without a record is a gap: its slot stays empty in every series (no bar, the power line breaks).
// The record that closes a gap (gap_s) holds the whole gap's energy; one tall bar would read as a spike, so its
// energy is drawn spread evenly over the quarter hours it covers, in a grey series of its own ("no data: average
// over the gap"), and the gap is listed under the chart. Gaps that began the day before are cut at midnight.
export function dayData(items) {
  const xs = [], power = [], imp = [], exp = [], spreadImp = [], spreadExp = [], labels = new Map(), gaps = [];
  const first = items.length ? items[0] : null;
  const dayStart = first ? first.timestamp - (+first.date.slice(11, 13) * 3600 + +first.date.slice(14, 16) * 60) : 0;
  for (const it of items) {
    const gap = it.gap_s > 0 ? it.gap_s : 0;
    const hasExp = it.export_kW !== undefined;
    if (gap) {
      const covered = Math.round(gap / 900);
      const share = 1 / (covered + 1);
      const ai = it.import_kW * 1000 * share;
      const ae = hasExp ? -it.export_kW * 1000 * share : null;
      let shown = 0;
      for (let k = covered; k >= 1; k--) {
        const x = it.timestamp - 900 * k;
        if (x < dayStart) continue;
        xs.push(x); power.push(null); imp.push(null); exp.push(null); spreadImp.push(ai); spreadExp.push(ae);
        labels.set(x, before(it.date, k));
        shown++;
      }
      gaps.push({ from: before(it.date, shown), to: it.date.slice(11, 16), seconds: gap, closing: it.timestamp });
      xs.push(it.timestamp); power.push(it.power_W === undefined ? null : it.power_W);
      imp.push(null); exp.push(null); spreadImp.push(ai); spreadExp.push(ae);
    } else {
      xs.push(it.timestamp); power.push(it.power_W === undefined ? null : it.power_W);
      imp.push(it.import_kW * 1000); exp.push(hasExp ? -it.export_kW * 1000 : null);
      spreadImp.push(null); spreadExp.push(null);
    }
    labels.set(it.timestamp, it.date.slice(11, 16));
  }
  return { xs, power, imp, exp, spreadImp, spreadExp, labels, gaps };
}

function DayCharts({ items }) {
  const phone = typeof innerWidth === 'number' && innerWidth < 600;
  const d = useMemo(() => dayData(items), [items]);
  const { power, energy } = useMemo(() => {
    const label = (v) => d.labels.get(v) || '';
    const splits = daySplits(items, phone ? 6 : 3);
    const x = { time: false };
    const xSeries = { label: t('day'), value: (u, v) => (v === null ? '–' : label(v)) };
    const wh = (sign) => (u, v) => (v === null ? '–' : num(sign * v, 1));
    const series = [
      xSeries,
      { label: t('importWh'), stroke: '#c2410c', fill: 'rgba(194,65,12,.6)', paths: bars, points: noPoints, value: wh(1) },
      { label: t('exportWh'), stroke: '#15803d', fill: 'rgba(21,128,61,.6)', paths: bars, points: noPoints, value: wh(-1) },
    ];
    const data = [d.xs, d.imp, d.exp];
    if (d.gaps.length) {
      series.push({ label: t('gapImport'), stroke: '#6b7280', dash: [4, 3], fill: 'rgba(107,114,128,.35)', paths: bars, points: noPoints, value: wh(1) },
        { label: t('gapExport'), stroke: '#6b7280', dash: [4, 3], fill: 'rgba(107,114,128,.2)', paths: bars, points: noPoints, value: wh(-1) });
      data.push(d.spreadImp, d.spreadExp);
    }
    return {
      power: {
        opts: {
          scales: { x },
          axes: [axisX(label, splits), axisY()],
          series: [xSeries, { label: t('powerW'), stroke: '#2563eb', width: 2, paths: steps, fill: 'rgba(37,99,235,.08)',
            value: (u, v) => (v === null ? '–' : num(v, 0)) }],
        },
        data: [d.xs, d.power],
      },
      energy: { opts: { scales: { x }, axes: [axisX(label, splits), axisY()], series }, data },
    };
  }, [d]);
  return html`<${Chart} opts=${power.opts} data=${power.data} label=${t('powerW')} />
    <${Chart} opts=${energy.opts} data=${energy.data} label=${t('importWh') + ' / ' + t('exportWh')} />
    ${d.gaps.length ? html`<div class="card" data-test="gaps" data-gaps=${JSON.stringify(d.gaps.map((g) => [g.closing, g.seconds]))}
      data-spread=${JSON.stringify(d.spreadImp)} data-import=${JSON.stringify(d.imp)}>
      <p><strong>${t('gapsTitle', d.gaps.length)}</strong> ${t('gapsNote')}</p>
      <ul>${d.gaps.map((g) => html`<li>${g.from}–${g.to}: ${t('gapWithout', span(g.seconds))}</li>`)}</ul></div>` : ''}`;
}

function RangeChart({ items }) {
  const { opts, data } = useMemo(() => {
    const label = labeller(items, true);
    const k = Math.max(1, Math.ceil(items.length / 8));
    const splits = items.filter((_, i) => i % k === 0).map((it) => it.timestamp);
    return {
      opts: {
        scales: { x: { time: false } },
        axes: [axisX(label, splits), axisY()],
        series: [
          { label: t('day'), value: (u, v) => (v === null ? '–' : label(v)) },
          { label: t('importKWh'), stroke: '#c2410c', fill: 'rgba(194,65,12,.6)', paths: bars, points: noPoints, value: (u, v) => (v === null ? '–' : num(v, 2)) },
          { label: t('exportKWh'), stroke: '#15803d', fill: 'rgba(21,128,61,.6)', paths: bars, points: noPoints, value: (u, v) => (v === null ? '–' : num(-v, 2)) },
        ],
      },
      data: [items.map((it) => it.timestamp), items.map((it) => it.import_kWh), items.map((it) => (it.export_kWh === undefined ? null : -it.export_kWh))],
    };
  }, [items]);
  return html`<${Chart} opts=${opts} data=${data} label=${t('importKWh') + ' / ' + t('exportKWh')} />`;
}

// The day's UTC offset at its first and last record (local wall time minus UTC): a rise is the short spring day
// (92 quarter hours), a fall the long autumn day (100).
const offsetOf = (it) => Date.parse(it.date + ':00Z') / 1000 - it.timestamp;
export function dstKind(items) {
  if (items.length < 2) return '';
  const a = offsetOf(items[0]);
  const b = offsetOf(items[items.length - 1]);
  return b > a ? t('dstShort') : b < a ? t('dstLong') : '';
}

const DAY_COLS = ['date', 'timestamp', 'power_W', 'import_kW', 'export_kW', 'import_total_kWh', 'export_total_kWh', 'gap_s'];
const RANGE_COLS = ['date', 'timestamp', 'import_kWh', 'export_kWh', 'import_total_kWh', 'export_total_kWh'];
// German Excel reads ';' as the separator and ',' as the decimal mark; other spreadsheets read ',' and '.'.
// The choice is the user's (a box above the charts; on by default with the German interface).
function csv(cols, items, excelDe) {
  const sep = excelDe ? ';' : ',';
  const cell = (v) => csvField(excelDe && typeof v === 'number' ? String(v).replace('.', ',') : v, sep);
  // import_kW/export_kW of a quarter hour are its energy in kWh (the API's names): the header says so.
  const head = cols.map((c) => (c === 'import_kW' ? 'import_kWh' : c === 'export_kW' ? 'export_kWh' : c));
  return [head.join(sep), ...items.map((it) => cols.map((c) => cell(it[c])).join(sep))].join('\r\n') + '\r\n';
}

// Month and year totals: one lowRes request for the year (366 days at most, the LowRes ring keeps 732), summed by
// month in the page. The current year runs to today; the year before is the other choice the ring still holds.
export function monthTotals(items, year) {
  const months = new Map();
  for (const it of items) {
    if (!it.date.startsWith(year + '-')) continue;
    const m = months.get(it.date.slice(0, 7)) || { month: it.date.slice(0, 7), imp: 0, exp: 0, days: 0 };
    m.imp += it.import_kWh || 0;
    m.exp += it.export_kWh || 0;
    m.days++;
    months.set(m.month, m);
  }
  return [...months.values()].sort((a, b) => (a.month < b.month ? -1 : 1));
}

function Totals() {
  const thisYear = +deviceToday().slice(0, 4);
  const [year, setYear] = useState(thisYear);
  const [rows, setRows] = useState(null);
  const [err, setErr] = useState('');
  useEffect(() => {
    setRows(null);
    setErr('');
    const first = year + '-01-01';
    const days = year === thisYear ? Math.round((Date.parse(deviceToday()) - Date.parse(first)) / 864e5) + 1 : 366;
    api('/history/lowRes?start=' + first + '&days=' + days).then((r) => setRows(monthTotals(r.items, year)), (e) => setErr(errText(e)));
  }, [year]);
  const name = (m) => new Date(m + '-15T12:00:00Z').toLocaleString(getLang() === 'de' ? 'de-DE' : 'en-GB', { month: 'long', timeZone: 'UTC' });
  const sum = (k) => (rows || []).reduce((a, r) => a + r[k], 0);
  const line = (label, imp, exp, test) => html`<tr data-test=${test}><th scope="row">${label}</th><td>${num(imp, 1)}</td><td>${num(exp, 1)}</td><td>${num(imp - exp, 1)}</td></tr>`;
  return html`<label>${t('year')} <select name="year" value=${year} onChange=${(e) => setYear(+e.target.value)}>
      ${[thisYear, thisYear - 1].map((y) => html`<option value=${y}>${y}</option>`)}</select></label>
    <${Msg} kind="err">${err}<//>
    ${rows && (rows.length ? html`<div class="scroll"><table data-test="totals"><thead><tr><th>${t('month')}</th><th>${t('importKWh')}</th><th>${t('exportKWh')}</th><th>${t('balanceKWh')}</th></tr></thead>
      <tbody>${rows.map((r) => line(name(r.month), r.imp, r.exp, 'm-' + r.month))}</tbody>
      <tfoot>${line(t('yearTotal', year), sum('imp'), sum('exp'), 'year')}</tfoot></table></div>` : html`<p>${t('noData')}</p>`)}`;
}

export function History() {
  const [date, setDate] = useState(deviceToday());
  const [day, setDay] = useState(null);
  const [dayErr, setDayErr] = useState('');
  const [start, setStart] = useState(addDays(deviceToday(), -29));
  const [days, setDays] = useState(30);
  const [range, setRange] = useState(null);
  const [rangeErr, setRangeErr] = useState('');
  const [excel, setExcel] = useState(getLang() === 'de');
  const [totals, setTotals] = useState(false); // asked for when opened: a page visit costs the device no more

  const loadDay = async (d) => {
    setDayErr('');
    try {
      setDay(await api('/history/highRes?date=' + d));
    } catch (e) {
      setDay(null);
      setDayErr(errText(e));
    }
  };
  const loadRange = async (s, n) => {
    setRangeErr('');
    try {
      setRange(await api('/history/lowRes?start=' + s + '&days=' + n));
    } catch (e) {
      setRange(null);
      setRangeErr(errText(e));
    }
  };
  useEffect(() => {
    loadDay(date);
    loadRange(start, days);
  }, []);

  const n = day ? day.items.length : 0;
  const kind = dstKind(day ? day.items : []);
  return html`<section aria-labelledby="h-hist">
    <h1 id="h-hist">${t('history')}</h1>
    <p class="small">${t('tzNote')}</p>
    <label class="small"><input type="checkbox" name="excel" checked=${excel} onChange=${(e) => setExcel(e.target.checked)} /> ${t('csvExcel')}</label>
    <h2>${t('day')}</h2>
    <form class="row" onSubmit=${(e) => { e.preventDefault(); loadDay(date); }}>
      <label>${t('day')} <input type="date" name="date" value=${date} required onInput=${(e) => setDate(e.target.value)} /></label>
      <button type="submit">${t('show')}</button>
      <button type="button" disabled=${!n} onClick=${() => download('meterplus-' + date + '.csv', csv(DAY_COLS, day.items, excel), 'text/csv')}>${t('csv')}</button>
    </form>
    <${Msg} kind="err">${dayErr}<//>
    ${day && (n
      ? html`<p data-test="day-summary">${t('quarterHours', n)}${kind} · ${t('importKWh')}: ${num(day.import_total_kWh, 3)} · ${t('exportKWh')}: ${num(day.export_total_kWh, 3)}</p>
          <${DayCharts} items=${day.items} />`
      : html`<p>${t('noData')}</p>`)}
    <h2>${t('range')}</h2>
    <form class="row" onSubmit=${(e) => { e.preventDefault(); loadRange(start, days); }}>
      <label>${t('from')} <input type="date" name="start" value=${start} required onInput=${(e) => setStart(e.target.value)} /></label>
      <label>${t('days')} <select name="days" value=${days} onChange=${(e) => setDays(+e.target.value)}>
        ${[7, 14, 31, 92, 183, 366].concat([30].filter(() => ![7, 14, 31, 92, 183, 366].includes(days))).sort((a, b) => a - b).map((d) => html`<option value=${d}>${d}</option>`)}
      </select></label>
      <button type="submit">${t('show')}</button>
      <button type="button" disabled=${!(range && range.items.length)} onClick=${() => download('meterplus-' + start + '-' + days + 'd.csv', csv(RANGE_COLS, range.items, excel), 'text/csv')}>${t('csv')}</button>
    </form>
    <${Msg} kind="err">${rangeErr}<//>
    ${range && (range.items.length
      ? html`<p data-test="range-summary">${t('nDays', range.items.length)} · ${t('importKWh')}: ${num(range.import_total_kWh, 3)} · ${t('exportKWh')}: ${num(range.export_total_kWh, 3)}</p>
          <${RangeChart} items=${range.items} />`
      : html`<p>${t('noData')}</p>`)}
    <details data-test="totals-box" onToggle=${(e) => setTotals(e.target.open)}><summary><h2>${t('totals')}</h2></summary>
      ${totals && html`<${Totals} />`}</details>
  </section>`;
}
