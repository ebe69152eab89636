// web/chat.js: the stored conversation survives bad storage, the request body follows the
// settings, the figures under a reply are right.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { emptyConversation, loadConversation, replyStats, requestBody, saveConversation, statsLine, STORE_KEY } from '../../web/chat.js';
import { FakeStorage } from './fakedom.mjs';

test('save then load gives the same conversation', () => {
  const st = new FakeStorage();
  const c = emptyConversation();
  c.system = 'Be brief.';
  c.messages.push({ role: 'user', content: 'Hi <b>' }, { role: 'assistant', content: 'Hello', stats: { completion_tokens: 1 } });
  c.settings.temperature = 0;
  assert.ok(saveConversation(st, c));
  assert.deepEqual(loadConversation(st), c);
});

test('damaged or foreign storage loads as an empty (or cleaned) conversation', () => {
  const st = new FakeStorage();
  assert.deepEqual(loadConversation(st), emptyConversation());
  for (const junk of ['{', 'null', '42', '"x"', '[]']) {
    st.setItem(STORE_KEY, junk);
    assert.deepEqual(loadConversation(st), emptyConversation(), junk);
  }
  st.setItem(STORE_KEY, JSON.stringify({ system: 5, messages: [{ role: 'system', content: 'x' }, { role: 'user', content: 3 }, { role: 'user', content: 'ok' }], settings: { temperature: 'hot', top_p: 0.5 } }));
  const c = loadConversation(st);
  assert.equal(c.system, '');
  assert.deepEqual(c.messages, [{ role: 'user', content: 'ok' }]);
  assert.equal(c.settings.temperature, 0.7);
  assert.equal(c.settings.top_p, 0.5);
  const full = { getItem: () => null, setItem: () => { throw new Error('QuotaExceededError'); } };
  assert.equal(saveConversation(full, emptyConversation()), false);
});

test('request body: system first, settings in range only, streaming with usage', () => {
  const c = emptyConversation();
  c.system = 'sys';
  c.messages.push({ role: 'user', content: 'a' }, { role: 'assistant', content: 'b', stats: {} }, { role: 'user', content: 'c' });
  c.settings = { temperature: 0, top_p: 1, max_tokens: 16 };
  assert.deepEqual(requestBody(c), {
    messages: [{ role: 'system', content: 'sys' }, { role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }, { role: 'user', content: 'c' }],
    stream: true, stream_options: { include_usage: true }, temperature: 0, top_p: 1, max_tokens: 16,
  });
  c.system = '  ';
  c.settings = { temperature: NaN, top_p: 0, max_tokens: 2.5 };
  const b = requestBody(c);
  assert.equal(b.messages[0].role, 'user');
  assert.ok(!('temperature' in b) && !('top_p' in b) && !('max_tokens' in b));
});

test('reply figures: decode tok/s after the first token, counts from usage, stopped', () => {
  const st = replyStats({ usage: { prompt_tokens: 12, completion_tokens: 11 }, chunks: 11, t0: 0, tFirst: 100, tEnd: 600 });
  assert.deepEqual(st, { completion_tokens: 11, prompt_tokens: 12, first_token_ms: 100, tokens_per_second: 20, stopped: false });
  assert.equal(statsLine(st), '12 prompt + 11 tokens · 20 tok/s · first token 100 ms');
  const stopped = replyStats({ usage: null, chunks: 3, t0: 0, tFirst: 10, tEnd: 210, stopped: true });
  assert.equal(stopped.completion_tokens, 3);
  assert.equal(stopped.tokens_per_second, 10);
  assert.equal(statsLine(stopped), '3 tokens · 10 tok/s · first token 10 ms · stopped');
  const none = replyStats({ usage: null, chunks: 0, t0: 0, tFirst: NaN, tEnd: 5 });
  assert.equal(statsLine(none), '0 tokens');
  assert.equal(statsLine(null), '');
});
