// What the page's views share: the API client (with the key and session from sessionStorage),
// the messages shown for errors, the model's shape learned from /v1/stats, and file export.

import { ApiError, createClient } from './api.js';
import { buildDeepLink } from './deeplink.js';
import { h, put } from './dom.js';
import { exportText, fileName } from './export.js';

export const $ = (id) => document.getElementById(id);
export const KEY_STORE = 'larql.key';
export const SESSION_STORE = 'larql.session';

export const apiKey = () => sessionStorage.getItem(KEY_STORE) || '';
export const sessionId = () => sessionStorage.getItem(SESSION_STORE) || '';

export const client = createClient({ key: apiKey, session: sessionId });

// filled by the status poll: layers (0 until known), layerBands (null: the model has none;
// undefined: not known yet)
export const model = { layers: 0, layerBands: undefined };

// A 401 says which of the two it is: no key typed, or the typed one refused.
export function errorText(e) {
  if (e instanceof ApiError) {
    if (e.status === 401)
      return apiKey()
        ? 'The server refused the API key in the key field above (wrong key?): ' + e.message
        : 'The server needs an API key (type it in the key field above): ' + e.message;
    return (e.status ? `HTTP ${e.status}: ` : '') + e.message;
  }
  return String(e && e.message ? e.message : e);
}

export function showError(out, e) {
  put(out, h('p', { class: 'error', role: 'alert' }, errorText(e)));
  if (e instanceof ApiError && e.status === 401) $('key').focus();
}

// The URL of a view as its inputs stand (the tab, the query, its options, the session).
export function linkFor(view) {
  const x = { session: sessionId() };
  if (view === 'describe') return buildDeepLink(view, $('describe-entity').value.trim(), { ...x, band: $('describe-band').disabled ? '' : $('describe-band').value });
  if (view === 'walk') return buildDeepLink(view, $('walk-prompt').value, { ...x, top: parseInt($('walk-top').value, 10) });
  if (view === 'infer') return buildDeepLink(view, $('infer-prompt').value, { ...x, mode: $('infer-mode').value });
  return buildDeepLink(view, '', x);
}

// Puts the view's state in the address bar (a new history entry unless replace), and keeps
// it for the tab (sessionStorage: after a reload each tab still has its last query).
export function setLink(view, replace = false) {
  const link = linkFor(view);
  try {
    sessionStorage.setItem('larql.link.' + view, link);
  } catch {
    /* storage off: the tabs forget, the URL still holds the current view */
  }
  const url = location.pathname + link;
  if (url === location.pathname + location.search) return;
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
}

// Saves text as a file the browser downloads (a Blob URL: nothing leaves the page).
export function download(name, type, text) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h('a', { href: url, download: name, hidden: true });
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// "Export: JSON CSV" for a result (kind: describe | walk | infer; what: its entity or prompt).
export function exportBar(kind, j, what) {
  const one = (fmt, type) =>
    h('button', { type: 'button', class: 'export', 'data-format': fmt, on: { click: () => download(fileName(kind, what, fmt), type, exportText(kind, j, fmt)) } },
      fmt.toUpperCase());
  return h('span', { class: 'exports', role: 'group', 'aria-label': 'Export' }, 'Export', one('json', 'application/json'), one('csv', 'text/csv'));
}

// A box that scrolls sideways when its content is wider than the screen (a table, the heat
// map): focusable and named, so it can be scrolled by keyboard.
export function scrollBox(label, child) {
  return h('div', { class: 'scroll', tabindex: '0', role: 'region', 'aria-label': label }, child);
}
