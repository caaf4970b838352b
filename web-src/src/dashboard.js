// Dashboard: signed power, totals, the other readings, meter health; one request per 4 s, info every 20 s.
import { useEffect, useMemo, useState } from 'preact/hooks';
import { api, bus, poller } from './api.js';
import { Chart, steps } from './chart.js';
import { num, obisName, t } from './i18n.js';
import { Msg, Table, deviceToday, deviceUtc, errText, html, sectionMap, useInfo } from './ui.js';

export const LATEST_MS = 4000;
export const INFO_MS = 20000;
export const TODAY_MS = 300000; // today's energies: the day's quarter hours change every 15 min
const LIVE_S = 900; // the live chart: the last 15 minutes, from the device's own recent power, then what the page polls

// The last minutes of power from the readings the dashboard polled: [times, watts]; a 204 or an unreachable device
// adds a gap (null), never a repeated value. Times are the readings' own; labels in the device's local time.
function addLive(live, at, watts) {
  const keep = live[0].findIndex((x) => x > at - LIVE_S);
  const from = keep < 0 ? live[0].length : keep;
  if (live[0].length && at <= live[0][live[0].length - 1]) return live; // the same reading polled twice
  return [[...live[0].slice(from), at], [...live[1].slice(from), watts]];
}

// The device's recent power (GET /history/recent, 10 s slots, a slot without a reading left out) under what this tab
// polled since: a missing slot becomes a gap (null), never a line across it.
function seed(live, points) {
  const xs = [];
  const ys = [];
  for (const [x, y] of points) {
    if (xs.length && x - xs[xs.length - 1] > 20) {
      xs.push(xs[xs.length - 1] + 10);
      ys.push(null);
    }
    xs.push(x);
    ys.push(y);
  }
  const from = live[0].findIndex((x) => x > (xs[xs.length - 1] || 0));
  return from < 0 ? [xs, ys] : [[...xs, ...live[0].slice(from)], [...ys, ...live[1].slice(from)]];
}

function LiveChart({ live, offset }) {
  const opts = useMemo(() => {
    const hm = (v) => new Date((v + offset) * 1000).toISOString().slice(11, 16);
    return {
      height: 150,
      scales: { x: { time: false } },
      axes: [{ values: (u, vals) => vals.map(hm), space: 60 }, { size: 56 }],
      series: [{ label: t('time'), value: (u, v) => (v === null ? '–' : hm(v)) },
        { label: t('powerW'), stroke: '#2563eb', width: 2, paths: steps, value: (u, v) => (v === null ? '–' : num(v, 0)) }],
    };
  }, [offset]);
  return html`<div class="card" data-test="live" data-n=${live[0].length} data-last=${JSON.stringify(live[1].slice(-5))}><h2>${t('livePower')}</h2>
    <${Chart} opts=${opts} data=${live} label=${t('livePower')} /></div>`;
}

