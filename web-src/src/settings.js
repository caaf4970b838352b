// Settings: every key of the settings document in sections; the rules checked here first, the device's 400 fields
// shown next to the fields, the spec's confirmations, and what applies now or after a restart.
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, api, download } from './api.js';
import { fieldLabel, num, t } from './i18n.js';
import { SCHEMA, SECRETS, check, crossCheck } from './rules.js';
import { Msg, deviceUtc, errText, getPath, html, mqttWords, sectionMap, useInfo } from './ui.js';

const wifi = (p) => ['ssid', 'password', 'enable', 'static_ip', 'ip', 'subnet', 'gateway', 'dns'].map((k) => `wifi.${p}.${k}`);
export const SECTIONS = [
  ['general', ['device_name', 'language.active', 'timezone', 'ntp_server', 'ledEnable', 'autoOta', 'ota.url', 'history.flushMinutes']],
  ['meter', ['medianFilterSize', 'ctRatio']],
  ['wifiPrimary', wifi('primary')],
  ['wifiSecondary', wifi('secondary')],
  ['ap', ['accessPoint.enable', 'accessPoint.ssid', 'accessPoint.password_enable', 'accessPoint.password']],
  ['mqtt', ['mqtt.enable', 'mqtt.host', 'mqtt.port', 'mqtt.use_tls', 'mqtt.user', 'mqtt.password', 'mqtt.client_id',
    'mqtt.topic_prefix', 'mqtt.sendInterval', 'mqtt.discovery_prefix']],
  ['modbus', ['modbus.enable', 'modbus.port', 'modbus.model']],
  ['cloud', ['cloudIotEnabled', 'cloud.host', 'cloud.port']],
  ['emulation', ['shelly', 'shellyUdpPort', 'shellyUdpPort2', 'sma', 'smaSerial', 'smaSusyId', 'smaTargets'].map((k) => 'emulation.' + k)],
];
const fid = (key) => 'f-' + key.replace(/\./g, '-');

// Input text -> the JSON value the device expects (NaN for a number that does not parse: check() reports it).
function parse(key, raw) {
  const kind = SCHEMA[key][0];
  if (kind === 'int') return /^-?\d+$/.test(raw.trim()) ? parseInt(raw, 10) : NaN;
  if (kind === 'ratio') return /^\d+([.,]\d+)?$/.test(raw.trim()) ? parseFloat(raw.replace(',', '.')) : NaN;
  if (kind === 'choice') return +raw;
  return raw;
}
const initial = (doc, key) => {
  const kind = SCHEMA[key][0];
  if (SECRETS.includes(key)) return '';
  const v = getPath(doc, key);
  return kind === 'bool' ? !!v : v === undefined || v === null ? '' : String(v);
};
const pwSet = (doc, key) => !!getPath(doc, key.replace(/password$/, 'password_set'));

function Field({ k, value, error, doc, zones, onChange, clear, onClear }) {
  const [kind, a] = SCHEMA[k];
  const id = fid(k);
  const err = error && html`<span class="ferr" id=${id + '-err'} role="alert">${error}</span>`;
  const common = { id, name: k, 'aria-invalid': error ? 'true' : undefined, 'aria-describedby': error ? id + '-err' : undefined };
  if (kind === 'bool')
    return html`<div class="field check"><label><input type="checkbox" ...${common} checked=${value}
      onChange=${(e) => onChange(k, e.target.checked)} /> ${fieldLabel(k)}</label>${err}
      ${k === 'autoOta' && !/^https?:\/\/[^/:]+(?<!\.invalid)(:\d+)?\//.test(getPath(doc, 'ota.url') || '') && html` <span class="small" data-test="auto-ota-note">(${t('autoOtaNoServer')})</span>`}</div>`;
  let input;
  if (kind === 'choice')
    input = html`<select ...${common} value=${value} onChange=${(e) => onChange(k, e.target.value)}>
      ${a.map((v) => html`<option value=${String(v)}>${v === 0 && k === 'medianFilterSize' ? fieldLabel('off') : v}</option>`)}</select>`;
  else if (kind === 'lang')
    input = html`<select ...${common} value=${value} onChange=${(e) => onChange(k, e.target.value)}>
      ${((doc.language && doc.language.installed) || [{ code: 'de', name: 'Deutsch' }, { code: 'en', name: 'English' }]).map(
        (l) => html`<option value=${l.code}>${l.name}</option>`)}</select>`;
  else if (kind === 'zone')
    input = html`<select ...${common} value=${value} onChange=${(e) => onChange(k, e.target.value)}>
      ${(zones.some((z) => z.name === value) ? zones : [{ name: value, utcOffsetMin: null }, ...zones]).map((z) =>
        html`<option value=${z.name}>${z.name}${z.utcOffsetMin === null ? '' : ' (UTC' + (z.utcOffsetMin < 0 ? '−' : '+') +
          String(Math.floor(Math.abs(z.utcOffsetMin) / 60)).padStart(2, '0') + ':' + String(Math.abs(z.utcOffsetMin) % 60).padStart(2, '0') + ')'}</option>`)}</select>`;
  else {
    const secret = kind === 'wpa' || kind === 'secret';
    const numeric = kind === 'int' || kind === 'ratio';
    input = html`<input ...${common} type=${secret ? 'password' : 'text'} value=${value} autocomplete=${secret ? 'new-password' : 'off'}
      inputmode=${numeric ? 'decimal' : undefined} disabled=${secret && clear}
      placeholder=${secret ? t('keepPw') : ''} onInput=${(e) => onChange(k, e.target.value)} />`;
    if (secret)
      input = html`${input}<span class="small">${pwSet(doc, k) ? t('pwSet') : t('pwNotSet')}</span>
        ${pwSet(doc, k) && html`<label class="small"><input type="checkbox" name=${k + '.clear'} checked=${clear}
          onChange=${(e) => onClear(k, e.target.checked)} /> ${t('clearPw')}</label>`}`;
  }
  return html`<div class="field"><label for=${id}>${fieldLabel(k)}</label>${input}${err}</div>`;
}

