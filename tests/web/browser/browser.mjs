// The web page in a real browser: the system's Chromium, headless, driven by puppeteer-core
// (pinned by package-lock.json here) against real `larql serve` processes. Where
// tests/web/e2e.mjs runs app.js in a small fake DOM, this runs the page as served: the
// browser's own HTML parser, module loader, fetch and streams, CSS layout, real mouse and
// keyboard events, and the server's Content-Security-Policy enforced. Run by
// tests/cli/web_browser.sh with, in the environment:
//   LARQL_CHROMIUM     the Chromium executable
//   LARQL_WEB_OPEN     http://127.0.0.1:PORT of a server on a planted vindex (France>Paris@2)
//   LARQL_WEB_GUARDED  the same vindex behind --api-key LARQL_WEB_KEY
//   LARQL_WEB_SLOW     a server on a slower model, for the chat and its Stop
//   LARQL_WEB_SHOTS    a directory for a screenshot at the end of each test (NAME.png)
//   LARQL_WEB_TMP      a scratch directory (the browser's profile and home)
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { after, before, test } from 'node:test';
import puppeteer from 'puppeteer-core';

const OPEN = process.env.LARQL_WEB_OPEN;
const GUARDED = process.env.LARQL_WEB_GUARDED;
const SLOW = process.env.LARQL_WEB_SLOW;
const KEY = process.env.LARQL_WEB_KEY;
const SHOTS = process.env.LARQL_WEB_SHOTS;
const TMP = process.env.LARQL_WEB_TMP;
const PROMPT = 'The capital of France is';
const WAIT = { timeout: 20000 };

let browser;

before(async () => {
  mkdirSync(TMP + '/home', { recursive: true });
  browser = await puppeteer.launch({
    executablePath: process.env.LARQL_CHROMIUM,
    headless: true,
    // tests run as root, where Chromium's sandbox cannot start
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--disable-extensions'],
    userDataDir: TMP + '/profile',
    env: { ...process.env, HOME: TMP + '/home', XDG_CONFIG_HOME: TMP + '/home', XDG_CACHE_HOME: TMP + '/home' },
    defaultViewport: { width: 1100, height: 760 },
  });
});

after(async () => {
  if (browser) await browser.close();
});

// Runs fn on a fresh page in its own browser context (its own localStorage and
// sessionStorage) and then saves its screenshot as NAME.png, whether fn passed or not. The
// page records what would show it misbehaving, checked after fn: uncaught errors, console
// errors, Content-Security-Policy violations (markup injected from data would have its
// inline handler refused, and reported, here; a request to another origin too), and the API
// requests it made with their headers (page.seen.requests).
async function withPage(name, fn, { allow401 = false } = {}) {
  const ctx = await browser.createBrowserContext();
  try {
    const page = await ctx.newPage();
    const seen = { errors: [], requests: [] };
    page.seen = seen;
    page.on('pageerror', (e) => seen.errors.push('pageerror: ' + e.message));
    page.on('console', (m) => {
      if (m.type() === 'error') seen.errors.push('console: ' + m.text());
    });
    page.on('request', (r) => {
      if (r.url().includes('/v1/')) seen.requests.push({ url: r.url(), headers: r.headers() });
    });
    await page.evaluateOnNewDocument(() => {
      window.__violations = [];
      document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));
    });
    try {
      await fn(page);
    } finally {
      if (SHOTS) {
        mkdirSync(SHOTS, { recursive: true });
        await page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true }).catch(() => {});
      }
    }
    assert.deepEqual(await page.evaluate(() => window.__violations), [], 'no CSP violation');
    // a refused request shows in the console as a failed load; anything else is a bug
    const errs = allow401 ? seen.errors.filter((e) => !/status of 401/.test(e)) : seen.errors;
    assert.deepEqual(errs, [], 'no script error');
  } finally {
    await ctx.close();
  }
}

const text = (page, sel) => page.$eval(sel, (el) => el.textContent);
const rowsOf = (page, sel) =>
  page.$$eval(sel + ' tr', (trs) => trs.filter((tr) => tr.querySelector('td')).map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)));

async function stats(base) {
  return (await fetch(base + '/v1/stats')).json();
}

test('/?describe=France shows Paris as the first edge, at the planted layer', () => withPage('describe-france', async (page) => {
  await page.goto(OPEN + '/?describe=France');
  await page.waitForSelector('#describe-out table', WAIT);
  assert.equal(await page.$eval('#view-describe', (el) => el.hidden), false);
  assert.equal(await page.$eval('#view-chat', (el) => el.hidden), true);
  assert.equal(await page.$eval('#describe-entity', (el) => el.value), 'France');
  const rows = await rowsOf(page, '#describe-out table');
  assert.ok(rows.length > 0);
  assert.equal(rows[0][2], 'Paris', rows[0].join(' | '));
  assert.equal(rows[0][4], '2');
  // laid out, not just in the DOM: the table is visible and its first target cell has a size
  const box = await (await page.$('#describe-out td.target')).boundingBox();
  assert.ok(box && box.width > 0 && box.height > 0);
}));

