// The real page against real servers, without a browser: web/index.html as the server sends
// it, parsed into tests/web/fakedom.mjs (which has no markup parser reachable from script:
// innerHTML and friends throw), web/app.js run on it with fetch pointed at the server, and
// the page driven as a user would — typing, Enter, clicks, deep links. Run by
// tests/cli/web.sh with, in the environment:
//   LARQL_WEB_OPEN     http://127.0.0.1:PORT of a server on a planted vindex (France>Paris)
//   LARQL_WEB_GUARDED  the same vindex behind --api-key LARQL_WEB_KEY
//   LARQL, LARQL_WEB_SLOW  the binary and a slower GGUF: this file starts (and restarts) its
//                      own server on it for the stop and reconnect checks
//   LARQL_WEB_SNAPSHOTS  optional: a directory where each test leaves the page as it ended
//                      (static HTML with the stylesheet inline) for a person to look at
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { after, test } from 'node:test';
import { ApiError, createClient } from '../../web/api.js';
import { FakeDocument, FakeEvent, FakeStorage } from './fakedom.mjs';

const OPEN = process.env.LARQL_WEB_OPEN;
const GUARDED = process.env.LARQL_WEB_GUARDED;
const KEY = process.env.LARQL_WEB_KEY;
const EVIL = '<img src=x onerror=alert(1)>';
const realFetch = globalThis.fetch;
const realSetInterval = globalThis.setInterval;
let loads = 0;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// Waits for the page to reach a state (polling, generous bound: these are not timings).
async function waitFor(what, fn, ms = 30000) {
  const end = Date.now() + ms;
  for (;;) {
    let v;
    try {
      v = await fn();
    } catch {
      v = undefined;
    }
    if (v) return v;
    if (Date.now() > end) throw new Error('timed out waiting for ' + what);
    await sleep(10);
  }
}

// Loads the page from base with a query string: the served HTML, app.js executed on it.
// Storage objects may be shared between loads (a reload keeps localStorage).
async function loadPage(base, search = '', { local = new FakeStorage(), session = new FakeStorage() } = {}) {
  const res = await realFetch(base + '/' + search);
  assert.equal(res.status, 200);
  const doc = FakeDocument.fromHTML(await res.text());
  const timers = [];
  const loc = { pathname: '/', search };
  const win = { listeners: {}, addEventListener(t, f) { (this.listeners[t] ||= []).push(f); } };
  Object.assign(globalThis, {
    document: doc,
    window: win,
    location: loc,
    history: {
      pushState(_s, _t, url) {
        const u = new URL(url, 'http://page');
        loc.pathname = u.pathname;
        loc.search = u.search;
      },
      replaceState(_s, _t, url) {
        this.pushState(_s, _t, url);
      },
    },
    localStorage: local,
    sessionStorage: session,
    fetch: (url, opts) => realFetch(base + url, opts),
  });
  globalThis.setInterval = (fn) => timers.push(fn); // the status poll runs when the test says
  try {
    await import('../../web/app.js?load=' + ++loads);
  } finally {
    globalThis.setInterval = realSetInterval;
  }
  const $ = (id) => doc.getElementById(id);
  return {
    doc, $, local, session, loc,
    poll: () => Promise.all(timers.map((f) => f())),
    text: (id) => $(id).textContent,
    type(id, value) {
      $(id).value = value;
      $(id).dispatchEvent(new FakeEvent('change'));
    },
    submit(id) {
      $(id).dispatchEvent(new FakeEvent('submit'));
    },
  };
}

// Leaves the page as it stands in LARQL_WEB_SNAPSHOTS/NAME.html (when set).
const CSS = readFileSync(new URL('../../web/app.css', import.meta.url), 'utf8');
function snapshot(name, p) {
  const dir = process.env.LARQL_WEB_SNAPSHOTS;
  if (!dir) return;
  mkdirSync(dir, { recursive: true });
  writeFileSync(`${dir}/${name}.html`, p.doc.toHTML(CSS));
}

const cells = (tr) => tr.querySelectorAll('td').map((td) => td.textContent);
const rowsOf = (table) => table.querySelectorAll('tr').filter((tr) => tr.querySelectorAll('td').length);

