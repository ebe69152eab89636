// web/chat.js: the stored conversations survive bad storage (and the round-1 single
// conversation is taken over), settings out of range are clamped with a note, the request
// body follows the settings, per-token probabilities are read, the figures are right.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkSetting, convTitle, currentConv, defaultSettings, loadStore, newConversation, pct, replyStats, requestBody, saveStore, statsLine, STORE_KEY, tokenProb } from '../../web/chat.js';
import { FakeStorage } from './fakedom.mjs';

test('save then load gives the same conversations', () => {
  const st = new FakeStorage();
  const s = loadStore(st);
  assert.equal(s.convs.length, 1);
  const c = currentConv(s);
  c.system = 'Be brief.';
  c.messages.push({ role: 'user', content: 'Hi <b>' }, { role: 'assistant', content: 'Hello', stats: { completion_tokens: 1 }, finish: 'length', lp: [{ t: 'Hello', p: 0.5, alt: [] }] });
  const d = newConversation();
  s.convs.unshift(d);
  s.current = d.id;
  s.settings.temperature = 0;
  assert.ok(saveStore(st, s));
  assert.deepEqual(loadStore(st), s);
});

test('damaged or foreign storage loads as one empty (or cleaned) conversation', () => {
  const st = new FakeStorage();
  for (const junk of ['{', 'null', '42', '"x"', '[]', '{"convs":5}']) {
    st.setItem(STORE_KEY, junk);
    const s = loadStore(st);
    assert.equal(s.convs.length, 1, junk);
    assert.equal(s.current, s.convs[0].id);
    assert.deepEqual(s.settings, defaultSettings());
  }
  st.setItem(STORE_KEY, JSON.stringify({ current: 'nope', convs: [{ id: 'a', system: 5, messages: [{ role: 'system', content: 'x' }, { role: 'user', content: 3 }, { role: 'user', content: 'ok' }] }, { id: 7 }], settings: { temperature: 'hot', top_p: 0.5, max_tokens: 0 } }));
  const s = loadStore(st);
  assert.equal(s.convs.length, 1);
  assert.equal(s.current, 'a');
  assert.equal(currentConv(s).system, '');
  assert.deepEqual(currentConv(s).messages, [{ role: 'user', content: 'ok' }]);
  assert.equal(s.settings.temperature, 0.7);
  assert.equal(s.settings.top_p, 0.5);
  assert.equal(s.settings.max_tokens, 1); // clamped, not kept at 0
  const full = { getItem: () => null, setItem: () => { throw new Error('QuotaExceededError'); } };
  assert.equal(saveStore(full, s), false);
});

test("round 1's single conversation is taken over", () => {
  const st = new FakeStorage();
  st.setItem('larql.chat.v1', JSON.stringify({ system: 'sys', messages: [{ role: 'user', content: 'old' }], settings: { temperature: 0.2 } }));
  const s = loadStore(st);
  assert.equal(currentConv(s).messages[0].content, 'old');
  assert.equal(s.settings.temperature, 0.2);
  assert.equal(convTitle(currentConv(s)), 'old');
});

test('settings: out of range clamped with a note, not numbers replaced by the default', () => {
  assert.deepEqual(checkSetting('temperature', '5'), { value: 2, note: 'Temperature 5 is out of range (0 to 2): using 2.' });
  assert.deepEqual(checkSetting('max_tokens', '0'), { value: 1, note: 'Max tokens 0 is out of range (1 to 32768): using 1.' });
  assert.deepEqual(checkSetting('max_tokens', '2.5'), { value: 3, note: 'Max tokens must be a whole number: using 3.' });
  assert.deepEqual(checkSetting('top_p', '0.5'), { value: 0.5, note: '' });
  assert.deepEqual(checkSetting('temperature', ''), { value: 0.7, note: '' });
  assert.match(checkSetting('temperature', 'hot').note, /not a number/);
  assert.deepEqual(checkSetting('seed', ''), { value: null, note: '' });
  assert.equal(checkSetting('frequency_penalty', '-3').value, -2);
});

test('request body: system first, settings in range, logprobs asked for', () => {
  const c = newConversation();
  c.system = 'sys';
  c.messages.push({ role: 'user', content: 'a' }, { role: 'assistant', content: 'b', stats: {} }, { role: 'user', content: 'c' });
  const s = { ...defaultSettings(), temperature: 0, top_p: 1, max_tokens: 16, seed: 42 };
  assert.deepEqual(requestBody(c, s), {
    messages: [{ role: 'system', content: 'sys' }, { role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }, { role: 'user', content: 'c' }],
    stream: true, stream_options: { include_usage: true }, logprobs: true, top_logprobs: 5,
    temperature: 0, top_p: 1, max_tokens: 16, frequency_penalty: 0, presence_penalty: 0, seed: 42,
  });
  c.system = '  ';
  const b = requestBody(c, { ...defaultSettings(), temperature: 9, max_tokens: 0 });
  assert.equal(b.messages[0].role, 'user');
  assert.equal(b.temperature, 2);
  assert.equal(b.max_tokens, 1);
  assert.ok(!('seed' in b));
});

test('per-token probabilities: probability, alternatives, bytes of a broken character', () => {
  const e = tokenProb({ token: ' Paris', logprob: Math.log(0.5), bytes: [32], top_logprobs: [{ token: ' Lyon', logprob: Math.log(0.25) }, { token: 5 }] });
  assert.equal(e.t, ' Paris');
  assert.ok(Math.abs(e.p - 0.5) < 1e-12);
  assert.equal(e.alt.length, 1);
  assert.ok(!('b' in e));
  assert.deepEqual(tokenProb({ token: '\ufffd', logprob: -1, bytes: [226, 300] }).b, [226]);
  assert.equal(tokenProb({ token: 'x' }), null);
  assert.equal(pct(0.832), '83.2%');
  assert.equal(pct(0.05), '5.00%');
  assert.equal(pct(0.00001), '1.0e-3%');
});

test('reply figures: decode tok/s after the first token, counts from usage, stopped', () => {
  const st = replyStats({ usage: { prompt_tokens: 12, completion_tokens: 11 }, chunks: 11, t0: 0, tFirst: 100, tEnd: 600 });
  assert.deepEqual(st, { completion_tokens: 11, prompt_tokens: 12, first_token_ms: 100, tokens_per_second: 20, stopped: false });
  assert.equal(statsLine(st), '12 prompt + 11 tokens · 20 tok/s · first token 100 ms');
  const stopped = replyStats({ usage: null, chunks: 3, t0: 0, tFirst: 10, tEnd: 210, stopped: true });
  assert.equal(statsLine(stopped), '3 tokens · 10 tok/s · first token 10 ms · stopped');
  assert.equal(statsLine(replyStats({ usage: null, chunks: 0, t0: 0, tFirst: NaN, tEnd: 5 })), '0 tokens');
  assert.equal(statsLine(null), '');
});
