// System: the device in words and local time (the raw /system/info tables folded away), the LED, logs as tables with
// the rawdump download, OTA check/start and upload, reboot, outages.
import { useEffect, useState } from 'preact/hooks';
import { api, download, parseCsv, poller } from './api.js';
import { getLang, known, t } from './i18n.js';
import { RestartButton, RestartWait } from './settings.js';
import { Msg, Table, errText, html, lastInfo, mqttWords, noteInfo, sectionMap, span, wifiDown } from './ui.js';

// A log as a table, newest first; `live` offers a tail that asks again every 5 s while the box is ticked and the
// tab is visible (2 requests per 10 s; it stops when the page is left).
const PAGE = 50; // log lines per page
function Log({ path, title, name, live, zone }) {
  const [rows, setRows] = useState(null);
  const [err, setErr] = useState('');
  const [tail, setTail] = useState(false);
  const [q, setQ] = useState('');
  const [from, setFrom] = useState(0);
  const load = async () => {
    try {
      const text = await api(path, { as: 'text' });
      setRows(parseCsv(text || ''));
      setErr('');
    } catch (e) {
      setErr(errText(e));
    }
  };
  useEffect(() => (tail ? poller(load, 5000) : undefined), [tail]);
  return html`<div class="card" data-test=${name}><h3>${title}</h3>
    <div class="row"><button type="button" onClick=${load}>${t('load')}</button>
      ${live && html`<label class="check"><input type="checkbox" data-test="live" checked=${tail} onChange=${(e) => setTail(e.target.checked)} /> ${t('liveTail')}</label>`}</div>
    <${Msg} kind="err">${err}<//>
    ${rows && (rows.length > 1 ? html`<${LogTable} rows=${rows} q=${q} setQ=${(v) => { setQ(v); setFrom(0); }} from=${from} setFrom=${setFrom} zone=${zone} name=${name} />`
      : html`<p>${t('empty')}</p>`)}</div>`;
}

// Newest first, UTC stamps in the device's local time, a filter over every column, 50 lines a page.
function LogTable({ rows, q, setQ, from, setFrom, zone, name }) {
  const tcol = rows[0].indexOf('time');
  const head = rows[0].map((h, i) => (i === tcol ? t('logTime') : h));
  const needle = q.trim().toLowerCase();
  const all = rows.slice(1).reverse().filter((r) => !needle || r.join(' ').toLowerCase().includes(needle));
  const shown = all.slice(from, from + PAGE).map((r) => r.map((c, i) => (i === tcol && c ? localTime(Date.parse(c) / 1000, zone, true) : c)));
  return html`<div class="row"><label for=${name + '-q'}>${t('logFilter')}</label>
      <input id=${name + '-q'} type="search" value=${q} onInput=${(e) => setQ(e.target.value)} data-test="log-filter" /></div>
    <${Table} cls="log" head=${head} rows=${shown} />
    <div class="row"><button type="button" disabled=${from === 0} onClick=${() => setFrom(Math.max(0, from - PAGE))}>${t('logNewer')}</button>
      <span data-test="log-range">${all.length ? t('logRange', from + 1, Math.min(all.length, from + PAGE), all.length) : t('empty')}</span>
      <button type="button" disabled=${from + PAGE >= all.length} onClick=${() => setFrom(from + PAGE)}>${t('logOlder')}</button></div>`;
}

const REASONS = ['power', 'brownout', 'watchdog', 'crash', 'ota', 'rollback', 'restart', 'button', 'reset_pin', 'software', 'first_start', 'unknown'];

