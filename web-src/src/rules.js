// The settings rules of core/settings.py, checked in the page before sending (the device checks them again).
import { t } from './i18n.js';

const IP = { static_ip: ['bool'], ip: ['ipv4'], subnet: ['mask'], gateway: ['ipv4'], dns: ['ipv4'] };
export const SCHEMA = {
  device_name: ['text', 31], ledEnable: ['bool'], 'language.active': ['lang'], timezone: ['zone'],
  ntp_server: ['host', false], medianFilterSize: ['choice', [0, 3, 5, 7, 9]], ctRatio: ['ratio'], autoOta: ['bool'],
  'history.flushMinutes': ['int', 1, 1440], cloudIotEnabled: ['bool'],
  'accessPoint.enable': ['bool'], 'accessPoint.ssid': ['ssid'], 'accessPoint.password_enable': ['bool'],
  'accessPoint.password': ['wpa'], api_auth_required: ['bool'],
  'mqtt.enable': ['bool'], 'mqtt.host': ['host', true], 'mqtt.port': ['int', 1, 65535], 'mqtt.use_tls': ['bool'],
  'mqtt.user': ['text', 64], 'mqtt.password': ['secret', 64], 'mqtt.client_id': ['text', 64],
  'mqtt.topic_prefix': ['topic', 64], 'mqtt.sendInterval': ['int', 1, 3600], 'mqtt.discovery_prefix': ['topic', 64],
  'modbus.enable': ['bool'], 'modbus.port': ['int', 1, 65535], 'modbus.model': ['choice', [203, 213]],
  'ota.url': ['url', true], 'cloud.host': ['host', true], 'cloud.port': ['int', 1, 65535],
  'emulation.shelly': ['bool'], 'emulation.shellyUdpPort': ['int', 0, 65535], 'emulation.shellyUdpPort2': ['int', 0, 65535],
  'emulation.sma': ['bool'], 'emulation.smaSerial': ['int', 0, 4294967295], 'emulation.smaSusyId': ['int', 1, 65535],
  'emulation.smaTargets': ['ipv4list', 3],
  // issue 29: the money view (web/money.js) sends these; the device checks them (exact decimals, windows)
  'tariff.mode': ['enum'], 'tariff.currency': ['currency'], 'tariff.importPrice': ['money'], 'tariff.exportPrice': ['money'],
  'tariff.surcharge': ['money'], 'tariff.baseFee': ['money'], 'tariff.vatPercent': ['money'], 'tariff.tou': ['tou'],
  'tariff.priceUrl': ['url', true],
};
for (const p of ['primary', 'secondary']) {
  SCHEMA[`wifi.${p}.ssid`] = ['ssid'];
  SCHEMA[`wifi.${p}.password`] = ['wpa'];
  SCHEMA[`wifi.${p}.enable`] = ['bool'];
  for (const k in IP) SCHEMA[`wifi.${p}.${k}`] = IP[k];
}
export const SECRETS = ['wifi.primary.password', 'wifi.secondary.password', 'accessPoint.password', 'mqtt.password'];

