// The page's glue: the tabs (an ARIA tablist: arrow keys move between them), the URL as the
// page's state (it follows the tab and the query; a reload or a shared link comes back to the
// same view, query and session), the status line, and the key field. The views live in
// view_*.js; what is worth testing without a browser lives in the DOM-free modules (sse, api,
// deeplink, heat, chat, markdown, export, noise, edits), run under node by tests/web/.

import { ApiError } from './api.js';
import { parseDeepLink } from './deeplink.js';
import { h, num, put } from './dom.js';
import { rove } from './roving.js';
import { $, client, errorText, KEY_STORE, model, sessionId, setLink } from './shared.js';
import { initChat } from './view_chat.js';
import { bandsKnown, resetDescribe, runDescribe } from './view_describe.js';
import { initEdit, loadPatches, setSession } from './view_edit.js';
import { runInfer } from './view_infer.js';
import { runWalk } from './view_walk.js';

const POLL_MS = 3000;
const VIEWS = ['chat', 'describe', 'walk', 'infer', 'edit'];
let online = null; // last status poll: true, false, or null before the first

function banner(text) {
  const b = $('banner');
  b.hidden = !text;
  b.textContent = text || '';
}

// ---- views, tabs, the URL ----

function showView(view) {
  for (const v of VIEWS) $('view-' + v).hidden = v !== view;
  for (const b of $('tabs').querySelectorAll('button')) {
    const on = b.dataset.view === view;
    b.setAttribute('aria-selected', on ? 'true' : 'false');
    b.setAttribute('tabindex', on ? '0' : '-1');
  }
}

// The tab's view, with the URL following it (its last query, so a reload restores it).
function openTab(view) {
  showView(view);
  setLink(view);
  if (view === 'edit') loadPatches();
}

// The inputs of a view from a parsed link.
function fill(d) {
  if (d.view === 'describe') {
    $('describe-entity').value = d.value;
    if (!$('describe-band').disabled) $('describe-band').value = d.band;
  } else if (d.view === 'walk') {
    $('walk-prompt').value = d.value;
    $('walk-top').value = d.top;
  } else if (d.view === 'infer') {
    $('infer-prompt').value = d.value;
    $('infer-mode').value = d.mode;
  }
}

// The other tabs' last queries (kept by setLink for this browser tab), so that after a
// reload a tab opens where it was left.
function restoreTabs() {
  for (const v of ['describe', 'walk', 'infer']) {
    const saved = sessionStorage.getItem('larql.link.' + v);
    if (saved) fill(parseDeepLink(saved));
  }
}

function applyLink() {
  const d = parseDeepLink(location.search);
  if (d.session && d.session !== sessionId()) setSession(d.session, { quiet: true }); // a shared link's session
  showView(d.view);
  fill(d);
  if (d.value) ({ describe: runDescribe, walk: runWalk, infer: runInfer })[d.view]();
  else if (d.view === 'edit') loadPatches();
}

// ---- status (refreshed while the page is visible; the banner says when the server is gone) ----

function statusItems(rt, st) {
  const sch = rt.scheduler || {};
  const hist = sch.batch_size_histogram && typeof sch.batch_size_histogram === 'object' ? sch.batch_size_histogram : {};
  const batches = Object.entries(hist).map(([k, v]) => `${k}×${v}`).join(' ');
  return [
    ['model', rt.model],
    ['kernels', rt.kernels],
    ['threads', rt.threads],
    ['KV', rt.kv_type],
    ['decode', num(rt.decode_tokens_per_second, 1) + ' tok/s'],
    ['streams', rt.active_streams],
    ['requests', rt.active_requests],
    ['max batch', sch.max_batch_seen],
    ['batches', batches || '–'],
    ['layers', st && st.layers],
    ['features', st && st.features],
    ['session', sessionId() || 'global'],
  ];
}

async function pollStatus() {
  if (document.hidden) return;
  try {
    const rt = await client.runtime();
    let st = null;
    try {
      st = await client.stats();
      if (Number.isInteger(st.layers)) model.layers = st.layers;
      if ('layer_bands' in st) model.layerBands = st.layer_bands;
      bandsKnown();
    } catch {
      /* a server without a vindex still has a runtime */
    }
    $('model').textContent = String(rt.model ?? '');
    put($('status'), statusItems(rt, st).map(([k, v]) => h('span', {}, k + ': ', h('b', {}, String(v ?? '–')))));
    if ($('banner').dataset.kind === 'status') {
      banner(''); // the server is back (restarted, or the key is right now)
      delete $('banner').dataset.kind;
    }
    online = true;
  } catch (e) {
    const was = online;
    online = false;
    if (e instanceof ApiError && e.status === 401) banner(errorText(e).replace(/: missing or invalid.*$/, '.'));
    else if (e instanceof ApiError && e.status === 0) banner('The server is not answering (' + e.message + '); retrying every few seconds…');
    else banner(errorText(e));
    $('banner').dataset.kind = 'status';
    if (was !== false) put($('status'));
  }
}

// ---- start ----

function init() {
  $('key').value = sessionStorage.getItem(KEY_STORE) || '';
  $('key').addEventListener('change', () => {
    const k = $('key').value.trim();
    if (k) sessionStorage.setItem(KEY_STORE, k);
    else sessionStorage.removeItem(KEY_STORE);
    pollStatus().then(applyLink); // what failed for want of the key runs again
  });
  const tabs = $('tabs').querySelectorAll('button');
  for (const b of tabs) b.addEventListener('click', () => openTab(b.dataset.view));
  // arrow keys move along the tabs and select as they go (the tablist pattern)
  rove([tabs], { wrap: true, onFocus: (b) => { if (b.getAttribute('aria-selected') !== 'true') openTab(b.dataset.view); } });
  $('describe-form').addEventListener('submit', (ev) => { ev.preventDefault(); runDescribe(); });
  $('walk-form').addEventListener('submit', (ev) => { ev.preventDefault(); runWalk(); });
  $('infer-form').addEventListener('submit', (ev) => { ev.preventDefault(); runInfer(); });
  resetDescribe();
  model.layers = 0;
  model.layerBands = undefined;
  initChat();
  initEdit();
  if (globalThis.matchMedia && matchMedia('(min-width: 701px)').matches) $('convs').setAttribute('open', '');
  restoreTabs();
  const first = parseDeepLink(location.search);
  showView(first.view); // at once; its query runs once the status poll has the model's shape
  fill(first);
  window.addEventListener('popstate', applyLink);
  document.addEventListener('visibilitychange', pollStatus);
  document.addEventListener('larql-session', pollStatus);
  setInterval(pollStatus, POLL_MS);
  pollStatus().then(applyLink);
}

init();