test('/?describe=France: the describe view, Paris as the first edge', async () => {
  const p = await loadPage(OPEN, '?describe=France');
  const table = await waitFor('the edges table', () => p.$('describe-out').querySelector('table'));
  assert.equal(p.$('view-describe').hidden, false);
  assert.equal(p.$('view-chat').hidden, true);
  assert.equal(p.$('describe-entity').value, 'France');
  const first = cells(rowsOf(table)[0]);
  assert.equal(first[2], 'Paris', first.join(' | '));
  assert.equal(first[4], '2'); // the planted layer
  snapshot('describe-france', p);
  // the band selector: this 4-layer model has no layer bands, so it is off and says so, and
  // the link names no band
  assert.equal(p.$('describe-band').disabled, true);
  assert.equal(p.$('band-note').hidden, false);
  p.submit('describe-form');
  await waitFor('the new result', () => p.$('describe-out').querySelector('table') !== table && p.$('describe-out').querySelector('table'));
  assert.equal(p.loc.search, '?describe=France');
});

test('a hostile entity name renders as text everywhere', async () => {
  const p = await loadPage(OPEN, '?describe=' + encodeURIComponent(EVIL));
  await waitFor('the describe answer', () => !/describing/.test(p.text('describe-out')) && p.text('describe-out'));
  assert.equal(p.$('describe-entity').value, EVIL);
  assert.ok(p.text('describe-out').includes(EVIL), p.text('describe-out'));
  assert.equal(p.doc.querySelectorAll('img').length, 0);
  assert.equal(p.doc.querySelectorAll('script').length, 1); // index.html's own module
  // in the chat too: the user's message is shown as typed
  p.$('prompt').value = EVIL;
  p.submit('chat-form');
  await waitFor('the reply', () => p.$('send').textContent === 'Send' && p.$('messages').querySelectorAll('div.msg').length === 2);
  assert.equal(p.$('messages').querySelectorAll('div.body')[0].textContent, EVIL);
  assert.equal(p.doc.querySelectorAll('img').length, 0);
  snapshot('hostile-entity', p);
});

test('/?walk=...: a heat map with one row per layer; hover and click a layer', async () => {
  const p = await loadPage(OPEN, '?walk=' + encodeURIComponent('The capital of France is'));
  const svg = await waitFor('the heat map', () => p.$('walk-out').querySelector('svg'));
  const stats = await (await realFetch(OPEN + '/v1/stats')).json();
  const rows = svg.querySelectorAll('g').filter((g) => g.classList.contains('row'));
  assert.equal(rows.length, stats.layers);
  assert.deepEqual(rows.map((g) => g.dataset.layer), [...Array(stats.layers).keys()].map(String));
  for (const g of rows) {
    const n = g.querySelectorAll('rect').length;
    assert.ok(n >= 1 && n <= 8, `layer ${g.dataset.layer}: ${n} cells for top 8`);
  }
  const rects = svg.querySelectorAll('rect');
  assert.ok(rects.every((r) => /^rgb\(\d+,\d+,\d+\)$/.test(r.getAttribute('fill'))));
  rects[0].dispatchEvent(new FakeEvent('mouseenter', { bubbles: false }));
  assert.match(p.text('walk-hover'), /^layer 0 · feature \d+ · gate -?[\d.]+ · top token /);
  rows[2].querySelector('text').click();
  const table = await waitFor('the layer list', () => p.$('walk-layer').querySelector('table'));
  assert.match(p.text('walk-layer'), /^Layer 2/);
  assert.ok(rowsOf(table).length > 0);
  assert.ok(rowsOf(table).some((tr) => cells(tr)[1] === 'Germany' || cells(tr)[1] === 'Paris'), 'planted features listed');
  assert.ok(rows[2].classList.contains('sel'));
  snapshot('walk-heatmap', p);
  // a top out of range (past the form's own check) is clamped, and the page says so
  p.$('walk-top').value = '500';
  p.submit('walk-form');
  await waitFor('the clamped walk', () => /Top per layer “500” is out of range \(1 to 64\): using 64\./.test(p.text('walk-out')) && p.$('walk-out').querySelector('svg'));
  assert.equal(p.loc.search, '?walk=The%20capital%20of%20France%20is&top=64');
});