test('/?walk=...: the heat map has one row per layer; a real hover and a click', () => withPage('walk-heatmap', async (page) => {
  await page.goto(OPEN + '/?walk=' + encodeURIComponent(PROMPT));
  await page.waitForSelector('#walk-out svg g.row rect', WAIT);
  const { layers } = await stats(OPEN);
  const rowLayers = await page.$$eval('#walk-out svg g.row', (gs) => gs.map((g) => g.dataset.layer));
  assert.deepEqual(rowLayers, [...Array(layers).keys()].map(String));
  const cellsPerRow = await page.$$eval('#walk-out svg g.row', (gs) => gs.map((g) => g.querySelectorAll('rect').length));
  assert.ok(cellsPerRow.every((n) => n >= 1 && n <= 8), cellsPerRow.join(' '));
  // the rows are drawn one under another (the browser's SVG layout, not only the markup)
  const ys = await page.$$eval('#walk-out svg g.row', (gs) => gs.map((g) => g.getBoundingClientRect().top));
  assert.ok(ys.every((y, i) => i === 0 || y > ys[i - 1]), ys.join(' '));
  // the mouse over the first cell of layer 1
  await page.hover('#walk-out svg g.row[data-layer="1"] rect');
  await page.waitForFunction(() => /^layer 1 · feature \d+/.test(document.getElementById('walk-hover').textContent), WAIT);
  // a click on layer 2's label lists the layer's features, the planted ones among them
  await page.click('#walk-out svg g.row[data-layer="2"] text.rowlabel');
  await page.waitForSelector('#walk-layer table', WAIT);
  assert.match(await text(page, '#walk-layer'), /^Layer 2/);
  const feats = await rowsOf(page, '#walk-layer table');
  assert.ok(feats.some((r) => r[1] === 'Paris' || r[1] === 'Germany'), 'planted features listed');
  assert.equal(await page.$eval('#walk-out svg g.row[data-layer="2"]', (g) => g.classList.contains('sel')), true);
}));

test('/?infer=...: compare shows the walk and dense halves side by side', () => withPage('infer-compare', async (page) => {
  await page.goto(OPEN + '/?infer=' + encodeURIComponent(PROMPT));
  await page.waitForSelector('#infer-out div.pair div.half table', WAIT);
  const halves = await page.$$eval('#infer-out div.pair div.half', (hs) =>
    hs.map((h) => {
      const r = h.getBoundingClientRect();
      return { title: h.querySelector('h3').textContent, left: r.left, top: r.top, width: r.width, rows: h.querySelectorAll('tr td.num').length };
    }));
  assert.equal(halves.length, 2);
  assert.match(halves[0].title, /^walk/);
  assert.match(halves[1].title, /^dense/);
  for (const h of halves) assert.equal(h.rows, 10, h.title);
  // side by side: the second half starts to the right of the first, on the same line
  assert.ok(halves[1].left >= halves[0].left + halves[0].width - 1, JSON.stringify(halves));
  assert.ok(Math.abs(halves[1].top - halves[0].top) < 2, JSON.stringify(halves));
  for (const sel of ['#infer-out div.half:nth-child(1)', '#infer-out div.half:nth-child(2)']) {
    const probs = (await rowsOf(page, sel + ' table')).map((r) => Number(r[1]));
    assert.ok(probs.every((x, i) => x > 0 && x <= 1 && (i === 0 || x <= probs[i - 1])), probs.join(' '));
  }
  // the probability bars got their widths through the CSSOM (which the CSP allows)
  const bar = await page.$eval('#infer-out span.bar', (b) => b.getBoundingClientRect().width);
  assert.ok(bar > 0, 'bar width ' + bar);
}));

test('the API key: required, typed into its field, sent as a bearer token', () => withPage('api-key', async (page) => {
  // required: without it the API refuses
  assert.equal((await fetch(GUARDED + '/v1/describe?entity=France')).status, 401);
  await page.goto(GUARDED + '/?describe=France');
  await page.waitForSelector('#describe-out p.error', WAIT);
  assert.match(await text(page, '#describe-out'), /^The server needs an API key/);
  await page.waitForFunction(() => !document.getElementById('banner').hidden && /API key/.test(document.getElementById('banner').textContent), WAIT);
  assert.ok(page.seen.requests.every((r) => !r.headers.authorization), 'no key sent before one is typed');
  // typed, then Tab: the change event stores it and the view runs again with it
  await page.type('#key', KEY);
  await page.keyboard.press('Tab');
  await page.waitForSelector('#describe-out table', WAIT);
  assert.equal((await rowsOf(page, '#describe-out table'))[0][2], 'Paris');
  await page.waitForFunction(() => document.getElementById('banner').hidden && /kernels: /.test(document.getElementById('status').textContent), WAIT);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('larql.key')), KEY);
  const keyed = page.seen.requests.filter((r) => r.headers.authorization);
  assert.ok(keyed.length >= 2, 'describe and status requests with the key');
  assert.ok(keyed.every((r) => r.headers.authorization === 'Bearer ' + KEY));
  // a reload in the same tab keeps the key
  await page.reload();
  await page.waitForFunction(() => /model: /.test(document.getElementById('status').textContent), WAIT);
  assert.equal(await page.$eval('#key', (el) => el.value), KEY);
}, { allow401: true }));

