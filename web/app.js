// The page's glue: wires index.html's elements to the API client and draws results with
// dom.js (text nodes and attributes only, never markup from data). The logic worth testing
// lives in the DOM-free modules (sse, api, deeplink, heat, chat), run under node by tests/web/.

import { ApiError, createClient } from './api.js';
import { emptyConversation, loadConversation, replyStats, requestBody, saveConversation, statsLine } from './chat.js';
import { buildDeepLink, parseDeepLink } from './deeplink.js';
import { h, num, put, s, showToken } from './dom.js';
import { heatColor, heatModel, heatTextColor } from './heat.js';

const $ = (id) => document.getElementById(id);
const KEY_STORE = 'larql.key';
const SESSION_STORE = 'larql.session';
const POLL_MS = 3000;

const client = createClient({
  key: () => sessionStorage.getItem(KEY_STORE) || '',
  session: () => sessionStorage.getItem(SESSION_STORE) || '',
});

let numLayers = 0;  // from /v1/stats once it answers
let online = null;  // last status poll: true, false, or null before the first

// ---- errors and the banner ----

function errorText(e) {
  if (e instanceof ApiError) {
    if (e.status === 401) return 'The server needs an API key (type it in the key field above): ' + e.message;
    return (e.status ? `HTTP ${e.status}: ` : '') + e.message;
  }
  return String(e && e.message ? e.message : e);
}

function banner(text) {
  const b = $('banner');
  b.hidden = !text;
  b.textContent = text || '';
}

function showError(out, e) {
  put(out, h('p', { class: 'error' }, errorText(e)));
  if (e instanceof ApiError && e.status === 401) $('key').focus();
}

// ---- views, tabs, deep links ----

const VIEWS = ['chat', 'describe', 'walk', 'infer', 'edit'];

function showView(view) {
  for (const v of VIEWS) $('view-' + v).hidden = v !== view;
  for (const b of $('tabs').querySelectorAll('button')) b.classList.toggle('on', b.dataset.view === view);
}

function setLink(view, value, extra) {
  const q = buildDeepLink(view, value, extra);
  const url = location.pathname + q;
  if (url !== location.pathname + location.search) history.pushState(null, '', url);
}

function applyLink() {
  const d = parseDeepLink(location.search);
  showView(d.view);
  if (d.view === 'describe') {
    $('describe-entity').value = d.value;
    $('describe-band').value = d.band;
    runDescribe();
  } else if (d.view === 'walk') {
    $('walk-prompt').value = d.value;
    runWalk();
  } else if (d.view === 'infer') {
    $('infer-prompt').value = d.value;
    $('infer-mode').value = d.mode;
    runInfer();
  } else if (d.view === 'edit') {
    loadPatches();
  }
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
    ['session', sessionStorage.getItem(SESSION_STORE) || 'global'],
  ];
}