export function Dashboard() {
  const [latest, setLatest] = useState(undefined); // undefined: not loaded; null: 204 (meter silent)
  const [today, setToday] = useState(null);
  const [err, setErr] = useState('');
  const [live, setLive] = useState([[], []]);
  // The shell polls /system/info for the status strip; the meter health and the live chart's clock read it.
  const info = useInfo();
  const meter = info ? sectionMap(info.meter) : null;
  const offset = info ? +sectionMap(info.clock).utc_offset_min * 60 || 0 : 0; // the device's UTC offset (s)
  useEffect(() => {
    let seeded = false;
    const stopLatest = poller(async () => {
      try {
        const r = await api('/history/latest');
        // The device's recent power, once, after the first answer: not in the burst of requests a page opens with
        // (the device has two connection slots and sheds a third).
        if (!seeded) {
          seeded = true;
          api('/history/recent').then((x) => setLive((l) => seed(l, x.points)), () => {});
        }
        setLatest(r);
        setErr('');
        if (r && r.timestamp && r['16.7.0']) {
          setLive((l) => addLive(l, r.timestamp, r['16.7.0'].value));
        } else setLive((l) => addLive(l, Math.round(deviceUtc()), null));
      } catch (e) {
        setErr(errText(e));
        if (!e.status || e.status >= 500) setLatest(undefined); // device unreachable: old values are not shown
        setLive((l) => addLive(l, Math.round(deviceUtc()), null));
        throw e;
      }
    }, LATEST_MS);
    // Today's import, export and balance: the totals of today's quarter hours (highRes), every 5 minutes.
    const stopToday = poller(async () => setToday(await api('/history/highRes?date=' + deviceToday())), TODAY_MS);
    // Any request that finds the device gone (the strip's info, today's totals) clears the readings at once: the
    // banner "not reachable" never stands beside a value from before.
    const onOffline = (e) => e.detail && setLatest(undefined);
    bus.addEventListener('offline', onOffline);
    return () => {
      stopLatest();
      stopToday();
      bus.removeEventListener('offline', onOffline);
    };
  }, []);

  const stale = latest === null; // 204: no current reading, never the last value
  const p = latest && latest['16.7.0'] ? latest['16.7.0'].value : null;
  const dir = p === null ? '' : p > 0 ? 'import' : p < 0 ? 'export' : 'idle';
  const total = (k) => (latest === undefined ? '…' : latest && latest[k] ? num(latest[k].value, 3) + ' kWh' : t('unknown'));
  const age = latest && latest.timestamp ? Math.max(0, Math.round(deviceUtc() - latest.timestamp)) : null;
  const others = latest
    ? Object.keys(latest)
        .filter((k) => /^\d+\.\d+\.\d+$/.test(k) && !['16.7.0', '1.8.0', '2.8.0'].includes(k))
        .map((k) => [obisName(k, latest[k].name), num(latest[k].value, latest[k].unit === 'W' ? 0 : 2) + ' ' + latest[k].unit])
    : [];
  return html`<section aria-labelledby="h-dash">
    <h1 id="h-dash">${t('dashboard')}</h1>
    <${Msg} kind="err">${err}<//>
    ${stale && html`<p class="msg warn" role="status" data-test="stale">${t('stale')}</p>`}
    <div class="cards">
      <div class=${'card power ' + dir} data-test="power">
        <h2>${t('power')}</h2>
        <p class="big">${latest === undefined ? '…' : p === null ? t('unknown') : num(Math.abs(p), 0) + ' W'}</p>
        <p class="dir">${dir === 'import' ? '↓ ' + t('importing') : dir === 'export' ? '↑ ' + t('exporting') : dir === 'idle' ? t('idle') : ''}</p>
        ${p !== null && html`<p class="small">${t('power')}: ${num(p, 0)} W</p>`}
      </div>
      <div class="card" data-test="import"><h2>${t('importTotal')}</h2><p class="big">${total('1.8.0')}</p></div>
      <div class="card" data-test="export"><h2>${t('exportTotal')}</h2><p class="big">${total('2.8.0')}</p></div>
      ${today && html`<div class="card" data-test="today"><h2>${t('today')}</h2>
        <p class="big" data-test="balance">${(today.import_total_kWh - today.export_total_kWh >= 0 ? '' : '−') + num(Math.abs(today.import_total_kWh - today.export_total_kWh), 3)} kWh</p>
        <p class="dir">${today.import_total_kWh === today.export_total_kWh ? t('balanceEven') : today.import_total_kWh > today.export_total_kWh ? t('balanceImport') : t('balanceExport')}</p>
        <p class="small"><span data-test="today-import">${t('importing')}: ${num(today.import_total_kWh, 3)} kWh</span> ·
          <span data-test="today-export">${t('exporting')}: ${num(today.export_total_kWh, 3)} kWh</span></p></div>`}
    </div>
    ${live[0].length > 1 && html`<${LiveChart} live=${live} offset=${offset} />`}
    <h2>${t('meterHealth')}</h2>
    <${Table} rows=${[
      [t('lastTelegram'), age === null ? t('unknown') : t('secondsAgo', age)],
      [t('protocol'), (meter && meter.protocol) || t('unknown')],
      [t('telegrams'), meter ? meter.telegrams_ok : '–'],
      [t('crcErrors'), meter ? meter.crc_errors : '–'],
      // One verdict in words: a silent meter is not "OK (stale)".
      [t('state'), !meter ? '–' : meter.stale || +meter.age_s < 0 ? t('stMeterStale', meter.age_s) : meter.state === 'OK' ? t('stateOk') : meter.state],
    ]} />
    ${others.length > 0 && html`<h2>${t('values')}</h2><${Table} rows=${others} />`}
    ${latest && latest.datetime && html`<p class="small">${t('updated')}: ${latest.datetime.replace('T', ' ')}</p>`}
  </section>`;
}