test('a hostile entity name renders as text, and its onerror never runs', () => withPage('hostile-entity', async (page) => {
  const EVIL = '<img src=x onerror="window.__pwned=1">';
  await page.goto(OPEN + '/?describe=' + encodeURIComponent(EVIL));
  await page.waitForFunction(() => {
    const t = document.getElementById('describe-out').textContent;
    return t && !/describing/.test(t);
  }, WAIT);
  assert.equal(await page.$eval('#describe-entity', (el) => el.value), EVIL);
  assert.ok((await text(page, '#describe-out')).includes(EVIL));
  // the chat shows it as typed too
  await page.click('nav button[data-view="chat"]');
  await page.click('details.settings summary');
  // greedy, so that the reply's length cannot vary from run to run (at the page's default
  // temperature a sampled end-of-turn token ended one CI run after 3 tokens)
  for (const [id, v] of [['max_tokens', '4'], ['temperature', '0']]) {
    await page.$eval('#' + id, (el) => { el.value = ''; });
    await page.type('#' + id, v);
    await page.keyboard.press('Tab');
  }
  await page.type('#prompt', EVIL);
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.getElementById('send').textContent === 'Send' && document.querySelectorAll('#messages .msg').length === 2, WAIT);
  assert.equal(await text(page, '#messages div.user .body'), EVIL);
  assert.match(await text(page, '#messages div.assistant span.meta'), /^\d+ prompt \+ 4 tokens · [\d.]+ tok\/s · first token \d+ ms( · cut by max tokens)?$/);
  // give a broken image the time to fail and fire its handler, were there one
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(await page.$$eval('img', (l) => l.length), 0);
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
}));

test('chat: Enter streams a reply; Stop closes the stream and the server cancels it', () => withPage('chat-stopped', async (page) => {
  // a prompt whose greedy reply is long with this model (a random model stops at its end
  // token after anything from a few tokens to a thousand), so the stream is surely still
  // running when Stop is pressed, a few tokens in (150 tokens take over a second here)
  const CAP = 150;
  let prompt = null, full = 0;
  for (const cand of ['Tell me a long story', 'Why', 'Once upon a time', 'Hello', 'The', 'Go', 'Write', 'A']) {
    const j = await (await fetch(SLOW + '/v1/chat/completions', {
      method: 'POST', body: JSON.stringify({ messages: [{ role: 'user', content: cand }], max_tokens: CAP, temperature: 0 }),
    })).json();
    if (j.usage.completion_tokens > full) [prompt, full] = [cand, j.usage.completion_tokens];
    if (full >= CAP) break;
  }
  assert.ok(full >= 50, `no candidate prompt streams long enough (best: ${full} tokens)`);
  const before = await stats(SLOW);
  await page.goto(SLOW + '/');
  await page.waitForFunction(() => /kernels: /.test(document.getElementById('status').textContent), WAIT);
  await page.click('details.settings summary');
  for (const [id, v] of [['max_tokens', String(full)], ['temperature', '0']]) {
    await page.$eval('#' + id, (el) => { el.value = ''; });
    await page.type('#' + id, v);
  }
  await page.keyboard.press('Tab');
  await page.type('#prompt', prompt);
  await page.keyboard.press('Enter');
  assert.equal(await text(page, '#send'), 'Stop');
  // streamed: the reply is seen growing while the button still says Stop
  const len = () => page.$eval('#messages div.assistant .body', (d) => d.textContent.length);
  await page.waitForFunction(() => (document.querySelector('#messages div.assistant .body')?.textContent.length ?? 0) > 0, WAIT);
  const first = await len();
  await page.waitForFunction((n) => document.querySelector('#messages div.assistant .body').textContent.length > n, WAIT, first);
  assert.equal(await text(page, '#send'), 'Stop', 'still streaming after two steps');
  assert.equal((await stats(SLOW)).active_streams, 1);
  await page.click('#send');
  await page.waitForFunction(() => document.getElementById('send').textContent === 'Send', WAIT);
  const meta = await text(page, '#messages div.assistant span.meta');
  assert.match(meta, /^\d+ tokens( · [\d.]+ tok\/s)?( · first token \d+ ms)? · stopped$/);
  const n = Number(/^(\d+)/.exec(meta)[1]);
  assert.ok(n < full, `${n} tokens shown of the ${full} of the uninterrupted reply`);
  // the server counted the cancel and no stream is left running
  let st;
  for (let i = 0; i < 200; i++) {
    st = await stats(SLOW);
    if (st.streams_canceled > before.streams_canceled && st.active_streams === 0) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(st.streams_canceled, before.streams_canceled + 1);
  assert.equal(st.active_streams, 0);
}));
