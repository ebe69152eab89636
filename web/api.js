// The page's client for larql serve's API (same origin). It adds the bearer key and the
// X-Session-Id when set, shows the server's error messages as they are (LARQL's
// {"error": "..."} and OpenAI's {"error": {"message": ...}}), and tells a server that cannot
// be reached (status 0) from one that refused. fetch is injectable: tests/web/ runs this
// module under node against a real server. No DOM here.

import { createSSEParser, parseChatChunk } from './sse.js';

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
  }
}

// The message of an error body, as the server wrote it; the raw text when it is not one of
// the two JSON envelopes; "HTTP <status>" when empty.
export function errorMessage(status, text) {
  const t = String(text ?? '');
  try {
    const j = JSON.parse(t);
    if (j && typeof j.error === 'string') return j.error;
    if (j && j.error && typeof j.error.message === 'string') return j.error.message;
    if (j && typeof j.message === 'string') return j.message;
  } catch {
    /* not JSON: the text itself */
  }
  const trimmed = t.trim();
  return trimmed ? trimmed.slice(0, 1000) : `HTTP ${status}`;
}

const enc = encodeURIComponent;
const BYTE_BASE = 0x10fe00; // dom.js's mark for a byte that is not text by itself

// The server's answer as text. Token strings in it can be pieces of a UTF-8 character (a
// byte-level tokenizer splits them); instead of U+FFFD, each such byte becomes
// U+10FE00 + byte, which dom.js's showToken shows as <0xE2>. Valid UTF-8 is decoded as is.
export function decodeVisible(buf) {
  const b = buf instanceof Uint8Array ? buf : new Uint8Array(buf);
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(b);
  } catch {
    /* some bytes are not UTF-8: the slow path below */
  }
  const dec = new TextDecoder('utf-8', { fatal: true });
  let out = '';
  for (let i = 0; i < b.length;) {
    const c = b[i];
    const n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    let ch = null;
    if (n === 1) ch = String.fromCharCode(c);
    else if (n && i + n <= b.length) {
      try {
        ch = dec.decode(b.subarray(i, i + n));
      } catch {
        ch = null;
      }
    }
    if (ch === null) {
      out += String.fromCodePoint(BYTE_BASE + c);
      i++;
    } else {
      out += ch;
      i += n;
    }
  }
  return out;
}

export function createClient({ base = '', fetchFn = (...a) => globalThis.fetch(...a), key = () => '', session = () => '' } = {}) {
  function headers(json) {
    const hd = {};
    const k = key();
    if (k) hd.Authorization = 'Bearer ' + k;
    const sid = session();
    if (sid) hd['X-Session-Id'] = sid;
    if (json) hd['Content-Type'] = 'application/json';
    return hd;
  }

  async function send(method, path, body, signal) {
    try {
      return await fetchFn(base + path, {
        method,
        headers: headers(body !== undefined),
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
        cache: 'no-store',
      });
    } catch (e) {
      if (e && e.name === 'AbortError') throw e;
      throw new ApiError(0, 'cannot reach the server' + (e && e.message ? ': ' + e.message : ''));
    }
  }

  async function call(method, path, body, { signal } = {}) {
    const res = await send(method, path, body, signal);
    let text;
    try {
      text = decodeVisible(await res.arrayBuffer());
    } catch (e) {
      if (e && e.name === 'AbortError') throw e;
      throw new ApiError(0, 'the connection broke while reading the answer');
    }
    if (!res.ok) throw new ApiError(res.status, errorMessage(res.status, text));
    try {
      return JSON.parse(text);
    } catch {
      throw new ApiError(res.status, 'the server answered with something that is not JSON: ' + text.slice(0, 200));
    }
  }

  return {
    call,
    health: (o) => call('GET', '/v1/health', undefined, o),
    runtime: (o) => call('GET', '/v1/runtime', undefined, o),
    stats: (o) => call('GET', '/v1/stats', undefined, o),
    describe: (entity, band = 'knowledge', limit = 20, o) =>
      call('GET', `/v1/describe?entity=${enc(entity)}&band=${enc(band)}&limit=${limit}`, undefined, o),
    walk: (prompt, top = 8, o) => call('GET', `/v1/walk?prompt=${enc(prompt)}&top=${top}`, undefined, o),
    walkPositions: (prompt, top = 1, o) => call('GET', `/v1/walk?prompt=${enc(prompt)}&top=${top}&positions=true`, undefined, o),
    select: (layer, limit = 20, o) => call('POST', '/v1/select', { layer, limit }, o),
    infer: (prompt, mode = 'compare', top = 10, o) => call('POST', '/v1/infer', { prompt, mode, top }, o),
    insert: (edge, o) => call('POST', '/v1/insert', edge, o),
    patches: (o) => call('GET', '/v1/patches', undefined, o),
    removePatch: (name, o) => call('DELETE', '/v1/patches/' + enc(name), undefined, o),

    // Streams a chat completion: onChunk gets each parsed chunk (see sse.js parseChatChunk).
    // Resolves when the stream ends ([DONE] or the connection closes); rejects with ApiError
    // for an HTTP error or an error inside the stream, with AbortError when signal aborts.
    async chat(body, { signal, onChunk } = {}) {
      const res = await send('POST', '/v1/chat/completions', { ...body, stream: true }, signal);
      if (!res.ok) throw new ApiError(res.status, errorMessage(res.status, await res.text().catch(() => '')));
      let failure = null;
      let done = false;
      const p = createSSEParser((ev) => {
        if (done || failure) return;
        const c = parseChatChunk(ev.data);
        if (c.error) failure = new ApiError(res.status, c.error);
        else if (c.done) done = true;
        else onChunk && onChunk(c);
      });
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      try {
        for (;;) {
          const { value, done: eof } = await reader.read();
          if (eof) break;
          p.feed(dec.decode(value, { stream: true }));
          if (failure) throw failure;
        }
      } catch (e) {
        if (e instanceof ApiError || (e && e.name === 'AbortError')) throw e;
        throw new ApiError(0, 'the stream broke: ' + (e && e.message ? e.message : e));
      } finally {
        try {
          reader.releaseLock();
        } catch {
          /* already released by the abort */
        }
      }
      p.feed(dec.decode());
      p.end();
      if (failure) throw failure;
      return { done };
    },
  };
}
