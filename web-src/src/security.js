// Security: api_auth_required on/off, two-phase token rotation (generate, show once with 60 s countdown, confirm),
// and the token this session keeps (sessionStorage only).
import { useEffect, useState } from 'preact/hooks';
import { ApiError, api, getToken, setToken } from './api.js';
import { t } from './i18n.js';
import { Msg, errText, html } from './ui.js';

function Rotation({ onConfirmed }) {
  const [pending, setPending] = useState(null);
  const [left, setLeft] = useState(0);
  const [msg, setMsg] = useState(null);
  useEffect(() => {
    if (!pending) return undefined;
    const id = setInterval(() => {
      const s = Math.max(0, Math.ceil((pending.until - Date.now()) / 1000));
      setLeft(s);
      if (!s) clearInterval(id);
    }, 250);
    return () => clearInterval(id);
  }, [pending]);
  const generate = async () => {
    setMsg(null);
    try {
      const r = await api('/auth/tokens/generate', { method: 'POST' });
      const until = Date.now() + (r.expires_in || 60) * 1000;
      setPending({ ...r.pending, until });
      setLeft(r.expires_in || 60);
    } catch (e) {
      setMsg(['err', errText(e)]);
    }
  };
  const confirmPair = async () => {
    try {
      await api('/auth/tokens/confirm', { method: 'POST', body: { new_write_token: pending.token_write } });
      setToken(pending.token_write); // the session goes on with the new WRITE token
      setPending(null);
      setMsg(['ok', t('tokensActive')]);
      onConfirmed();
    } catch (e) {
      if (e instanceof ApiError && e.status === 410) setPending(null);
      setMsg(['err', errText(e)]);
    }
  };
  return html`<div class="card"><h2>${t('rotate')}</h2>
    <div class="row"><button type="button" onClick=${generate}>${t('rotate')}</button></div>
    ${pending && html`<div class="pending" data-test="pending">
      <p><strong>${t('pending')}</strong></p>
      <dl><dt>${t('readToken')}</dt><dd><code data-test="token-read">${pending.token_read}</code></dd>
        <dt>${t('writeToken')}</dt><dd><code data-test="token-write">${pending.token_write}</code></dd></dl>
      <p role="timer" aria-live="off" data-test="countdown">${left > 0 ? t('expiresIn', left) : t('expired')}</p>
      <div class="row"><button type="button" disabled=${left <= 0} onClick=${confirmPair}>${t('confirmTokens')}</button></div></div>`}
    ${msg && html`<${Msg} kind=${msg[0]}>${msg[1]}<//>`}</div>`;
}

export function Security() {
  const [doc, setDoc] = useState(null);
  const [msg, setMsg] = useState(null);
  const [fieldErr, setFieldErr] = useState('');
  const [, setTick] = useState(0);
  const load = () => api('/settings').then(setDoc, (e) => setMsg(['err', errText(e)]));
  useEffect(() => { load(); }, []);
  const setAuth = async (on) => {
    setMsg(null);
    setFieldErr('');
    try {
      await api('/settings', { method: 'POST', body: { api_auth_required: on } });
      setMsg(['ok', t('saved')]);
      load();
    } catch (e) {
      if (e instanceof ApiError && e.fields && e.fields.api_auth_required) setFieldErr(e.fields.api_auth_required);
      setMsg(['err', errText(e)]);
    }
  };
  const on = doc && doc.api_auth_required;
  return html`<section aria-labelledby="h-sec">
    <h1 id="h-sec">${t('security')}</h1>
    <div class="card"><h2>${t('authRequired')}</h2>
      <p data-test="auth-state">${doc ? (on ? t('authOn') : t('authOff')) : '…'}</p>
      ${doc && html`<div class="row"><button type="button" id="f-api_auth_required" onClick=${() => setAuth(!on)}
        aria-describedby=${fieldErr ? 'f-auth-err' : undefined}>${on ? t('disable') : t('enable')}</button></div>`}
      ${fieldErr && html`<p class="ferr" id="f-auth-err" role="alert">${fieldErr}</p>`}
      ${msg && html`<${Msg} kind=${msg[0]}>${msg[1]}<//>`}</div>
    <${Rotation} onConfirmed=${() => setTick((x) => x + 1)} />
    <div class="card"><h2>${t('tokenTitle')}</h2>
      <p>${getToken() ? t('tokenInSession') : t('noToken')}</p>
      ${getToken() && html`<div class="row"><button type="button" onClick=${() => { setToken(''); setTick((x) => x + 1); }}>${t('signOut')}</button></div>`}</div>
  </section>`;
}
