// Security: two-phase token creation (generate, show, copy or download the pair, confirm within 60 s), then
// api_auth_required on/off (offered once a pair exists), and the token this browser keeps.
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, api, download, getToken, remembered, setToken } from './api.js';
import { t } from './i18n.js';
import { Msg, errText, html, sectionMap, useInfo } from './ui.js';

// Copy a token: the Clipboard API needs a secure context, which http://<device> is not; a selected hidden field
// and execCommand('copy') work there.
function copy(text) {
  if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
  const ta = document.createElement('textarea');
  ta.value = text;
  ta.setAttribute('readonly', '');
  ta.style.position = 'fixed';
  ta.style.opacity = '0';
  document.body.appendChild(ta);
  ta.select();
  const ok = document.execCommand('copy');
  ta.remove();
  return ok ? Promise.resolve() : Promise.reject(new Error('copy'));
}

const CopyButton = ({ text, label, onCopy }) => {
  const [done, setDone] = useState(false);
  const word = done ? t('copied') : t('copy');
  return html`<button type="button" class="small" aria-label=${word + ': ' + label}
    onClick=${() => copy(text).then(() => { setDone(true); onCopy && onCopy(); }, () => setDone(false))}>${word}</button>`;
};

// recovery: in the token prompt, where the page has no valid token: the code the device shows after a press of its
// button goes with generate (services/api/service.py).
export function Rotation({ onConfirmed, name, prompt = true, recovery = false }) {
  const [pending, setPending] = useState(null);
  const [code, setCode] = useState('');
  const [left, setLeft] = useState(0);
  const [msg, setMsg] = useState(null);
  const [keep, setKeep] = useState(remembered());
  const [saved, setSaved] = useState(false);
  const [copied, setCopied] = useState(false);
  const kept = saved || copied; // the pair is confirmed only once the owner has it (no lock-out)
  const box = useRef(null);
  useEffect(() => {
    if (!pending) return undefined;
    const id = setInterval(() => {
      const s = Math.max(0, Math.ceil((pending.until - Date.now()) / 1000));
      setLeft(s);
      if (!s) clearInterval(id);
    }, 250);
    return () => clearInterval(id);
  }, [pending]);
  useEffect(() => {
    if (pending && box.current) box.current.focus();
  }, [pending]);
  const generate = async () => {
    setMsg(null);
    setSaved(false);
    setCopied(false);
    try {
      const body = recovery && code.trim() ? { recoveryCode: code.trim() } : undefined;
      const r = await api('/auth/tokens/generate', { method: 'POST', body, prompt });
      const until = Date.now() + (r.expires_in || 60) * 1000;
      setPending({ ...r.pending, until });
      setLeft(r.expires_in || 60);
    } catch (e) {
      setMsg(['err', errText(e)]);
    }
  };
  const file = () => {
    download('meterplus-tokens.txt', `${name} (Meter Plus) ${new Date().toLocaleString()}\r\nREAD: ${pending.token_read}\r\nWRITE: ${pending.token_write}\r\n`, 'text/plain');
    setSaved(true);
  };
  const confirmPair = async () => {
    try {
      await api('/auth/tokens/confirm', { method: 'POST', body: { new_write_token: pending.token_write }, prompt });
      setToken(pending.token_write, keep); // this browser goes on with the new WRITE token
      setPending(null);
      setMsg(['ok', t('tokensActive')]);
      onConfirmed();
    } catch (e) {
      if (e instanceof ApiError && e.status === 410) setPending(null);
      setMsg(['err', e instanceof ApiError && e.status === 410 ? t('pairExpired') : errText(e)]);
    }
  };
  const row = (label, tok, test) => html`<dt>${label}</dt><dd><code data-test=${test}>${tok}</code> <${CopyButton} text=${tok} label=${label} onCopy=${() => setCopied(true)} /></dd>`;
  return html`<div class="card"><h2>${t('rotate')}</h2>
    <p>${t('rotateHelp')}</p>
    ${recovery && html`<label for="rec-code">${t('recoveryCode')}</label>
      <input id="rec-code" inputmode="numeric" autocomplete="off" value=${code} onInput=${(e) => setCode(e.target.value)}
        onKeyDown=${(e) => e.key === 'Enter' && (e.preventDefault(), generate())} />`}
    <div class="row"><button type="button" onClick=${generate}>${t('rotate')}</button></div>
    ${pending && html`<div class="pending" data-test="pending" tabindex="-1" ref=${box}>
      <p><strong>${t('pending')}</strong></p>
      <dl>${row(t('readToken'), pending.token_read, 'token-read')}${row(t('writeToken'), pending.token_write, 'token-write')}</dl>
      <div class="row"><button type="button" data-test="token-file" onClick=${file}>${saved ? t('fileSaved') : t('downloadPair')}</button></div>
      <label class="check"><input type="checkbox" checked=${keep} onChange=${(e) => setKeep(e.target.checked)} /> ${t('remember')}</label>
      <p role="timer" aria-live="off" data-test="countdown">${left > 0 ? t('expiresIn', left) : t('expired')}</p>
      <div class="row"><button type="button" disabled=${left <= 0 || !kept} aria-describedby="pair-save" onClick=${confirmPair}>${t('confirmTokens')}</button>
        <span class="small" id="pair-save">${kept ? '' : t('pairSaveFirst')}</span></div></div>`}
    ${msg && html`<${Msg} kind=${msg[0]}>${msg[1]}<//>`}</div>`;
}

