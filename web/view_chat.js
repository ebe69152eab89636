// The chat view: conversations in a list (localStorage), each message with its role, a reply
// streamed with a typing indicator until its first token, then shown as Markdown (ours,
// markdown.js) with its figures and a mark when max tokens cut it; copy, regenerate and edit;
// the per-token probabilities the server reports, on pointing, tapping or focusing a token.
// Enter sends; while a reply streams, Enter or Escape (or Stop) ends it.

import { checkSetting, convTitle, currentConv, loadStore, newConversation, pct, replyStats, requestBody, saveStore, SETTINGS, statsLine, tokenProb } from './chat.js';
import { h, put, showToken } from './dom.js';
import { parseMarkdown, toDom } from './markdown.js';
import { rove } from './roving.js';
import { $, client, errorText } from './shared.js';

// set by initChat (not at import: tests/web/e2e.mjs loads the page several times in one process)
let store = null;
let streaming = null; // the AbortController of the reply being streamed
let tokenView = new Set(); // messages (objects) shown as tokens with probabilities

const conv = () => currentConv(store);
const save = () => saveStore(localStorage, store);

// ---- the conversation list ----

function renderConvs() {
  put($('conv-list'), store.convs.map((c) =>
    h('li', { class: c.id === store.current ? 'cur' : null },
      h('button', { type: 'button', class: 'open', 'aria-current': c.id === store.current ? 'true' : null, on: { click: () => switchTo(c.id) } }, convTitle(c)),
      h('button', { type: 'button', class: 'del', 'aria-label': 'delete “' + convTitle(c) + '”', title: 'delete', on: { click: () => removeConv(c.id) } }, '×'))));
  $('convs').querySelector('summary').textContent = `Conversations (${store.convs.length})`;
  $('conv-title').textContent = convTitle(conv());
}

function switchTo(id) {
  if (streaming) streaming.abort();
  store.current = id;
  save();
  $('system').value = conv().system;
  renderConvs();
  renderMessages();
}

function removeConv(id) {
  store.convs = store.convs.filter((c) => c.id !== id);
  if (!store.convs.length) store.convs.push(newConversation());
  if (id === store.current) store.current = store.convs[0].id;
  switchTo(store.current);
}

function startNew() {
  const c = newConversation();
  c.system = conv().system;
  store.convs.unshift(c);
  switchTo(c.id);
  $('prompt').focus();
}

// ---- messages ----

function tip(el, e) {
  const t = $('tip');
  const lines = [`“${showToken(e.t)}” ${pct(e.p)}`];
  if (e.b && e.b.length) lines[0] += `  bytes ${e.b.map((x) => '0x' + x.toString(16).toUpperCase().padStart(2, '0')).join(' ')}`;
  if (e.alt.length) lines.push('alternatives: ' + e.alt.map(([a, p]) => `“${showToken(a)}” ${pct(p)}`).join(' · '));
  t.textContent = lines.join('\n');
  t.hidden = false;
  const r = el.getBoundingClientRect && el.getBoundingClientRect();
  if (r) {
    t.style.left = Math.max(4, Math.min(r.left + window.scrollX, document.documentElement.clientWidth - t.offsetWidth - 4)) + 'px';
    t.style.top = r.bottom + window.scrollY + 4 + 'px';
  }
}

function tokensBody(m) {
  const spans = m.lp.map((e) => {
    const cls = 't' + (e.p < 0.1 ? ' p2' : e.p < 0.5 ? ' p1' : '');
    return h('span', { class: cls, 'aria-label': `${showToken(e.t)} ${pct(e.p)}`, on: { mouseenter: (ev) => tip(ev.currentTarget, e), focus: (ev) => tip(ev.currentTarget, e), click: (ev) => tip(ev.currentTarget, e), blur: () => { $('tip').hidden = true; }, mouseleave: () => { $('tip').hidden = true; } } }, e.t);
  });
  rove([spans]);
  return h('div', { class: 'body toks', role: 'group', 'aria-label': 'reply tokens: arrow keys move, each shows its probability' }, spans);
}

function copyBtn(m) {
  return h('button', {
    type: 'button', class: 'copy', on: {
      click: async (ev) => {
        const b = ev.currentTarget;
        try {
          await navigator.clipboard.writeText(m.content);
          b.textContent = 'Copied';
        } catch {
          b.textContent = 'Copy failed: select the text';
        }
        setTimeout(() => { b.textContent = 'Copy'; }, 1500);
      },
    },
  }, 'Copy');
}