// Outage journal: fetched once when the page opens (never polled: the device's request budget is small).
// Times in the device's time zone when /system/info named it, else the browser's.
function Outages({ zone }) {
  const [list, setList] = useState(null);
  const [err, setErr] = useState('');
  useEffect(() => {
    api('/system/outages').then((r) => setList(r.outages.slice(0, 50)), (e) => setErr(errText(e)));
  }, []);
  const when = (ts) => (ts ? localTime(ts, zone) : t('unknown'));
  const reason = (r) => t('why_' + (REASONS.includes(r) ? r : 'unknown'));
  return html`<div class="card" data-test="outages"><h2>${t('outages')}</h2>
    <${Msg} kind="err">${err}<//>
    ${list && (list.length
      ? html`<${Table} head=${[t('outDown'), t('outUp'), t('outDuration'), t('outReason')]}
          rows=${list.map((o) => [o.reason === 'first_start' ? '–' : when(o.down), when(o.up), o.duration_s === null ? t('unknown') : span(o.duration_s), reason(o.reason)])} />`
      : html`<p>${t('noOutages')}</p>`)}</div>`;
}

// A moment as people read it, in the device's time zone when it has one.
function localTime(ts, zone, seconds) {
  const o = { dateStyle: 'medium', timeStyle: seconds ? 'medium' : 'short' };
  const loc = getLang() === 'de' ? 'de-DE' : 'en-GB';
  try {
    return new Date(ts * 1000).toLocaleString(loc, zone ? { ...o, timeZone: zone } : o);
  } catch (e) {
    return new Date(ts * 1000).toLocaleString(loc, o);
  }
}

const RESET = { POWER_ON: 'poweron', BROWNOUT: 'brownout', WATCHDOG: 'watchdog', SOFTWARE: 'software', RESET_PIN: 'reset_pin' };

// /system/info in sentences: what a person asks of the device, not its field names.
function Overview({ info }) {
  const [up, wifi, ap, esp, meter, clock, heap, mqtt, modbus] =
    ['uptime', 'wifi', 'ap', 'esp', 'meter', 'clock', 'heap', 'mqtt', 'modbus'].map((k) => sectionMap(info[k]));
  const zone = clock.timezone || '';
  const now = clock.utc || Date.now() / 1000;
  const kb = (b) => (b === '' || b === undefined ? '?' : Math.round(b / 1024));
  const dbm = +wifi.signal_strength;
  const rows = [
    [t('sysDevice'), `${esp.device_name} · ID ${esp.esp_id} · Firmware ${esp.os_version}`],
    [t('sysUp'), t('sysUpFor', span(up.uptime || 0), localTime(now - (up.uptime || 0), zone), t('why_' + (RESET[up.reset_reason] || 'unknown')))],
    [t('stWifi'), wifi.connected ? t('sysWifiOn', wifi.ssid, dbm, t(dbm >= -60 ? 'sigGood' : dbm >= -70 ? 'sigFair' : 'sigWeak'), wifi.ip_address, wifi.mdns_name) : wifiDown(wifi)],
    [t('stApName'), ap.active ? t('sysApOn', ap.ssid, ap.ip) : t('stOff')],
    [t('stMeter'), meter.state === undefined ? t('stMeterNone') : t('sysMeter', String(meter.protocol || '').toUpperCase(), meter.telegrams_ok, meter.crc_errors,
      meter.stale || +meter.age_s < 0 ? t('stMeterStale', meter.age_s) : t('stMeterLive', meter.age_s))],
    [t('stClock'), clock.synced ? t('sysClock', localTime(now, zone), zone, clock.server) : t('stClockNot')],
    [t('sysHeap'), t('sysHeapFree', kb(heap.free), kb(heap.largest_block))],
    ['MQTT', mqttWords(mqtt)[1]],
    ['Modbus', modbus.enabled ? t('stModbusOn', modbus.clients || 0) + ' · Port ' + modbus.port + ' · SunSpec ' + modbus.model : t('stOff')],
  ];
  if (info.features_off && info.features_off.length) rows.push([t('sysOff'), info.features_off.map((e) => e.name + ': ' + e.value).join('; ')]);
  return html`<div class="card" data-test="overview"><h2>${t('info')}</h2><dl class="facts">
    ${rows.map(([k, v]) => html`<dt>${k}</dt><dd>${v}</dd>`)}</dl></div>`;
}

