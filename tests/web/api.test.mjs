// web/api.js without a server: the server's error envelopes read as the server wrote them,
// and a port nobody listens on is "cannot reach the server" (status 0), not a crash.
import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import { ApiError, createClient, errorMessage } from '../../web/api.js';

test('errorMessage: LARQL and OpenAI envelopes, raw text, empty', () => {
  assert.equal(errorMessage(404, '{"error":"patch \'x\' not found"}'), "patch 'x' not found");
  assert.equal(errorMessage(400, '{"error":{"message":"messages is required","type":"invalid_request_error"}}'), 'messages is required');
  assert.equal(errorMessage(500, '{"message":"m"}'), 'm');
  assert.equal(errorMessage(502, '<html>Bad gateway</html>'), '<html>Bad gateway</html>');
  assert.equal(errorMessage(503, '   '), 'HTTP 503');
  assert.equal(errorMessage(500, '{"error":{"code":1}}'), '{"error":{"code":1}}');
  assert.equal(errorMessage(500, 'x'.repeat(5000)).length, 1000);
});

test('a closed port is ApiError status 0', async () => {
  // a port that was free a moment ago: listen, note it, close
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const port = srv.address().port;
  await new Promise((r) => srv.close(r));
  const c = createClient({ base: `http://127.0.0.1:${port}` });
  await assert.rejects(c.runtime(), (e) => e instanceof ApiError && e.status === 0 && /cannot reach the server/.test(e.message));
  await assert.rejects(c.chat({ messages: [] }, {}), (e) => e instanceof ApiError && e.status === 0);
});