const bytes = (s) => new TextEncoder().encode(s).length;
const ctrl = (s) => /[\x00-\x1f\x7f-\x9f]/.test(s); // C0, DEL and C1, as core/settings.py _printable
const hasLoneSurrogate = (s) => /[\ud800-\udbff](?![\udc00-\udfff])|(?:[^\ud800-\udbff]|^)[\udc00-\udfff]/.test(s);
export function parseIpv4(s) {
  const p = s.split('.');
  if (p.length !== 4) return null;
  const out = [];
  for (const x of p) {
    if (!/^\d{1,3}$/.test(x) || (x.length > 1 && x[0] === '0') || +x > 255) return null;
    out.push(+x);
  }
  return out;
}
function isMask(o) {
  const n = ((o[0] << 24) | (o[1] << 16) | (o[2] << 8) | o[3]) >>> 0;
  const inv = ~n >>> 0;
  return n !== 0 && ((inv & (inv + 1)) >>> 0) === 0;
}
// Why an address cannot be a LAN host's (device, gateway, DNS server), as core/settings.py _host_reason.
function hostReason(o) {
  if (o[0] === 0) return t('r_ip_zero');
  if (o[0] === 127) return t('r_ip_loop');
  if (o[0] >= 224 && o[0] <= 239) return t('r_ip_multi');
  if (o[0] >= 240) return t('r_ip_reserved');
  return '';
}
function prefixLen(o) {
  const n = ((o[0] << 24) | (o[1] << 16) | (o[2] << 8) | o[3]) >>> 0;
  let bits = 0;
  while (bits < 32 && (n >>> (31 - bits)) & 1) bits++;
  return bits;
}
// An http(s) URL as core/url.py split_url accepts it.
function urlReason(v) {
  if (v.length > 200) return t('r_len', 200);
  if (/[^\x21-\x7e]/.test(v)) return t('r_url');
  const m = /^https?:\/\/([^/]*)(\/.*)?$/.exec(v);
  if (!m || /[@?#]/.test(m[1])) return t('r_url');
  let host = m[1];
  const colon = host.indexOf(':');
  if (colon >= 0) {
    const port = host.slice(colon + 1);
    if (!/^\d+$/.test(port) || +port < 1 || +port > 65535) return t('r_url');
    host = host.slice(0, colon);
  }
  if (!host || host.length > 253 || '.-'.includes(host[0]) || '.-'.includes(host[host.length - 1])) return t('r_url');
  return /^[A-Za-z0-9.-]+$/.test(host) ? '' : t('r_url');
}
const isHost = (s) =>
  s.length <= 253 && s.split('.').every((l) => /^[A-Za-z0-9-]{1,63}$/.test(l) && l[0] !== '-' && l[l.length - 1] !== '-');

// The reason a value is wrong for key (in the page's language), or '' when it is fine. null clears a secret.
export function check(key, v) {
  const [kind, a, b] = SCHEMA[key];
  if (typeof v === 'string' && hasLoneSurrogate(v)) return t('r_unicode');
  switch (kind) {
    case 'bool':
      return typeof v === 'boolean' ? '' : t('r_bool');
    case 'int':
      return Number.isInteger(v) && v >= a && v <= b ? '' : t('r_int', a, b);
    case 'choice':
      return a.includes(v) ? '' : a.join(', ');
    case 'ratio': {
      if (typeof v !== 'number' || !(v >= 1 && v <= 10000)) return t('r_ratio');
      return Math.abs(v * 10 - Math.round(v * 10)) > 1e-6 ? t('r_ratio') : '';
    }
    case 'text':
    case 'topic':
      if ([...v].length > a) return t('r_len', a); // characters (code points), as the device counts
      if (ctrl(v)) return t('r_ctrl');
      if (kind === 'topic' && (/[+#]/.test(v) || v.endsWith('/'))) return t('r_topic');
      return '';
    case 'ssid':
      if (bytes(v) > 32) return t('r_bytes', 32);
      return v.includes('\x00') ? t('r_ctrl') : '';
    case 'wpa': {
      if (v === null) return '';
      const n = bytes(v);
      if (n && (n < 8 || n > 63)) return t('r_wpa');
      return ctrl(v) ? t('r_ctrl') : '';
    }
    case 'secret':
      return v !== null && bytes(v) > a ? t('r_bytes', a) : '';
    case 'ipv4':
    case 'mask': {
      if (v === '') return '';
      const o = parseIpv4(v);
      if (!o) return t('r_ip');
      if (kind === 'mask') return !isMask(o) ? t('r_mask') : prefixLen(o) > 30 ? t('r_mask30') : '';
      return hostReason(o) || (o.every((x) => x === 255) ? t('r_ip_bcast') : '');
    }
    case 'ipv4list': { // comma-separated unicast receivers; loopback allowed (a receiver on the host runtime)
      const p = v.trim() ? v.split(',').map((x) => x.trim()) : [];
      if (p.length > a) return t('r_max', a);
      for (const x of p) {
        const o = parseIpv4(x);
        if (!o) return t('r_ip');
        const r = o[0] === 127 ? '' : hostReason(o) || (o.every((y) => y === 255) ? t('r_ip_bcast') : '');
        if (r) return x + ': ' + r;
      }
      return '';
    }
    case 'host': {
      if (v === '') return a ? '' : t('r_required');
      if (!isHost(v)) return t('r_host');
      if (/^\d+$/.test(v.slice(v.lastIndexOf('.') + 1))) { // a top-level domain is never all digits: an address
        const o = parseIpv4(v);
        if (!o) return t('r_host');
        if (o[0] === 0 || o[0] >= 224) return hostReason(o) || t('r_ip_bcast');
      }
      return '';
    }
    case 'url':
      if (v === '') return a ? '' : t('r_required');
      return urlReason(v);
    case 'zone':
      return v && v.length <= 64 && !/[^\x20-\x7e]/.test(v) ? '' : t('r_required');
    case 'lang':
      return v === 'de' || v === 'en' ? '' : 'de, en';
  }
  return '';
}

// Rules across keys, as the device applies them: merged is the document as it would be after the change.
export function crossCheck(merged, get) {
  const errors = {};
  for (const p of ['primary', 'secondary']) {
    if (get(merged, `wifi.${p}.static_ip`)) {
      for (const k of ['ip', 'subnet', 'gateway']) if (!get(merged, `wifi.${p}.${k}`)) errors[`wifi.${p}.${k}`] = t('r_required');
      // The addresses together, as core/settings.py _address_errors: gateway in the subnet, none the device's own
      // address, the subnet's network or broadcast address.
      const n = {};
      for (const k of ['ip', 'subnet', 'gateway', 'dns']) {
        const o = parseIpv4(get(merged, `wifi.${p}.${k}`) || '');
        if (o) n[k] = ((o[0] << 24) | (o[1] << 16) | (o[2] << 8) | o[3]) >>> 0;
      }
      if (n.ip === undefined || n.subnet === undefined) continue;
      const m = n.subnet;
      const net = (n.ip & m) >>> 0;
      const last = (net | ~m) >>> 0;
      const sub = [24, 16, 8, 0].map((s) => (net >>> s) & 255).join('.') + '/' + prefixLen(parseIpv4(get(merged, `wifi.${p}.subnet`)));
      for (const k of ['ip', 'gateway', 'dns']) {
        const v = n[k];
        const why = v === undefined ? '' : k !== 'ip' && v === n.ip ? t('r_own') : ((v & m) >>> 0) !== net ? (k === 'gateway' ? t('r_outside', sub) : '')
          : v === net ? t('r_netaddr', sub) : v === last ? t('r_bcaddr', sub) : '';
        if (why && !errors[`wifi.${p}.${k}`]) errors[`wifi.${p}.${k}`] = why;
      }
    }
  }
  if (get(merged, 'mqtt.enable') && !get(merged, 'mqtt.host')) errors['mqtt.host'] = t('r_required');
  return errors;
}