test('/?infer=...: walk and dense side by side (compare)', async () => {
  const p = await loadPage(OPEN, '?infer=' + encodeURIComponent('The capital of France is'));
  const pair = await waitFor('both halves', () => p.$('infer-out').querySelector('div.pair'));
  const halves = pair.querySelectorAll('div.half');
  assert.equal(halves.length, 2);
  assert.match(halves[0].querySelector('h3').textContent, /^walk/);
  assert.match(halves[1].querySelector('h3').textContent, /^dense/);
  for (const h of halves) {
    const rows = rowsOf(h.querySelector('table'));
    assert.equal(rows.length, 10);
    const probs = rows.map((tr) => Number(cells(tr)[1]));
    assert.ok(probs.every((x, i) => x > 0 && x <= 1 && (i === 0 || x <= probs[i - 1])), probs.join(' '));
  }
  assert.equal(p.doc.querySelectorAll('span').filter((s) => s.classList.contains('badge')).length, 0);
  snapshot('infer-compare', p);
});

test('edit: a session, an insert, the KNN override marked in infer, patches listed and removed', async () => {
  const session = new FakeStorage();
  const p = await loadPage(OPEN, '?edit', { session });
  await waitFor('the edit view', () => !p.$('view-edit').hidden && /No patches/.test(p.text('patches-out')));
  p.$('session-new').click();
  const sid = session.getItem('larql.session');
  assert.match(sid, /^web-[0-9a-f]{16}$/);
  assert.equal(p.$('session').value, sid);
  p.$('ins-entity').value = 'Atlantis';
  p.$('ins-relation').value = 'capital';
  p.$('ins-target').value = 'Poseidonia';
  p.$('ins-mode').value = 'knn';
  p.submit('insert-form');
  await waitFor('the insert', () => /Inserted/.test(p.text('insert-out')));
  assert.ok(p.text('insert-out').includes(`in session “${sid}”`), p.text('insert-out'));
  await waitFor('the session patch', () => p.text('patches-out').includes('session:' + sid));
  // the same page, infer view: the session's KNN store answers, and it is marked
  p.$('infer-prompt').value = 'The capital of Atlantis is';
  p.submit('infer-form');
  const badge = await waitFor('the KNN override badge', () => p.doc.querySelectorAll('span').find((s) => s.classList.contains('badge')));
  assert.match(badge.textContent, /^KNN override · layer \d+ · cos /);
  const walkFirst = cells(rowsOf(p.$('infer-out').querySelectorAll('div.half')[0].querySelector('table'))[0]);
  assert.ok(walkFirst[0].startsWith('Poseidonia'), walkFirst.join('|'));
  snapshot('infer-knn-override', p);
  // another session does not see it
  const other = createClient({ base: OPEN, fetchFn: realFetch, session: () => 'someone-else' });
  const j = await other.infer('The capital of Atlantis is', 'walk', 3);
  assert.ok(!j.knn_override);
  // a compose insert reports where the balance left the target
  p.$('ins-entity').value = 'Lemuria';
  p.$('ins-target').value = 'Germany';
  p.$('ins-mode').value = 'compose';
  p.submit('insert-form');
  // (the server refuses a compose that does not take, 422; this one balances)
  await waitFor('the compose insert', () => /\d+ \(compose\) Lemuria/.test(p.text('insert-out')));
  assert.match(p.text('insert-out'), /^Inserted \d+ \(compose\) Lemuria/);
  assert.match(p.text('insert-out'), /the target's probability after the canonical prompt “The capital of Lemuria is”: [\d.]+ \(down scaled ×[\d.]+\)/);
  assert.ok(!/constellation/.test(p.text('insert-out')));
  // server errors are shown as the server wrote them
  p.$('ins-layer').value = '9999';
  p.submit('insert-form');
  await waitFor('the error', () => p.$('insert-out').querySelector('p.error'));
  const direct = await realFetch(OPEN + '/v1/insert', { method: 'POST', body: JSON.stringify({ entity: 'A', relation: 'r', target: 'B', layer: 9999 }) });
  const msg = (await direct.json()).error;
  assert.equal(p.text('insert-out'), 'HTTP 400: ' + msg);
  // remove the session's patch
  const remove = p.$('patches-out').querySelectorAll('tr').find((tr) => tr.textContent.includes('session:' + sid)).querySelector('button');
  remove.click();
  await waitFor('the patch gone', () => !p.text('patches-out').includes('session:' + sid) && /No patches|edits/.test(p.text('patches-out')));
});

test('the API key: asked for, kept in sessionStorage, sent as a bearer token', async () => {
  const session = new FakeStorage();
  const p = await loadPage(GUARDED, '?describe=France', { session });
  await waitFor('the key banner', () => !p.$('banner').hidden && /API key/.test(p.text('banner')));
  await waitFor('the 401 in the view', () => p.$('describe-out').querySelector('p.error'));
  assert.match(p.text('describe-out'), /^The server needs an API key/);
  p.type('key', KEY);
  assert.equal(session.getItem('larql.key'), KEY);
  const table = await waitFor('the edges, now authorised', () => p.$('describe-out').querySelector('table'));
  assert.equal(cells(rowsOf(table)[0])[2], 'Paris');
  await waitFor('the status', () => p.$('banner').hidden && /kernels: /.test(p.text('status')));
  snapshot('api-key', p);
  // a reload in the same tab keeps the key
  const again = await loadPage(GUARDED, '', { session });
  assert.equal(again.$('key').value, KEY);
  await waitFor('the status after reload', () => /model: /.test(again.text('status')));
  // a wrong key is refused, and the message says so
  const bad = createClient({ base: GUARDED, fetchFn: realFetch, key: () => 'wrong' });
  await assert.rejects(bad.runtime(), (e) => e instanceof ApiError && e.status === 401 && /API key/.test(e.message));
});

// ---- a server of this file's own (slow model): chat, stop, reconnect ----

const children = [];
after(() => children.forEach((c) => c.kill('SIGKILL')));

function startServer(port) {
  return new Promise((resolve, reject) => {
    const c = spawn(process.env.LARQL, ['serve', process.env.LARQL_WEB_SLOW, '--port', String(port), '--threads', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(c);
    let out = '', err = '';
    c.stdout.on('data', (d) => {
      out += d;
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(out);
      if (m) resolve({ child: c, port: Number(m[1]) });
    });
    c.stderr.on('data', (d) => (err += d));
    c.on('exit', (code) => reject(new Error(`server exited ${code}: ${err}`)));
  });
}

test('chat: Enter streams a reply with its figures, Shift+Enter does not send, the conversation survives a reload', async () => {
  const srv = await startServer(0);
  const base = 'http://127.0.0.1:' + srv.port;
  const local = new FakeStorage();
  const p = await loadPage(base, '', { local });
  assert.equal(p.$('view-chat').hidden, false);
  p.type('system', 'You are terse.');
  p.type('max_tokens', '8');
  p.type('temperature', '0');
  p.$('prompt').value = 'Hello';
  p.$('prompt').dispatchEvent(new FakeEvent('keydown', { key: 'Enter', shiftKey: true }));
  assert.equal(p.$('messages').querySelectorAll('div.msg').length, 0, 'Shift+Enter is a newline, not a send');
  const ev = new FakeEvent('keydown', { key: 'Enter' });
  p.$('prompt').dispatchEvent(ev);
  assert.ok(ev.defaultPrevented);
  const meta = await waitFor('the figures under the reply', () => p.$('messages').querySelectorAll('span').find((s) => s.classList.contains('meta')));
  assert.match(meta.textContent, /^\d+ prompt \+ 8 tokens · [\d.]+ tok\/s · first token \d+ ms( · cut by max tokens)?$/);
  const msgs = p.$('messages').querySelectorAll('div.msg');
  assert.equal(msgs.length, 2);
  assert.equal(msgs[0].querySelector('div.body').textContent, 'Hello');
  assert.equal(msgs[0].querySelector('div.role').textContent, 'YouCopyEdit');
  // the same reply as the API gives for the same request (temperature 0)
  const direct = await (await realFetch(base + '/v1/chat/completions', {
    method: 'POST',
    body: JSON.stringify({ messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0 }),
  })).json();
  const stored = JSON.parse(local.getItem('larql.chats.v2'));
  assert.equal(stored.convs[0].messages[1].content, direct.choices[0].message.content);
  assert.equal(stored.convs[0].messages[1].finish, direct.choices[0].finish_reason);
  snapshot('chat', p);
  // reload: the conversation and the settings come back from localStorage
  const again = await loadPage(base, '', { local });
  assert.equal(again.$('messages').querySelectorAll('div.msg').length, 2);
  assert.equal(again.$('system').value, 'You are terse.');
  assert.equal(again.$('max_tokens').value, '8');
  again.$('clear').click();
  assert.equal(again.$('messages').querySelectorAll('div.msg').length, 0);
  srv.child.kill('SIGKILL');
});

test('chat: Stop closes the stream and the server cancels the generation', async () => {
  const srv = await startServer(0);
  const base = 'http://127.0.0.1:' + srv.port;
  // a prompt whose greedy reply is long on this machine (the random model stops at its end
  // token after anything from a few tokens to a thousand), so that the stream is surely
  // still running when Stop is pressed
  let prompt = null, full = 0;
  for (const cand of ['Write', 'Once upon a time', 'Hello', 'Tell me a long story', 'The', 'Why', 'A', 'Go']) {
    const j = await (await realFetch(base + '/v1/chat/completions', {
      method: 'POST', body: JSON.stringify({ messages: [{ role: 'user', content: cand }], max_tokens: 3000, temperature: 0 }),
    })).json();
    if (j.usage.completion_tokens > full) [prompt, full] = [cand, j.usage.completion_tokens];
    if (full >= 200) break;
  }
  assert.ok(full >= 50, `no candidate prompt streams long enough (best: ${full} tokens)`);
  const p = await loadPage(base, '');
  p.type('max_tokens', '3000');
  p.type('temperature', '0');
  p.$('prompt').value = prompt;
  p.submit('chat-form');
  assert.equal(p.$('send').textContent, 'Stop');
  const reply = () => p.$('messages').querySelectorAll('div.msg')[1];
  await waitFor('the first tokens', () => reply() && reply().querySelector('div.body').textContent.length > 0);
  p.submit('chat-form'); // the button says Stop
  await waitFor('the stream closed', () => p.$('send').textContent === 'Send');
  const meta = reply().querySelector('span.meta');
  assert.match(meta.textContent, /^\d+ tokens( · [\d.]+ tok\/s)?( · first token \d+ ms)? · stopped$/);
  const n = Number(/^(\d+)/.exec(meta.textContent)[1]);
  assert.ok(n < full, `${n} tokens shown of the ${full} the uninterrupted reply has`);
  snapshot('chat-stopped', p);
  const st = await waitFor('the server counting the cancel', async () => {
    const j = await (await realFetch(base + '/v1/stats')).json();
    return j.streams_canceled >= 1 && j.active_streams === 0 && j;
  });
  assert.equal(st.streams_canceled, 1);
  srv.child.kill('SIGKILL');
});

test('status: refreshed from /v1/runtime and /v1/stats; the page reconnects after a server restart', async () => {
  const first = await startServer(0);
  const port = first.port;
  const base = 'http://127.0.0.1:' + port;
  const p = await loadPage(base, '');
  await waitFor('the status', () => /kernels: /.test(p.text('status')));
  for (const k of ['model', 'kernels', 'threads', 'KV', 'decode', 'streams', 'max batch', 'batches'])
    assert.ok(p.text('status').includes(k + ': '), k + ' in ' + p.text('status'));
  assert.match(p.text('status'), /threads: 1/);
  // the server goes away: the next poll says so
  const gone = new Promise((r) => first.child.on('exit', r));
  first.child.kill('SIGKILL');
  await gone;
  await p.poll();
  assert.equal(p.$('banner').hidden, false);
  assert.match(p.text('banner'), /not answering/);
  // a page request meanwhile shows the same kind of error
  p.$('describe-entity').value = 'France';
  p.submit('describe-form');
  await waitFor('the error', () => p.$('describe-out').querySelector('p.error'));
  assert.match(p.text('describe-out'), /cannot reach the server/);
  snapshot('server-gone', p);
  // back on the same port: the next poll clears the banner and fills the status again
  await waitFor('the restarted server', async () => {
    try {
      return await startServer(port);
    } catch {
      return null;
    }
  });
  await p.poll();
  assert.equal(p.$('banner').hidden, true);
  assert.match(p.text('status'), /kernels: /);
  snapshot('server-back', p);
});