async function pollStatus() {
  if (document.hidden) return;
  try {
    const rt = await client.runtime();
    let st = null;
    try {
      st = await client.stats();
      if (Number.isInteger(st.layers)) numLayers = st.layers;
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
    if (e instanceof ApiError && e.status === 401) {
      banner('The server needs an API key: type it in the key field above.');
    } else if (e instanceof ApiError && e.status === 0) {
      banner('The server is not answering (' + e.message + '); retrying every few seconds…');
    } else {
      banner(errorText(e));
    }
    $('banner').dataset.kind = 'status';
    if (was !== false) put($('status'));
  }
}

// ---- chat ----

let conv = loadConversation(localStorage);
let streaming = null; // the AbortController of the reply being streamed

function messageNode(m) {
  return h('div', { class: 'msg ' + m.role }, m.content, m.stats ? h('span', { class: 'meta' }, statsLine(m.stats)) : null,
    m.error ? h('span', { class: 'meta err' }, m.error) : null);
}

function renderMessages() {
  put($('messages'), conv.messages.map(messageNode));
}

function readSettings() {
  conv.system = $('system').value;
  conv.settings.temperature = parseFloat($('temperature').value);
  conv.settings.top_p = parseFloat($('top_p').value);
  conv.settings.max_tokens = parseInt($('max_tokens').value, 10);
  saveConversation(localStorage, conv);
}

async function send() {
  if (streaming) {
    streaming.abort(); // the server notices the closed connection and stops decoding
    return;
  }
  const text = $('prompt').value;
  if (!text.trim()) return;
  readSettings();
  $('prompt').value = '';
  conv.messages.push({ role: 'user', content: text });
  const body = requestBody(conv);
  const reply = { role: 'assistant', content: '' };
  conv.messages.push(reply);
  renderMessages();
  const node = $('messages').lastChild;
  const textNode = node.firstChild || node.appendChild(document.createTextNode(''));
  const ctl = new AbortController();
  streaming = ctl;
  $('send').textContent = 'Stop';
  const t0 = performance.now();
  let tFirst = NaN, chunks = 0, usage = null, stopped = false;
  try {
    await client.chat(body, {
      signal: ctl.signal,
      onChunk(c) {
        if (c.usage) usage = c.usage;
        if (c.content) {
          if (!chunks) tFirst = performance.now();
          chunks++;
          reply.content += c.content;
          textNode.textContent = reply.content;
          node.scrollIntoView({ block: 'end' });
        }
      },
    });
  } catch (e) {
    if (e && e.name === 'AbortError') stopped = true;
    else reply.error = errorText(e);
  }
  streaming = null;
  $('send').textContent = 'Send';
  reply.stats = replyStats({ usage, chunks, t0, tFirst, tEnd: performance.now(), stopped });
  saveConversation(localStorage, conv);
  renderMessages();
}

function initChat() {
  $('system').value = conv.system;
  $('temperature').value = conv.settings.temperature;
  $('top_p').value = conv.settings.top_p;
  $('max_tokens').value = conv.settings.max_tokens;
  for (const id of ['system', 'temperature', 'top_p', 'max_tokens']) $(id).addEventListener('change', readSettings);
  $('clear').addEventListener('click', () => {
    if (streaming) streaming.abort();
    const keep = conv;
    conv = emptyConversation();
    conv.system = keep.system;
    conv.settings = keep.settings;
    saveConversation(localStorage, conv);
    renderMessages();
  });
  $('chat-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    send();
  });
  $('prompt').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      if (!streaming) send();
    }
  });
  renderMessages();
}

// ---- describe ----

async function runDescribe() {
  const entity = $('describe-entity').value.trim();
  const band = $('describe-band').value;
  if (!entity) return;
  setLink('describe', entity, { band });
  const out = $('describe-out');
  put(out, h('p', { class: 'muted' }, 'describing…'));
  try {
    const j = await client.describe(entity, band, 30);
    const edges = Array.isArray(j.edges) ? j.edges : [];
    if (!edges.length) {
      put(out, h('p', { class: 'muted' }, `No edges for “${entity}” in the ${band} band.`));
      return;
    }
    const rows = edges.map((e, i) =>
      h('tr', {},
        h('td', { class: 'num' }, i + 1),
        h('td', {}, e.relation ?? ''),
        h('td', { class: 'tok target' }, showToken(e.target)),
        h('td', { class: 'num' }, num(e.gate_score, 2)),
        h('td', { class: 'num' }, e.layer),
        h('td', { class: 'tok muted' }, Array.isArray(e.also) ? e.also.map(showToken).join('  ') : '')));
    put(out, h('p', { class: 'muted' }, `${edges.length} edges for “${j.entity ?? entity}” (${num(j.latency_ms, 1)} ms)`),
      h('table', { class: 'edges' }, h('tr', {}, ['#', 'relation', 'target', 'score', 'layer', 'also'].map((c) => h('th', {}, c))), rows));
  } catch (e) {
    showError(out, e);
  }
}

// ---- walk: the heat map ----

const CELL_W = 64, CELL_H = 22, LABEL_W = 64;

function hoverText(layer, c) {
  return `layer ${layer} · feature ${c.feature} · gate ${num(c.gate_score, 2)} · top token ${showToken(c.target)}` +
    (c.relation ? ` · relation ${c.relation}` : '');
}