export function System() {
  const [info, setInfo] = useState(null);
  const [led, setLed] = useState(null);
  const [err, setErr] = useState('');
  const [ota, setOta] = useState(null);
  useEffect(() => {
    api('/system/info').then((i) => { noteInfo(i); setInfo(i); }, (e) => setErr(errText(e)));
    api('/system/led').then(setLed, () => {});
  }, []);
  const rawdump = async () => {
    try {
      const blob = await api('/logs/rawdump', { as: 'blob' });
      if (blob) download('rawdump.bin', blob);
      else setErr(t('empty'));
    } catch (e) {
      setErr(errText(e));
    }
  };
  // The check runs in the background on the device: asked again while it says checking (every 2 s, 15 times at
  // most); no server configured, a failed check and "none available" are three different answers.
  const otaCheck = async () => {
    setOta(['', t('otaChecking')]);
    try {
      let d;
      for (let i = 0; i < 15; i++) {
        d = (await api('/ota/check')).data;
        if (d.state !== 'checking') break;
        await pause(2000);
      }
      const mine = d.installed_version || d.version;
      setOta(d.server_configured === false ? ['warn', t('otaNoServer', mine)] : d.update_available ? ['', t('otaAvail', d.version)]
        : d.error ? ['err', t('otaFailed', d.message || d.error)] : ['', t('otaNone', mine)]);
    } catch (e) {
      setOta(['err', errText(e)]);
    }
  };
  const otaStart = async () => {
    // An update restarts the device: asked first, as restart is (a framed or mistaken click changes nothing).
    if (!confirm(t('confirmOta'))) return;
    try {
      const r = await api('/ota/start', { method: 'POST' });
      setOta([r.ok ? 'ok' : 'err', known('o_' + r.code, r.version) || r.message || String(r.ok)]);
    } catch (e) {
      setOta(['err', errText(e)]);
    }
  };
  const zone = info && info.clock ? (info.clock.find((e) => e.name === 'timezone') || {}).value : '';
  const rgb = led && led.rgb ? `rgb(${led.rgb.r},${led.rgb.g},${led.rgb.b})` : '#000';
  return html`<section aria-labelledby="h-sys">
    <h1 id="h-sys">${t('system')}</h1>
    <${Msg} kind="err">${err}<//>
    ${info && info.settings && info.settings.some((e) => e.name === 'damaged' && e.value)
      ? html`<p class="msg err" role="alert" data-test="settings-damaged">${t('settingsDamaged')}</p>` : ''}
    ${info && html`<${Overview} info=${info} />`}
    ${led && html`<div class="card" data-test="led"><h2>${t('led')}</h2>
      <p><span class="swatch" style=${'background:' + rgb}></span> ${[led.status, led.color, led.mode].map((w) => known('led_' + w) || w).join(' · ')}${led.enabled ? '' : ' (' + t('stOff') + ')'}</p></div>`}
    <div class="card"><h2>${t('ota')}</h2><div class="row">
      <button type="button" onClick=${otaCheck}>${t('otaCheck')}</button>
      <button type="button" onClick=${otaStart}>${t('otaStart')}</button></div>
      ${ota && html`<${Msg} kind=${ota[0]}>${ota[1]}<//>`}<${Updated} /><${UploadBox} /></div>
    <div class="card"><h2>${t('reboot')}</h2><${RestartButton} /></div>
    <${Outages} zone=${zone} />
    <h2>${t('logs')}</h2>
    <${Log} path="/logs/persistent" title=${t('persistentLog')} name="log-persistent" zone=${zone} />
    <${Log} path="/logs/ram" title=${t('ramLog')} name="log-ram" live zone=${zone} />
    <div class="row"><button type="button" onClick=${rawdump}>${t('rawdump')}</button></div>
    ${info && html`<details class="card" data-test="info-raw"><summary>${t('sysRaw')}</summary>${Object.keys(info).sort().map((sec) => html`<div data-test=${'info-' + sec}><h3>${sec}</h3>
      <${Table} rows=${info[sec].map((e) => [e.name, String(e.value) + (e.unit ? ' ' + e.unit : '')])} /></div>`)}</details>`}
  </section>`;
}

const pause = (ms) => new Promise((r) => setTimeout(r, ms));
const PIECE_MS = 700; // 8 KB (the device's body limit) every 0.7 s: 14.3 pieces per 10 s + the shell's info poll stay within
// the 15 of 25 one address may hold while another client (Home Assistant) polls (services/api/service.py RateLimiter)

// After an update from this page restarted the device: the version now running and whether it is on trial (it
// becomes final after 3 healthy minutes; 3 failed boots roll it back), or that it was not taken.
function Updated() {
  const [text, setText] = useState('');
  useEffect(() => {
    const from = sessionStorage.getItem('mp.otaFrom');
    if (from === null) return;
    sessionStorage.removeItem('mp.otaFrom');
    api('/ota/check').then((r) => {
      const d = r.data;
      const now = d.installed_version || d.version;
      setText(now === from ? t('otaNotTaken', now) : t(d.state === 'trial' ? 'otaTrial' : 'otaNow', from, now));
    }, () => {});
  }, []);
  return text && html`<p class="msg ok" role="status" data-test="ota-result">${text}</p>`;
}

// A signed release archive (tools.ota_manifest --archive) from a file: sent in 8 KB pieces at their offsets; a 409
// (signature being checked, busy) sends again from what the device has, a piece lost at the network is sent again;
// once the device has it all it installs and restarts, and the waiting view reloads the page.
function UploadBox() {
  const [msg, setMsg] = useState(null);
  const [pct, setPct] = useState(null);
  const [waiting, setWaiting] = useState(false);
  const go = async (e) => {
    const f = e.target.files && e.target.files[0];
    e.target.value = '';
    if (!f || !confirm(t('confirmUpload', f.name))) return;
    const data = new Uint8Array(await f.arrayBuffer());
    let offset = 0;
    let again = 0;
    let drops = 0;
    let sent = 0; // when the last piece left: pieces are paced under the device's request limit (PIECE_MS), so
    // the upload never meets a 429 and its "busy" banner
    const from = (lastInfo.value && sectionMap(lastInfo.value.esp).os_version) || '';
    setMsg(['', t('uploading', f.name)]);
    setPct(0);
    for (;;) {
      let r;
      await pause(Math.max(0, sent + PIECE_MS - Date.now()));
      sent = Date.now();
      try {
        r = await api('/ota/upload?offset=' + offset, { method: 'POST', body: data.subarray(offset, offset + 8192) });
        again = drops = 0;
      } catch (x) {
        // A piece lost at the network (the device shed the connection, WiFi dropped) is sent again: pieces carry
        // their offset, and a device that had taken it answers 409 with what it has.
        if (x.status === 0 && drops++ < 5) {
          await pause(1000 * drops);
          continue;
        }
        if (x.status === 409 && x.body && again++ < 60) {
          offset = x.body.received;
          await pause(2000);
          continue;
        }
        setPct(null);
        setMsg(['err', (x.body && (known('o_' + x.body.error) || x.body.message)) || errText(x)]);
        return;
      }
      offset = r.received;
      setPct(Math.min(100, Math.floor((offset * 100) / data.length)));
      if (r.done) {
        sessionStorage.setItem('mp.otaFrom', from); // after the restart the System page says what came of it
        setMsg(['ok', t('o_done')]);
        setWaiting(true);
        return;
      }
      if (offset >= data.length) await pause(1000); // all sent: the device is checking the last files
    }
  };
  return html`<div class="sub" data-test="ota-upload"><label class="button">${t('otaUpload')}<input type="file" accept=".tar,application/x-tar" class="visually-hidden" data-test="ota-file" onChange=${go} /></label>
    ${pct !== null && html` <progress max="100" value=${pct} aria-label=${t('otaUpload')}>${pct} %</progress>`}
    ${msg && html`<${Msg} kind=${msg[0]}>${msg[1]}<//>`}${waiting && html`<${RestartWait} />`}</div>`;
}