const tokensSet = (info) => (info ? !!sectionMap(info.settings).tokens_set : null);

export function Security() {
  const [doc, setDoc] = useState(null);
  const [msg, setMsg] = useState(null);
  const [fieldErr, setFieldErr] = useState('');
  const [confirmed, setConfirmed] = useState(false); // a pair confirmed here, before the next /system/info says so
  const paired = confirmed || tokensSet(useInfo()); // null until the shell's first /system/info
  const [, setTick] = useState(0);
  const load = () => api('/settings').then(setDoc, (e) => setMsg(['err', errText(e)]));
  useEffect(() => {
    load();
  }, []);
  const setAuth = async (on) => {
    setMsg(null);
    setFieldErr('');
    // On only from a browser that holds a token (one confirmed, so saved or copied), and only when asked.
    if (on && !getToken()) {
      setFieldErr(t('authNeedsToken'));
      return;
    }
    if (on && !confirm(t('confirmAuthOn') + ' ' + t('recover'))) return;
    try {
      await api('/settings', { method: 'POST', body: { api_auth_required: on } });
      setMsg(['ok', on ? t('authNowOn') : t('authNowOff')]);
      load();
    } catch (e) {
      if (e instanceof ApiError && e.fields && e.fields.api_auth_required) setFieldErr(paired ? e.fields.api_auth_required : t('pairFirst'));
      setMsg(['err', errText(e)]);
    }
  };
  const on = doc && doc.api_auth_required;
  const signOut = () => {
    if (!confirm(t('confirmSignOut'))) return;
    setToken('');
    setTick((x) => x + 1);
  };
  return html`<section aria-labelledby="h-sec">
    <h1 id="h-sec">${t('security')}</h1>
    <${Rotation} name=${(doc && doc.device_name) || 'Meter Plus'} onConfirmed=${() => setConfirmed(true)} />
    <div class="card"><h2>${t('authRequired')}</h2>
      <p data-test="auth-state">${doc ? (on ? t('authOn') : t('authOff')) : '…'}</p>
      ${doc && !on && paired === false && html`<p data-test="pair-first">${t('pairFirst')}</p>`}
      ${doc && html`<div class="row"><button type="button" id="f-api_auth_required" onClick=${() => setAuth(!on)}
        disabled=${!on && paired === false} aria-describedby=${fieldErr ? 'f-auth-err' : undefined}>${on ? t('disable') : t('enable')}</button></div>`}
      ${fieldErr && html`<p class="ferr" id="f-auth-err" role="alert">${fieldErr}</p>`}
      ${msg && html`<${Msg} kind=${msg[0]}>${msg[1]}<//>`}</div>
    <div class="card"><h2>${t('tokenTitle')}</h2>
      <p data-test="token-kept">${getToken() ? (remembered() ? t('tokenRemembered') : t('tokenInSession')) : t('noToken')}</p>
      ${getToken() && html`<div class="row"><button type="button" onClick=${signOut}>${t('signOut')}</button></div>`}</div>
  </section>`;
}
