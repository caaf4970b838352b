// Shared bits of the pages: htm bound to Preact, the device clock, small components.
import { h } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import htm from 'htm';
import { bus } from './api.js';
import { known, t } from './i18n.js';

export const html = htm.bind(h);

// The device's clock as last seen in /system/info (utc, offset): "today" is the device's local day, not the browser's.
const clock = { utc: 0, offsetMin: null, at: 0 };
// The last /system/info (the shell polls it every 20 s for the status strip; pages read it instead of asking again).
export const lastInfo = { value: null };
// That answer, kept current in a component: the shell announces each new one on the bus.
export function useInfo() {
  const [info, setInfo] = useState(lastInfo.value);
  useEffect(() => {
    const on = (e) => setInfo(e.detail);
    bus.addEventListener('info', on);
    return () => bus.removeEventListener('info', on);
  }, []);
  return info;
}
export function noteInfo(info) {
  lastInfo.value = info;
  const v = sectionMap(info && info.clock);
  if (v.utc) {
    clock.utc = +v.utc;
    clock.offsetMin = +v.utc_offset_min || 0;
    clock.at = Date.now();
  }
}
export const deviceUtc = () => (clock.at ? clock.utc + (Date.now() - clock.at) / 1000 : Date.now() / 1000);
export function deviceToday(shiftDays = 0) {
  const off = clock.offsetMin === null ? -new Date().getTimezoneOffset() : clock.offsetMin;
  const d = new Date((deviceUtc() + off * 60 + shiftDays * 86400) * 1000);
  return d.toISOString().slice(0, 10);
}
export function addDays(iso, n) {
  const d = new Date(iso + 'T00:00:00Z');
  d.setUTCDate(d.getUTCDate() + n);
  return d.toISOString().slice(0, 10);
}

// An /system/info section [{name, value, unit}] as {name: value}.
export function sectionMap(list) {
  const out = {};
  for (const e of list || []) out[e.name] = e.value;
  return out;
}

export function getPath(obj, dotted) {
  let n = obj;
  for (const p of dotted.split('.')) {
    if (n === null || typeof n !== 'object' || !(p in n)) return undefined;
    n = n[p];
  }
  return n;
}

export const Msg = ({ kind, children }) =>
  children ? html`<p class=${'msg ' + (kind || '')} role=${kind === 'err' ? 'alert' : 'status'}>${children}</p>` : null;

export function Table({ head, rows, cls }) {
  return html`<div class="scroll"><table class=${cls || ''}>
    ${head && html`<thead><tr>${head.map((c) => html`<th scope="col">${c}</th>`)}</tr></thead>`}
    <tbody>${rows.map((r) => html`<tr>${r.map((c) => html`<td>${c}</td>`)}</tr>`)}</tbody>
  </table></div>`;
}

// An error in the interface's language from the answer's stable code; the device's English text only for a code
// this page does not know yet.
export const errText = (e) =>
  !e || !e.status ? t('offline') : (known('e_' + ((e.body && e.body.code) || '')) || e.status + ': ' + e.message) + (e.status === 401 ? ' ' + t('recover') : '');

// A duration in words: 45 s, 12 min, 1 h 28 min, 3 d 4 h (in the interface's language).
export function span(seconds) {
  if (seconds === null || seconds === undefined) return t('unknown');
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return t('spanS', s);
  if (s < 3600) return t('spanM', Math.floor(s / 60));
  if (s < 86400) return t('spanHM', Math.floor(s / 3600), Math.floor((s % 3600) / 60));
  return t('spanDH', Math.floor(s / 86400), Math.floor((s % 86400) / 3600));
}

// The MQTT state of a /system/info section in words: [kind, text] with why it failed and when it tries next.
const MQ_WHY = { 1004: 'mq_auth', 1005: 'mq_auth', 2001: 'mq_cfg', 2010: 'mq_cfg', 2002: 'mq_dns' };
export function mqttWords(m) {
  const c = m.conn;
  if (c === undefined || c === 'OFF') return ['off', t('stOff')];
  if (c === 'CONNECTED') return ['ok', t('stConnected')];
  if (c !== 'WAIT_RETRY' && c !== 'FAILED') return ['warn', t('stMqtt_' + (c === 'INIT' ? c : 'CONNECTING'))];
  const e = +m.error || 0;
  const why = MQ_WHY[e] ? t(MQ_WHY[e]) : e > 1000 && e < 1006 ? t('mq_refused', e - 1000) : e < 0 ? t('mq_tls') : t('mq_down');
  return ['err', m.retry_s === null || m.retry_s === undefined ? why : t('mq_next', why, span(+m.retry_s))];
}

// The station not joined, and why its last try failed (a wrong password stored, the network gone): /system/info wifi.
export const wifiDown = (w) => t('stNoWifi') + (w.last_error ? ': ' + (/auth/i.test(w.last_error) ? t('wifiPw')
  : /no network|not found/i.test(w.last_error) ? t('wifiGone') : w.last_error) : '');

// A colour of the current theme (canvas drawing cannot read CSS variables itself).
export const cssVar = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

// Theme: 'auto' follows the system (prefers-color-scheme), 'light' or 'dark' is the user's choice on this browser.
const THEME = 'mp.theme';
export const getTheme = () => localStorage.getItem(THEME) || 'auto';
export function applyTheme(theme) {
  if (theme === 'auto') {
    localStorage.removeItem(THEME);
    delete document.documentElement.dataset.theme;
  } else {
    localStorage.setItem(THEME, theme);
    document.documentElement.dataset.theme = theme;
  }
}