function drawHeat(model) {
  const w = LABEL_W + Math.max(1, model.cols) * CELL_W, hgt = model.rows.length * CELL_H + 4;
  const svg = s('svg', { class: 'heat', width: w, height: hgt, viewBox: `0 0 ${w} ${hgt}`, role: 'img' });
  model.rows.forEach((row, r) => {
    const y = r * CELL_H + 2;
    const g = s('g', { class: 'row', 'data-layer': row.layer });
    g.appendChild(s('text', { class: 'rowlabel', x: 4, y: y + 15, on: { click: () => showLayer(row.layer, row, g) } }, 'L' + row.layer));
    row.cells.forEach((c, i) => {
      const x = LABEL_W + i * CELL_W;
      const rect = s('rect', {
        class: 'cell', x, y, width: CELL_W - 2, height: CELL_H - 2, fill: heatColor(c.gate_score, model.maxAbs),
        on: {
          mouseenter: () => { $('walk-hover').textContent = hoverText(row.layer, c); },
          click: () => showLayer(row.layer, row, g),
        },
      }, s('title', {}, hoverText(row.layer, c)));
      g.appendChild(rect);
      const label = showToken(c.target);
      g.appendChild(s('text', { x: x + 4, y: y + 15, fill: heatTextColor(c.gate_score, model.maxAbs), 'pointer-events': 'none' },
        label.length > 8 ? label.slice(0, 7) + '…' : label));
    });
    svg.appendChild(g);
  });
  return svg;
}

async function showLayer(layer, row, g) {
  for (const el of $('walk-out').querySelectorAll('g.sel')) el.classList.remove('sel');
  g.classList.add('sel');
  const out = $('walk-layer');
  put(out, h('p', { class: 'muted' }, `layer ${layer}: loading its features…`));
  const fired = new Map(row.cells.map((c) => [c.feature, c]));
  try {
    const j = await client.select(layer, 30);
    const edges = Array.isArray(j.edges) ? j.edges : [];
    put(out, h('h3', {}, `Layer ${layer}`),
      h('p', { class: 'muted' }, `The prompt fired ${row.cells.length} of the features shown in the map; the layer's ${edges.length} strongest features (of ${j.total ?? '?'}):`),
      h('table', {}, h('tr', {}, ['feature', 'top token', 'confidence', 'relation', 'this prompt'].map((c) => h('th', {}, c))),
        edges.map((e) => h('tr', {},
          h('td', { class: 'num' }, e.feature),
          h('td', { class: 'tok' }, showToken(e.target)),
          h('td', { class: 'num' }, num(e.c_score, 2)),
          h('td', {}, e.relation ?? ''),
          h('td', { class: 'num' }, fired.has(e.feature) ? 'gate ' + num(fired.get(e.feature).gate_score, 2) : '')))));
  } catch (e) {
    showError(out, e);
  }
}

async function runWalk() {
  const prompt = $('walk-prompt').value;
  if (!prompt.trim()) return;
  const top = parseInt($('walk-top').value, 10) || 8;
  setLink('walk', prompt);
  const out = $('walk-out');
  put($('walk-layer'));
  put(out, h('p', { class: 'muted' }, 'walking…'));
  try {
    const j = await client.walk(prompt, top);
    const model = heatModel(j.hits, numLayers);
    put(out, h('p', { class: 'muted' }, `${model.rows.length} layers × top ${top} features by |gate score| (${num(j.latency_ms, 1)} ms); red fires positive, blue negative.`),
      drawHeat(model));
  } catch (e) {
    showError(out, e);
  }
}

// ---- infer ----

function predTable(title, preds, ms, override) {
  const list = Array.isArray(preds) ? preds : [];
  return h('div', { class: 'half' },
    h('h3', {}, title, Number.isFinite(ms) ? h('span', { class: 'muted' }, ` ${num(ms, 1)} ms`) : null),
    h('table', {}, h('tr', {}, ['token', 'probability', ''].map((c) => h('th', {}, c))),
      list.map((p, i) => h('tr', {},
        h('td', { class: 'tok' }, showToken(p.token),
          override && i === 0 && p.token === override.token ? h('span', { class: 'badge', title: 'the KNN store answered, not the weights' }, `KNN override · layer ${override.layer} · cos ${num(override.cosine, 3)}`) : null),
        h('td', { class: 'num' }, num(p.probability, 4)),
        h('td', {}, h('span', { class: 'bar', 'data-w': p.probability }))))));
}

async function runInfer() {
  const prompt = $('infer-prompt').value;
  const mode = $('infer-mode').value;
  if (!prompt.trim()) return;
  setLink('infer', prompt, { mode });
  const out = $('infer-out');
  put(out, h('p', { class: 'muted' }, 'inferring…'));
  try {
    const j = await client.infer(prompt, mode, 10);
    const ov = j.knn_override && typeof j.knn_override === 'object' ? j.knn_override : null;
    const halves = [];
    if (j.walk) halves.push(predTable('walk (vindex + KNN store)', j.walk, j.walk_ms, ov));
    if (j.dense) halves.push(predTable('dense (the weights)', j.dense, j.dense_ms, null));
    if (j.predictions) halves.push(predTable(mode, j.predictions, j.latency_ms, mode === 'walk' ? ov : null));
    put(out, h('div', { class: 'pair' }, halves),
      ov ? h('p', { class: 'muted' }, `The KNN override fired at layer ${ov.layer}: the weights alone would say ${showToken(ov.model_top1 && ov.model_top1.token)}.`) : null);
    for (const b of out.querySelectorAll('span.bar')) b.style.width = Math.round(Math.max(0, Math.min(1, Number(b.dataset.w) || 0)) * 120) + 'px';
  } catch (e) {
    showError(out, e);
  }
}