// The device's reason for a field (English, core/settings.py check) in the page's language: the page's own reason
// for the value where it has one, else the device's common reasons by their pattern, else "not valid".
const DEVICE_WHY = [[/^at most (\d+) characters$/, 'r_len'], [/^at most (\d+) bytes$/, 'r_bytes'], [/^must be 1 to 10000$/, 'r_ratio'],
  [/^must be (-?\d+) to (-?\d+)$/, 'r_int'], [/^must be an IPv4 address/, 'r_ip'], [/^must be true or false$/, 'r_bool']];
export function deviceWhy(ours, why) {
  if (ours) return ours;
  for (const [re, key] of DEVICE_WHY) {
    const m = re.exec(why || '');
    if (m) return t(key, ...m.slice(1));
  }
  return t('r_bad');
}

// Fields that only mean something while another is on: the static address while static_ip is ticked.
const shown = (k, vals) => {
  const m = /^(wifi\.\w+\.)(ip|subnet|gateway|dns)$/.exec(k);
  return !m || !!vals[m[1] + 'static_ip'];
};
// A key's name as people read it (the answer's applied_now/after_restart lists keys).
const names = (list) => list.map(fieldLabel).join(', ');

function Section({ id, keys, doc, zones, onSaved, onDirty, hidden, epoch, children }) {
  const [vals, setVals] = useState(() => Object.fromEntries(keys.map((k) => [k, initial(doc, k)])));
  const [clears, setClears] = useState({});
  const [errors, setErrors] = useState({});
  const [msg, setMsg] = useState(null);
  const [busy, setBusy] = useState(false);
  const base = useRef(doc); // the document vals were taken from: a value that differs is the user's edit
  const join = useRef(null); // a WiFi section's "test and save" (JoinBox)
  const fresh = useRef(epoch);
  // Another section saved (the document reloads): keep this section's edits, take the rest from the new document.
  // After this section's own save or a restored backup, take everything.
  useEffect(() => {
    const all = fresh.current !== epoch;
    fresh.current = epoch;
    setVals((cur) => Object.fromEntries(keys.map((k) => [k, !all && cur[k] !== initial(base.current, k) ? cur[k] : initial(doc, k)])));
    if (all) setClears({});
    base.current = doc;
  }, [doc, epoch]);
  const dirty = keys.some((k) => vals[k] !== initial(base.current, k)) || Object.values(clears).some(Boolean);
  useEffect(() => onDirty(id, dirty), [dirty]);

  const onChange = (k, v) => {
    setVals({ ...vals, [k]: v });
    if (errors[k]) setErrors({ ...errors, [k]: '' });
  };
  // The page's own reason (in its language) for every shown field of this section as it stands, the rules across
  // keys included: what marks the fields before a join test and words the device's 400 fields.
  const reasons = () => {
    const out = {};
    const merged = JSON.parse(JSON.stringify(doc));
    for (const k of keys.filter((x) => shown(x, vals))) {
      const secret = SECRETS.includes(k);
      const v = secret ? vals[k] || null : SCHEMA[k][0] === 'bool' ? vals[k] : parse(k, vals[k]);
      const why = check(k, v);
      if (why) out[k] = why;
      if (!secret) {
        const parts = k.split('.');
        let n = merged;
        for (const p of parts.slice(0, -1)) n = n[p] = n[p] || {};
        n[parts[parts.length - 1]] = v;
      }
    }
    for (const [k, why] of Object.entries(crossCheck(merged, getPath))) if (keys.includes(k) && !out[k]) out[k] = why;
    return out;
  };
  // Errors on their fields, the first one focused; false when there are none.
  const mark = (errs) => {
    setErrors(errs);
    const first = keys.find((k) => errs[k]);
    if (first) document.getElementById(fid(first))?.focus();
    return !!first;
  };
  const submit = async (e) => {
    e.preventDefault();
    // A new network or password is tried before it is stored (issue 37): a wrong one stored untested took the
    // device off the network after the next restart.
    const w = keys[0].slice(0, -4); // wifi.primary.
    if (join.current && vals[w + 'enable'] && vals[w + 'ssid'] && (vals[w + 'password'] || vals[w + 'ssid'] !== initial(base.current, w + 'ssid'))) return join.current();
    const patch = {};
    const errs = {};
    for (const k of keys) {
      const secret = SECRETS.includes(k);
      let v = secret ? (clears[k] ? null : vals[k]) : SCHEMA[k][0] === 'bool' ? vals[k] : parse(k, vals[k]);
      if (secret && v === '') continue; // empty keeps the stored secret
      if (!secret && v === getPath(doc, k)) continue;
      if (!secret && typeof v === 'number' && v === +getPath(doc, k) && SCHEMA[k][0] !== 'text') continue;
      const why = check(k, v);
      if (why) errs[k] = why;
      else patch[k] = v;
    }
    // Rules across keys on the document as it would be after the change.
    const merged = JSON.parse(JSON.stringify(doc));
    for (const k in patch) {
      const parts = k.split('.');
      let n = merged;
      for (const p of parts.slice(0, -1)) n = n[p] = n[p] || {};
      n[parts[parts.length - 1]] = patch[k];
    }
    const touched = keys.some((k) => k in patch);
    if (touched) Object.assign(errs, Object.fromEntries(Object.entries(crossCheck(merged, getPath)).filter(([k]) => keys.includes(k) && !errs[k])));
    setErrors(errs);
    if (Object.keys(errs).length) {
      setMsg(['err', t('fixErrors')]);
      document.getElementById(fid(Object.keys(errs)[0]))?.focus();
      return;
    }
    if (!Object.keys(patch).length) {
      setMsg(['', t('nothingChanged')]);
      return;
    }
    // The spec's confirmations: AP protection with no password; a WiFi SSID change with an empty password.
    if (keys.includes('accessPoint.password_enable')) {
      const on = getPath(merged, 'accessPoint.password_enable');
      const hasPw = patch['accessPoint.password'] ? true : patch['accessPoint.password'] === null ? false : pwSet(doc, 'accessPoint.password');
      if (on && !hasPw && ('accessPoint.password_enable' in patch || 'accessPoint.password' in patch) && !confirm(t('confirmAp'))) return;
    }
    setBusy(true);
    setMsg(null);
    try {
      const r = await api('/settings', { method: 'POST', body: patch });
      const parts = [t('saved')];
      if (r.applied_now && r.applied_now.length) parts.push(t('appliedNow', names(r.applied_now)));
      if (r.after_restart && r.after_restart.length) parts.push(t('afterRestart', names(r.after_restart)));
      if ((r.warnings || []).some((w) => w.startsWith('mdns_txt'))) parts.push(t('mdnsTxt'));   // issue 36: discovery
      setMsg(['ok', parts.join(' '), r.restart_required]);
      onSaved(id);
      // MQTT connects with the new settings at once: its answer (connected, or why not) joins "saved" within
      // seconds, not at the strip's next poll.
      if (id === 'mqtt') {
        for (let i = 0; i < 10; i++) {
          await new Promise((ok) => setTimeout(ok, 1500));
          const st = await api('/mqtt/status').catch(() => null);
          if (!st) break;
          if (!['INIT', 'CONNECTING'].includes(st.state) || i === 9) {
            const w = mqttWords({ conn: st.state, error: st.last_error, retry_s: st.retry_in_s });
            setMsg([w[0] === 'err' ? 'err' : 'ok', parts.join(' ') + ' MQTT: ' + w[1], r.restart_required]);
            break;
          }
        }
      }
    } catch (ex) {
      if (ex instanceof ApiError && ex.fields) {
        const mine = {};
        const other = [];
        const ours = reasons();
        for (const k of Object.keys(ex.fields)) (keys.includes(k) ? (mine[k] = deviceWhy(ours[k], ex.fields[k])) : other.push(fieldLabel(k)));
        mark(mine);
        setMsg(['err', t('fixErrors') + (other.length ? ' — ' + other.join(', ') : '')]);
      } else setMsg(['err', errText(ex)]);
    } finally {
      setBusy(false);
    }
  };
  return html`<form class="card section" id=${'s-' + id} onSubmit=${submit} novalidate hidden=${hidden}>
    <h2>${t(id)}</h2>
    ${id === 'ap' && html`<${ApNow} />`}
    ${id === 'emulation' && html`<${EmuHelp} doc=${doc} />`}
    ${id === 'mqtt' && html`<${MqttNow} />`}
    ${id === 'mqtt' && html`<${MqttTest} vals=${vals} reasons=${reasons} mark=${mark} />`}
    ${keys.filter((k) => shown(k, vals)).map((k) => html`<${Field} k=${k} value=${vals[k]} error=${errors[k]} doc=${doc} zones=${zones} onChange=${onChange}
      clear=${!!clears[k]} onClear=${(kk, c) => setClears({ ...clears, [kk]: c })} />`)}
    ${/^wifi\.\w+\.ssid$/.test(keys[0]) && html`<${ScanBox} onPick=${(ssid) => onChange(keys[0], ssid)} />`}
    ${/^wifi\.\w+\.ssid$/.test(keys[0]) && html`<${JoinBox} run=${join} profile=${keys[0].split('.')[1]} vals=${vals} onSaved=${() => onSaved(id)} reasons=${reasons} mark=${mark} />`}
    <div class="row"><button type="submit" disabled=${busy}>${t('save')}</button></div>
    ${msg && html`<${Msg} kind=${msg[0]}>${msg[1]}<//>`}
    ${msg && msg[2] && html`<${RestartButton} />`}
    ${children}
  </form>`;
}

// Try the section's WiFi credentials before they are stored (POST /wifi/join): the device joins with its access
// point kept up and stores them only when the join worked, so a wrong password never locks the owner out; the
// answer names the address the device has there before the phone leaves the access point.
function JoinBox({ run, profile, vals, onSaved, reasons, mark }) {
  const [msg, setMsg] = useState(null);
  const [busy, setBusy] = useState(false);
  const go = async () => {
    const p = `wifi.${profile}.`;
    const body = { profile, ssid: vals[p + 'ssid'] || '', password: vals[p + 'password'] || '' };
    if (vals[p + 'static_ip']) for (const k of ['static_ip', 'ip', 'subnet', 'gateway', 'dns']) body[k] = vals[p + k];
    if (mark(reasons())) {
      setMsg(['err', t('fixErrors')]);
      return;
    }
    if (!body.ssid) {
      setMsg(['err', t('joinNoSsid')]);
      return;
    }
    setBusy(true);
    setMsg(['', t('joining', body.ssid)]);
    try {
      const r = await api('/wifi/join', { method: 'POST', body });
      setMsg(['ok', t('joined', r.ssid, location.protocol + '//' + r.ip + '/', r.mdns_name)]);  // no URL literal in the page
      onSaved();
    } catch (e) {
      const reason = e instanceof ApiError && e.status === 422 && e.body ? e.body.reason : '';
      if (e instanceof ApiError && e.fields) {
        const ours = reasons();
        const p = `wifi.${profile}.`;
        mark(Object.fromEntries(Object.keys(e.fields).map((k) => [k.startsWith(p) ? k : p + k, deviceWhy(ours[k.startsWith(p) ? k : p + k], e.fields[k])])));
      }
      setMsg(['err', reason ? t('join_' + reason, body.ssid) : e.fields ? t('fixErrors') : errText(e)]);
    } finally {
      setBusy(false);
    }
  };
  run.current = go;
  return html`<div class="sub" data-test=${'join-' + profile}><div class="row">
    <button type="button" disabled=${busy} onClick=${go}>${t('joinTest')}</button></div>
    ${msg && html`<${Msg} kind=${msg[0]}>${msg[1]}<//>`}</div>`;
}

// After a restart was accepted: a waiting view that asks /system/alive every 4 s (open, no token; 2.5 requests per
// 10 s) from 3 s on, and reloads the page once the device answers again; after 2 minutes it says so.
export function RestartWait() {
  const [secs, setSecs] = useState(0);
  useEffect(() => {
    const t0 = Date.now();
    let stop = false;
    const tick = setInterval(() => setSecs(Math.round((Date.now() - t0) / 1000)), 1000);
    const probe = async () => {
      if (stop) return;
      if (Date.now() - t0 > 3000) {
        try {
          const r = await fetch('/api/v1/system/alive', { cache: 'no-store' });
          if (r.ok && !stop) {
            stop = true;
            location.reload();
            return;
          }
        } catch (e) { /* still down */ }
      }
      if (Date.now() - t0 < 120000) setTimeout(probe, 4000);
    };
    setTimeout(probe, 3000);
    return () => { stop = true; clearInterval(tick); };
  }, []);
  const late = secs >= 120;
  return html`<div class="overlay"><div class="dialog card" role="alertdialog" aria-live="polite" data-test="restart-wait">
    <h2>${t('restarting')}</h2><p>${late ? t('restartLate') : t('restartWait', secs)}</p>
    ${late && html`<button type="button" onClick=${() => location.reload()}>${t('reload')}</button>`}</div></div>`;
}

export function RestartButton() {
  const [state, setState] = useState('');
  const [waiting, setWaiting] = useState(false);
  const go = async () => {
    if (!confirm(t('confirmReboot'))) return;
    try {
      await api('/system/reboot', { method: 'POST' });
      setWaiting(true);
    } catch (e) {
      setState(errText(e));
    }
  };
  return html`<div class="row"><button type="button" class="warn" onClick=${go}>${t('restartNow')}</button> <span role="status">${state}</span></div>
    ${waiting && html`<${RestartWait} />`}`;
}

// What a backup leaves out: secrets (never sent by the device), what the device derives, the authentication switch
// (it has a flow of its own) and the WiFi and access point (a file must not move the device off the network the
// owner reaches it through; the settings page's join test does that safely).
const NOT_RESTORED = ['wifi', 'accessPoint', 'api_auth_required', 'language.installed'];

export function backupOf(doc) {
  const copy = JSON.parse(JSON.stringify(doc));
  const strip = (o) => {
    for (const k of Object.keys(o)) {
      if (/_set$/.test(k)) delete o[k];
      else if (o[k] && typeof o[k] === 'object' && !Array.isArray(o[k])) strip(o[k]);
    }
  };
  strip(copy);
  return { meterplus_backup: 1, saved: new Date().toISOString(), settings: copy };
}

export function restoreDoc(file) {
  if (!file || file.meterplus_backup !== 1 || !file.settings || typeof file.settings !== 'object') return null;
  const doc = JSON.parse(JSON.stringify(file.settings));
  for (const path of NOT_RESTORED) {
    const parts = path.split('.');
    let n = doc;
    for (const p of parts.slice(0, -1)) n = n && n[p];
    if (n && typeof n === 'object') delete n[parts[parts.length - 1]];
  }
  return doc;
}

// What a restore would change, setting by setting: [key, old, new] for each settings key the file holds a different
// value for (shown and asked before anything is sent).
export function restoreChanges(doc, body) {
  const out = [];
  for (const k of Object.keys(SCHEMA)) {
    const v = getPath(body, k);
    if (v !== undefined && JSON.stringify(v) !== JSON.stringify(getPath(doc, k))) out.push([k, getPath(doc, k), v]);
  }
  return out;
}
const shownValue = (v) => (v === true ? '✓' : v === false ? '✗' : v === '' || v === null || v === undefined ? '–' : String(v));

function BackupBox({ doc, onSaved }) {
  const [msg, setMsg] = useState(null);
  const [ask, setAsk] = useState(null); // [body, changes] while the owner looks at what would change
  const save = () => download('meterplus-settings.json', JSON.stringify(backupOf(doc), null, 1), 'application/json');
  const restore = async (e) => {
    const f = e.target.files && e.target.files[0];
    e.target.value = '';
    if (!f) return;
    let body = null;
    try {
      body = restoreDoc(JSON.parse(await f.text()));
    } catch (x) { /* not JSON: said below */ }
    if (!body) {
      setMsg(['err', t('restoreNotBackup')]);
      return;
    }
    const changes = restoreChanges(doc, body);
    setMsg(changes.length ? null : ['', t('nothingChanged')]);
    setAsk(changes.length ? [body, changes] : null);
  };
  const apply = async () => {
    const [body] = ask;
    setAsk(null);
    try {
      // Its own endpoint: the device itself refuses WiFi, access point and authentication keys in a backup, in any
      // spelling (a dotted "wifi.primary.ssid" once slipped past the filter above).
      const r = await api('/settings/restore', { method: 'POST', body });
      const dropped = (r.secrets_dropped || []).map((k) => (k.includes('.') ? fieldLabel(k) : k)).join(', ');
      setMsg(['ok', t('restored', (r.changed || []).length) + (dropped ? ' ' + t('secretsDropped', dropped) : '')]);
      onSaved();
    } catch (x) {
      const fields = x.fields ? Object.keys(x.fields).sort().map((k) => fieldLabel(k) + ': ' + x.fields[k]).join('; ') : '';
      setMsg(['err', t('restoreRefused') + ' ' + (fields || errText(x))]);
    }
  };
  return html`<div class="card" data-test="backup"><h2>${t('backup')}</h2><p class="small">${t('backupHelp')}</p>
    <div class="row"><button type="button" onClick=${save}>${t('backupSave')}</button>
      <label class="button">${t('backupRestore')}<input type="file" accept="application/json,.json" data-test="restore-file" onChange=${restore} class="visually-hidden" /></label></div>
    ${ask && html`<div class="sub" data-test="restore-preview"><p><strong>${t('restoreAsk', ask[1].length)}</strong></p>
      <ul>${ask[1].map(([k, a, b]) => html`<li>${fieldLabel(k)}: ${shownValue(a)} → ${shownValue(b)}</li>`)}</ul>
      <div class="row"><button type="button" onClick=${apply}>${t('restoreApply')}</button>
        <button type="button" onClick=${() => setAsk(null)}>${t('cancel')}</button></div></div>`}
    ${msg && html`<${Msg} kind=${msg[0]}>${msg[1]}<//>`}
    <p class="small">${t('factoryResetHelp')}</p></div>`;
}

// The scanned networks (GET /system/wifi_scan): picking one fills the section's SSID, as on a phone's WiFi list.
// A fresh scan runs in the background on the device; the list is asked again a few times while it says scanning.
function ScanBox({ onPick }) {
  const [nets, setNets] = useState(null);
  const [state, setState] = useState('');
  const scan = async () => {
    setState(t('scanning'));
    try {
      let r = await api('/system/wifi_scan?refresh=true');
      for (let i = 0; r.scanning && i < 5; i++) {
        await new Promise((ok) => setTimeout(ok, 3000));
        r = await api('/system/wifi_scan');
      }
      const seen = new Set();
      const list = (r.networks || []).filter((n) => n.ssid && !seen.has(n.ssid) && seen.add(n.ssid))
        .sort((a, b) => b.rssi - a.rssi);
      setNets(list);
      setState(list.length ? '' : t('noNetworks'));
    } catch (e) {
      setState(errText(e));
    }
  };
  return html`<div class="sub"><div class="row"><button type="button" data-test="scan" onClick=${scan}>${t('scan')}</button>
    <span role="status">${state}</span></div>
    ${nets && nets.length > 0 && html`<ul class="nets" aria-label=${t('networks')}>${nets.map((n) => html`<li>
      <button type="button" class="link" onClick=${() => onPick(n.ssid)}>${n.ssid}</button>
      <span class="small"> ${n.rssi} dBm${n.secure === false ? ' · ' + t('openNet') : ''}</span></li>`)}</ul>`}</div>`;
}

function CaBox() {
  const [ca, setCa] = useState(null);
  const [pem, setPem] = useState('');
  const [msg, setMsg] = useState(null);
  const load = () => api('/mqtt/ca').then(setCa, (e) => setMsg(['err', errText(e)]));
  useEffect(() => { load(); }, []);
  const act = async (method) => {
    try {
      await api('/mqtt/ca', method === 'POST' ? { method, body: pem } : { method });
      setMsg(['ok', t('saved')]);
      setPem('');
      load();
    } catch (e) {
      setMsg(['err', errText(e)]);
    }
  };
  const file = async (e) => {
    const f = e.target.files[0];
    if (f) setPem(await f.text());
  };
  return html`<div class="sub"><h3>${t('ca')}</h3>
    <p class="small" data-test="ca">${ca ? (ca.has_custom_cert ? t('caCustom', ca.custom_size) : t('caNone')) : '…'}</p>
    <div class="field"><label for="f-ca">PEM</label><textarea id="f-ca" rows="4" value=${pem} onInput=${(e) => setPem(e.target.value)}
      placeholder="-----BEGIN CERTIFICATE-----"></textarea><input type="file" accept=".pem,.crt,.cer" aria-label="PEM" onChange=${file} /></div>
    <div class="row"><button type="button" disabled=${!pem} onClick=${() => act('POST')}>${t('upload')}</button>
      <button type="button" disabled=${!(ca && ca.has_custom_cert)} onClick=${() => act('DELETE')}>${t('remove')}</button></div>
    ${msg && html`<${Msg} kind=${msg[0]}>${msg[1]}<//>`}</div>`;
}

function PairBox() {
  const [tok, setTok] = useState('');
  const [msg, setMsg] = useState(null);
  const act = async (method) => {
    try {
      const r = await api('/cloud/pair', method === 'POST' ? { method, body: { pairing_token: tok } } : { method });
      setMsg(['ok', r.message || t('saved')]);
    } catch (e) {
      setMsg(['err', errText(e)]);
    }
  };
  return html`<div class="sub"><div class="field"><label for="f-pair">${t('pairToken')}</label>
    <input id="f-pair" value=${tok} maxlength="64" onInput=${(e) => setTok(e.target.value)} /></div>
    <div class="row"><button type="button" disabled=${!/^[A-Za-z0-9_-]{1,64}$/.test(tok)} onClick=${() => act('POST')}>${t('pair')}</button>
    <button type="button" onClick=${() => act('DELETE')}>${t('unpair')}</button></div>
    ${msg && html`<${Msg} kind=${msg[0]}>${msg[1]}<//>`}</div>`;
}

// The MQTT connection now, in words (why it failed, when it tries next), from the shell's /system/info.
function MqttNow() {
  const info = useInfo();
  return info && html`<p class="small" data-test="mqtt-now" role="status">${mqttWords(sectionMap(info.mqtt))[1]}</p>`;
}

// Try the section's broker values before they are stored (POST /mqtt/test): the device connects with them, says
// how it went and goes back to the stored settings; nothing is saved. Empty password: the stored one, which the
// device sends only to the stored host (and with TLS if it was stored so): another broker is tried without one.
function MqttTest({ vals, reasons, mark }) {
  const [msg, setMsg] = useState(null);
  const [busy, setBusy] = useState(false);
  const go = async () => {
    const errs = reasons();
    const mine = Object.fromEntries(Object.entries(errs).filter(([k]) => /^mqtt\.(host|port|user|password)$/.test(k)));
    if (!vals['mqtt.host']) mine['mqtt.host'] = t('r_required');
    if (mark(mine)) {
      setMsg(['err', t('fixErrors')]);
      return;
    }
    setBusy(true);
    setMsg(['', t('mqTesting', vals['mqtt.host'])]);
    try {
      let r = await api('/mqtt/test', { method: 'POST', body: { host: vals['mqtt.host'], port: +vals['mqtt.port'] || 1883,
        use_tls: !!vals['mqtt.use_tls'], user: vals['mqtt.user'] || '', password: vals['mqtt.password'] || null } });
      for (let i = 0; r.state === 'testing' && i < 40; i++) {
        await new Promise((ok) => setTimeout(ok, 1000));
        r = await api('/mqtt/test');
      }
      // A stored password goes only to the broker it was stored for: another one was tried without it (withheld).
      const hint = r.password === 'withheld' ? t('mqPwWithheld') + ' ' : '';
      setMsg(r.state === 'ok' ? ['ok', t('mqTestOk', r.host)] : ['err', mqttWords({ conn: 'FAILED', error: r.error })[1] + '. ' + hint + t('mqNothing')]);
    } catch (e) {
      setMsg(['err', errText(e)]);
    } finally {
      setBusy(false);
    }
  };
  return html`<div class="sub" data-test="mqtt-test"><div class="row"><button type="button" disabled=${busy} onClick=${go}>${t('joinTestOnly')}</button></div>
    ${msg && html`<${Msg} kind=${msg[0]}>${msg[1]}<//>`}</div>`;
}

// Whether the access point runs now (the setting says only whether it always runs), from the shell's /system/info.
function ApNow() {
  const info = useInfo();
  const ap = info ? sectionMap(info.ap) : null;
  return ap && html`<p class="small" data-test="ap-now">${ap.active ? t('apRunning', ap.ssid || '') : t('apStopped')}</p>`;
}

// What to enter in the battery's app: the device's address, the Marstek ports, the SMA serial (emulation.smaSerial,
// or when 0 the device id's last 8 hex digits as services/emulation/sma_sender.py derive_serial); with
// authentication on, that the emulation answers without a token.
function EmuHelp({ doc }) {
  const info = useInfo();
  const wifi = info ? sectionMap(info.wifi) : {};
  const ip = wifi.ip || (info && sectionMap(info.ap).ip) || ''; // on the access point only: its address
  const id = info ? String(sectionMap(info.esp).esp_id || '') : '';
  const set = getPath(doc, 'emulation.smaSerial'); // 0xffffffff is Speedwire's "any device": derived instead
  let sn = set > 0 && set < 0xffffffff ? set : info && (parseInt(id.slice(-8), 16) || 1);
  if (sn === 0xffffffff) sn--;
  const e = info ? sectionMap(info.emulation) : {};
  const since = e['shelly_udp.since_s'];
  const last = e['shelly_udp.last_s'];
  const at = (ago) => new Date((deviceUtc() - ago + (+sectionMap(info.clock).utc_offset_min || 0) * 60) * 1000).toISOString().slice(11, 16);
  // Live status in words: listening where, asked since when and how often, or quiet since when.
  const status = !e.shelly ? '' : since === null || since === undefined ? t('emuWaiting', e['shelly_udp.ports'] || '–')
    : last > 60 ? t('emuQuiet', at(last)) : t('emuAsking', at(since), num(+e['shelly_udp.answers'] || 0, 0));
  return html`<div class="small" data-test="emu-help">
    ${ip && html`<p data-test="emu-addr"><strong>${t('emuAddr', ip, wifi.mdns_name || '')}</strong></p>`}
    ${status && html`<p data-test="emu-status" role="status">${status}</p>`}
    <p>${t('emuShelly', ip || t('emuIp'))}</p><p>${t('emuSma', sn || '…')}</p>
    ${doc.api_auth_required && html`<p data-test="emu-auth">${t('emuAuth')}</p>`}</div>`;
}

// The section in the address (#/settings/mqtt), so each one can be linked and the back button works.
const TABS = [...SECTIONS.map(([id]) => id), 'backup'];
const tabOf = () => {
  const id = location.hash.split('/')[2];
  return TABS.includes(id) ? id : 'general';
};
// A section named in the address that this page does not have (an old or mistyped link): said, not hidden.
const unknownTab = () => {
  const id = location.hash.split('/')[2];
  return id && !TABS.includes(id) ? id : '';
};

export function Settings({ onDoc }) {
  const [doc, setDoc] = useState(null);
  const [zones, setZones] = useState([]);
  const [err, setErr] = useState('');
  const [tab, setTab] = useState(tabOf());
  const [dirty, setDirty] = useState({});
  const [epochs, setEpochs] = useState({}); // per section: bumped by its own save, all by a restored backup
  const load = async () => {
    try {
      const d = await api('/settings');
      setDoc(d);
      onDoc(d);
    } catch (e) {
      setErr(errText(e));
    }
  };
  // After the new document is in: a section that resets before it would show the old values for a moment.
  const saved = async (id) => {
    await load();
    setEpochs((e) => (id ? { ...e, [id]: (e[id] || 0) + 1 } : Object.fromEntries(TABS.map((k) => [k, (e[k] || 0) + 1]))));
  };
  const onDirty = (id, d) => setDirty((x) => (x[id] === d ? x : { ...x, [id]: d }));
  useEffect(() => {
    load().then(() => api('/system/timezones').then(setZones, () => {}));
    const onHash = () => setTab(tabOf());
    addEventListener('hashchange', onHash);
    return () => removeEventListener('hashchange', onHash);
  }, []);
  return html`<section aria-labelledby="h-set">
    <h1 id="h-set">${t('settings')}</h1>
    <nav class="tabs" aria-label=${t('sections')}><ul>${TABS.map((id) => html`<li><a href=${'#/settings/' + id}
      aria-current=${id === tab ? 'page' : undefined} data-test=${'tab-' + id}>${t(id)}${dirty[id] ? html` <span title=${t('unsaved')} aria-label=${t('unsaved')}>•</span>` : ''}</a></li>`)}</ul></nav>
    <${Msg} kind="err">${err}<//>
    ${unknownTab() && html`<p class="msg warn" role="status" data-test="unknown-tab">${t('unknownTab', unknownTab())}</p>`}
    ${doc && SECTIONS.map(([id, keys]) => html`<${Section} key=${id} id=${id} keys=${keys} doc=${doc} zones=${zones} onSaved=${saved}
      onDirty=${onDirty} hidden=${id !== tab} epoch=${epochs[id] || 0}>
      ${id === 'mqtt' && html`<${CaBox} />`}${id === 'cloud' && html`<${PairBox} />`}<//>`)}
    ${doc && tab === 'backup' && html`<${BackupBox} doc=${doc} onSaved=${() => saved('')} />`}
  </section>`;
}
