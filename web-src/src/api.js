// REST client of the page: same origin, token from sessionStorage, 401/403 raised to the app, 429 back-off.
const TOKEN = 'mp.token';
const BACKOFF = 'mp.backoff'; // shared by the tabs of this origin: when one tab is refused, all of them wait

export const bus = new EventTarget();
const emit = (type, detail) => bus.dispatchEvent(new CustomEvent(type, { detail }));

// The token lives in this tab (sessionStorage) unless the user asked this browser to remember it (localStorage).
export const getToken = () => sessionStorage.getItem(TOKEN) || localStorage.getItem(TOKEN) || '';
export const remembered = () => !!localStorage.getItem(TOKEN);
export function setToken(t, remember = false) {
  sessionStorage.removeItem(TOKEN);
  localStorage.removeItem(TOKEN);
  if (t) (remember ? localStorage : sessionStorage).setItem(TOKEN, t);
  emit('token', !!t);
}

// A refused request waits here for the shell's prompt: {status, wrong} out, a token (or '' for cancel) back. Every
// request refused meanwhile shares the one prompt, and each is sent again with the token given, so an edit that
// needed the WRITE token is not lost.
let asking = null;
function askToken(status, wrong) {
  if (!asking) {
    asking = new Promise((resolve) => emit('auth', { status, wrong, resolve })).finally(() => {
      asking = null;
    });
  }
  return asking;
}

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || (status ? 'HTTP ' + status : 'network error'));
    this.status = status;
    this.fields = (body && body.fields) || null;
    this.body = body;
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let localUntil = 0;
export function backoffLeft() {
  const shared = +localStorage.getItem(BACKOFF) || 0;
  return Math.max(0, Math.max(localUntil, shared) - Date.now());
}

// One request; `as`: 'json' (default), 'text' or 'blob'. A 429 waits Retry-After and tries again (twice at most):
// the refused request was not processed, so repeating a POST is safe.
export async function api(path, opts = {}) {
  const { method = 'GET', body, as = 'json', prompt = true } = opts; // prompt: false inside the token prompt itself
  let given = ''; // the token the prompt gave for this request
  for (let attempt = 0; ; attempt++) {
    const wait = backoffLeft();
    if (wait > 0) await sleep(wait);
    const headers = {};
    const t = getToken();
    if (t) headers.Authorization = 'Bearer ' + t;
    let payload;
    if (body instanceof Uint8Array) {
      headers['Content-Type'] = 'application/octet-stream'; // a piece of a release archive (ota/upload)
      payload = body;
    } else if (body !== undefined) {
      const plain = typeof body === 'string';
      headers['Content-Type'] = plain ? 'text/plain' : 'application/json';
      payload = plain ? body : JSON.stringify(body);
    }
    let r;
    try {
      r = await fetch('/api/v1' + path, { method, headers, body: payload, cache: 'no-store' });
    } catch (e) {
      // The device sheds a newcomer while both of its connection slots are answering (a page opening fires
      // several requests at once): a GET changes nothing, so it is asked again shortly, twice at most. A POST
      // is not repeated; whether it arrived cannot be known here.
      if (method === 'GET' && attempt < 2) {
        await sleep(300 * (attempt + 1));
        continue;
      }
      emit('offline', true);
      throw new ApiError(0, null);
    }
    emit('offline', false);
    if (r.status === 429 || r.status === 503) {
      const s = Math.min(60, parseInt(r.headers.get('Retry-After'), 10) || 10);
      const until = Date.now() + s * 1000;
      localUntil = until;
      localStorage.setItem(BACKOFF, String(until));
      emit('busy', s);
      if (attempt < 2) continue;
    }
    if (r.status === 204) return null;
    let data = null;
    if (r.ok && as === 'blob') return r.blob();
    const text = await r.text();
    if (r.ok && as === 'text') return text;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (e) {
      data = null;
    }
    if (r.ok) return data;
    const refused = r.status === 401 || (r.status === 403 && /token/i.test((data && data.error) || ''));
    // Sent with a token the user has replaced meanwhile (a poll in flight while they signed in): ask again with
    // the current one instead of prompting for a token that was already given.
    if (refused && getToken() !== t && attempt < 2) continue;
    // A 403 for a READ token asks for the WRITE token; other refusals (e.g. a cross-site check) are only shown.
    // A token the user just gave and the device refused is "wrong", said so in the prompt.
    if (refused && prompt && (await askToken(r.status, !!t && t === given))) {
      given = getToken();
      attempt = -1;
      continue;
    }
    throw new ApiError(r.status, data);
  }
}

// Poll fn every ms while the tab is visible (a hidden tab costs the device nothing); returns a stop function.
export function poller(fn, ms) {
  let timer = 0;
  let asking = false; // a request in flight: a visibility change now must not start a second chain of polls
  let stopped = false;
  const tick = async () => {
    timer = 0;
    if (stopped || asking) return;
    asking = true;
    if (!document.hidden) {
      try {
        await fn();
      } catch (e) {
        /* shown by the page; the next tick tries again */
      }
    }
    asking = false;
    if (!stopped) timer = setTimeout(tick, ms + backoffLeft());
  };
  const onVisible = () => {
    if (!document.hidden && !timer && !stopped) tick();
  };
  // A new token (signed in after a refusal): ask now, not at the next turn (the strip's 20 s, today's 5 min).
  const onToken = () => {
    if (timer && !stopped) {
      clearTimeout(timer);
      tick();
    }
  };
  document.addEventListener('visibilitychange', onVisible);
  bus.addEventListener('token', onToken);
  tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
    document.removeEventListener('visibilitychange', onVisible);
    bus.removeEventListener('token', onToken);
  };
}

// Save bytes under a file name (CSV, rawdump): fetched with the token, so it works with authentication on.
export function download(name, data, type) {
  const blob = data instanceof Blob ? data : new Blob([data], { type });
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  setTimeout(() => {
    URL.revokeObjectURL(a.href);
    a.remove();
  }, 1000);
}

// RFC 4180 CSV text -> rows of fields (quoted fields, doubled quotes, commas and newlines inside quotes).
export function parseCsv(text) {
  const rows = [];
  let row = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"') {
        if (text[i + 1] === '"') {
          field += '"';
          i++;
        } else quoted = false;
      } else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') {
      row.push(field);
      field = '';
    } else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(field);
      rows.push(row);
      row = [];
      field = '';
    } else field += c;
  }
  if (field || row.length) {
    row.push(field);
    rows.push(row);
  }
  return rows;
}

// One CSV field; sep is the separator in use (a field holding it, a quote or a line break is quoted).
export const csvField = (v, sep = ',') => {
  const s = v === undefined || v === null ? '' : String(v);
  return /["\n\r]/.test(s) || s.includes(sep) ? '"' + s.replace(/"/g, '""') + '"' : s;
};