function messageNode(m, i, msgs) {
  const last = i === msgs.length - 1;
  const acts = [copyBtn(m)];
  if (m.role === 'user') acts.push(h('button', { type: 'button', class: 'edit', title: 'put this message back in the box; the replies after it are dropped', on: { click: () => editFrom(i) } }, 'Edit'));
  else {
    if (m.lp && m.lp.length)
      acts.push(h('button', { type: 'button', class: 'probs', 'aria-pressed': tokenView.has(m) ? 'true' : 'false', on: { click: () => { tokenView.has(m) ? tokenView.delete(m) : tokenView.add(m); renderMessages(); } } }, 'Probabilities'));
    if (last) acts.push(h('button', { type: 'button', class: 'regen', on: { click: regenerate } }, 'Regenerate'));
  }
  let body;
  if (m.role === 'assistant' && tokenView.has(m) && m.lp && m.lp.length)
    body = [tokensBody(m), h('span', { class: 'meta' }, 'Tokens as the model chose them, shaded under 50% (light) and 10% (strong): point at, tap or focus one for its probability and the alternatives.')];
  else if (m.role === 'assistant') body = h('div', { class: 'body md' }, toDom(parseMarkdown(m.content), h));
  else body = h('div', { class: 'body' }, m.content);
  return h('div', { class: 'msg ' + m.role },
    h('div', { class: 'role' }, m.role === 'user' ? 'You' : 'Assistant', h('span', { class: 'acts' }, acts)),
    body,
    m.stats || m.finish === 'length'
      ? h('span', { class: 'meta' }, statsLine(m.stats), m.finish === 'length' ? h('span', { class: 'cut' }, (m.stats ? ' · ' : '') + 'cut by max tokens') : null)
      : null,
    m.error ? h('span', { class: 'meta err' }, m.error) : null);
}

function renderMessages() {
  const msgs = conv().messages;
  put($('messages'), msgs.map(messageNode));
  $('tip').hidden = true;
  renderTitle();
}

const renderTitle = () => { $('conv-title').textContent = convTitle(conv()); };

// ---- sending ----

async function stream() {
  const c = conv();
  const body = requestBody(c, store.settings);
  const reply = { role: 'assistant', content: '' };
  c.messages.push(reply);
  c.updated = Date.now();
  renderMessages();
  renderConvs();
  const node = $('messages').lastChild;
  const bodyEl = node.querySelector('div.body') || node.childNodes[1];
  put(bodyEl, h('span', { class: 'typing', role: 'status', 'aria-label': 'the model is writing' }, h('i'), h('i'), h('i')));
  const ctl = new AbortController();
  streaming = ctl;
  $('send').textContent = 'Stop';
  const t0 = performance.now();
  let tFirst = NaN, chunks = 0, usage = null, stopped = false, finish = null;
  const lp = [];
  try {
    await client.chat(body, {
      signal: ctl.signal,
      onChunk(ch) {
        if (ch.usage) usage = ch.usage;
        if (ch.finish) finish = ch.finish;
        if (ch.logprobs) for (const e of ch.logprobs) { const t = tokenProb(e); if (t) lp.push(t); }
        if (ch.content) {
          if (!chunks) { tFirst = performance.now(); put(bodyEl); bodyEl.classList.remove('md'); }
          chunks++;
          reply.content += ch.content;
          bodyEl.textContent = reply.content;
          if (node.scrollIntoView) node.scrollIntoView({ block: 'end' });
        }
      },
    });
  } catch (e) {
    if (e && e.name === 'AbortError') stopped = true;
    else reply.error = errorText(e);
  }
  if (streaming === ctl) {
    streaming = null;
    $('send').textContent = 'Send';
  }
  reply.stats = replyStats({ usage, chunks, t0, tFirst, tEnd: performance.now(), stopped });
  if (finish) reply.finish = finish;
  if (lp.length) reply.lp = lp;
  save();
  renderMessages();
}

function send() {
  if (streaming) {
    streaming.abort(); // the server notices the closed connection and stops decoding
    return;
  }
  const text = $('prompt').value;
  if (!text.trim()) return;
  $('prompt').value = '';
  conv().messages.push({ role: 'user', content: text });
  stream();
}

function regenerate() {
  if (streaming) return;
  const msgs = conv().messages;
  if (msgs.length && msgs[msgs.length - 1].role === 'assistant') msgs.pop();
  stream();
}

function editFrom(i) {
  if (streaming) streaming.abort();
  const msgs = conv().messages;
  $('prompt').value = msgs[i].content;
  msgs.splice(i);
  save();
  renderMessages();
  renderConvs();
  $('prompt').focus();
}

// ---- settings ----

function readSetting(id) {
  const { value, note } = checkSetting(id, $(id).value);
  store.settings[id] = value;
  if (note) $(id).value = value ?? '';
  $('settings-note').textContent = note;
  save();
}

export function initChat() {
  store = loadStore(localStorage);
  streaming = null;
  tokenView = new Set();
  $('system').value = conv().system;
  $('system').addEventListener('change', () => { conv().system = $('system').value; save(); });
  for (const id of Object.keys(SETTINGS)) {
    $(id).value = store.settings[id] ?? '';
    $(id).addEventListener('change', () => readSetting(id));
  }
  $('clear').addEventListener('click', () => {
    if (streaming) streaming.abort();
    conv().messages = [];
    save();
    renderMessages();
    renderConvs();
  });
  $('conv-new').addEventListener('click', startNew);
  $('chat-form').addEventListener('submit', (ev) => { ev.preventDefault(); send(); });
  $('prompt').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      send(); // sends, or stops the reply being streamed
    }
  });
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && streaming) streaming.abort();
    if (ev.key === 'Escape') $('tip').hidden = true;
  });
  renderConvs();
  renderMessages();
}
