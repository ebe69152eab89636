// web/sse.js: the SSE parser fed the way a fetch() body arrives (any chunking), and the
// chat-chunk decoder.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createSSEParser, parseChatChunk } from '../../web/sse.js';

function parseAll(chunks) {
  const evs = [];
  const p = createSSEParser((e) => evs.push(e));
  for (const c of chunks) p.feed(c);
  p.end();
  return evs;
}

const STREAM = 'data: {"a":1}\n\n: comment\n\nevent: x\ndata: one\ndata: two\nid: 7\n\ndata:no-space\n\n';

test('events, comments, multi-line data, event names and ids', () => {
  assert.deepEqual(parseAll([STREAM]), [
    { event: 'message', data: '{"a":1}', id: null },
    { event: 'x', data: 'one\ntwo', id: '7' },
    { event: 'message', data: 'no-space', id: '7' },
  ]);
});

test('every way of cutting the stream into chunks gives the same events', () => {
  const whole = parseAll([STREAM]);
  for (let i = 0; i <= STREAM.length; i++)
    for (let j = i; j <= STREAM.length; j += 7) assert.deepEqual(parseAll([STREAM.slice(0, i), STREAM.slice(i, j), STREAM.slice(j)]), whole);
});

test('\\r\\n and \\r line ends, split between chunks, and a BOM', () => {
  const crlf = '\uFEFFdata: a\r\n\r\ndata: b\r\rdata: c\n\n';
  const want = ['a', 'b', 'c'];
  assert.deepEqual(parseAll([crlf]).map((e) => e.data), want);
  for (let i = 1; i < crlf.length; i++) assert.deepEqual(parseAll([crlf.slice(0, i), crlf.slice(i)]).map((e) => e.data), want, 'cut at ' + i);
  assert.deepEqual(parseAll(['data: x\r', '\n', '\r\n']).map((e) => e.data), ['x']);
});

test('an event cut off by the end of the stream is dropped', () => {
  assert.deepEqual(parseAll(['data: whole\n\ndata: cut']).map((e) => e.data), ['whole']);
  assert.deepEqual(parseAll(['data: cut\n']).map((e) => e.data), []);
});

test('parseChatChunk: deltas, finish, usage, [DONE], errors, junk', () => {
  assert.deepEqual(parseChatChunk('[DONE]'), { done: true });
  assert.deepEqual(parseChatChunk('{"choices":[{"delta":{"content":"Hi"},"finish_reason":null}]}'), { content: 'Hi', finish: null, logprobs: null, usage: null });
  assert.deepEqual(parseChatChunk('{"choices":[{"delta":{},"finish_reason":"length"}]}'), { content: '', finish: 'length', logprobs: null, usage: null });
  assert.deepEqual(parseChatChunk('{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}').usage, { prompt_tokens: 3, completion_tokens: 2 });
  assert.equal(parseChatChunk('{"error":{"message":"boom","type":"server_error"}}').error, 'boom');
  assert.equal(parseChatChunk('{"error":"plain"}').error, 'plain');
  assert.match(parseChatChunk('not json').error, /not JSON/);
  assert.match(parseChatChunk('42').error, /42/);
  assert.deepEqual(parseChatChunk('{"choices":[{"delta":{"content":7}}]}'), { content: '', finish: null, logprobs: null, usage: null });
  const lp = [{ token: 'Hi', logprob: -0.1, bytes: [72, 105], top_logprobs: [] }];
  assert.deepEqual(parseChatChunk(JSON.stringify({ choices: [{ delta: { content: 'Hi' }, logprobs: { content: lp } }] })).logprobs, lp);
  assert.equal(parseChatChunk('{"choices":[{"delta":{"content":"x"},"logprobs":{"content":"junk"}}]}').logprobs, null);
});