// ---- edit ----

function sessionId() {
  return sessionStorage.getItem(SESSION_STORE) || '';
}

function setSession(id) {
  if (id) sessionStorage.setItem(SESSION_STORE, id);
  else sessionStorage.removeItem(SESSION_STORE);
  $('session').value = id;
  loadPatches();
}

async function loadPatches() {
  const out = $('patches-out');
  try {
    const j = await client.patches();
    const list = Array.isArray(j.patches) ? j.patches : [];
    put(out, h('p', { class: 'muted' }, 'Requests use ' + (sessionId() ? `session “${sessionId()}”` : 'the global state') + '.'),
      list.length
        ? h('table', {}, h('tr', {}, ['name', 'operations', 'base model', ''].map((c) => h('th', {}, c))),
          list.map((p) => h('tr', {},
            h('td', {}, p.name), h('td', { class: 'num' }, p.operations), h('td', {}, p.base_model ?? ''),
            h('td', {}, h('button', { type: 'button', on: { click: () => removePatch(p.name) } }, 'Remove')))))
        : h('p', { class: 'muted' }, 'No patches.'));
  } catch (e) {
    showError(out, e);
  }
}

async function removePatch(name) {
  try {
    await client.removePatch(name);
  } catch (e) {
    showError($('insert-out'), e);
  }
  loadPatches();
}

async function runInsert() {
  const edge = {
    entity: $('ins-entity').value, relation: $('ins-relation').value, target: $('ins-target').value, mode: $('ins-mode').value,
  };
  const layer = parseInt($('ins-layer').value, 10);
  if (Number.isInteger(layer)) edge.layer = layer;
  const out = $('insert-out');
  try {
    const j = await client.insert(edge);
    put(out, h('p', {}, `Inserted ${j.inserted} (${j.mode}) ${j.entity} —${j.relation}→ ${j.target}` +
      (j.session ? ` in session “${j.session}”` : ' into the global state') + ` in ${num(j.latency_ms, 1)} ms` +
      (Number.isFinite(j.target_probability) ? `; the target's probability after the canonical prompt: ${num(j.target_probability, 3)}` : '') +
      (Number.isFinite(j.down_scale) ? ` (down scaled ×${num(j.down_scale, 3)})` : '') + '.'));
  } catch (e) {
    showError(out, e);
  }
  loadPatches();
}

function initEdit() {
  $('session').value = sessionId();
  $('session').addEventListener('change', () => setSession($('session').value.trim()));
  $('session-new').addEventListener('click', () => {
    const b = new Uint8Array(8);
    crypto.getRandomValues(b);
    setSession('web-' + [...b].map((x) => x.toString(16).padStart(2, '0')).join(''));
  });
  $('session-global').addEventListener('click', () => setSession(''));
  $('insert-form').addEventListener('submit', (ev) => { ev.preventDefault(); runInsert(); });
  $('patches-refresh').addEventListener('click', loadPatches);
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
  for (const b of $('tabs').querySelectorAll('button')) {
    b.addEventListener('click', () => {
      const v = b.dataset.view;
      showView(v);
      if (v === 'chat') history.pushState(null, '', location.pathname);
      if (v === 'edit') { setLink('edit', ''); loadPatches(); }
    });
  }
  $('describe-form').addEventListener('submit', (ev) => { ev.preventDefault(); runDescribe(); });
  $('walk-form').addEventListener('submit', (ev) => { ev.preventDefault(); runWalk(); });
  $('infer-form').addEventListener('submit', (ev) => { ev.preventDefault(); runInfer(); });
  initChat();
  initEdit();
  window.addEventListener('popstate', applyLink);
  document.addEventListener('visibilitychange', pollStatus);
  setInterval(pollStatus, POLL_MS);
  pollStatus().then(applyLink);
}

init();
