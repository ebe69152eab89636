// The chat's state without the DOM: the conversation kept in localStorage (a damaged entry
// is an empty conversation, never an exception), the request body built from the
// settings (numbers out of range are left to the server's defaults), and the figures shown
// under a reply.

export const STORE_KEY = 'larql.chat.v1';
const MAX_MESSAGES = 500;

// -> {system, messages: [{role, content, stats?}], settings: {temperature, top_p, max_tokens}}
export function emptyConversation() {
  return { system: '', messages: [], settings: { temperature: 0.7, top_p: 0.95, max_tokens: 256 } };
}

export function loadConversation(storage) {
  const c = emptyConversation();
  let j;
  try {
    j = JSON.parse(storage.getItem(STORE_KEY) || 'null');
  } catch {
    return c;
  }
  if (!j || typeof j !== 'object') return c;
  if (typeof j.system === 'string') c.system = j.system;
  if (Array.isArray(j.messages))
    c.messages = j.messages
      .filter((m) => m && (m.role === 'user' || m.role === 'assistant') && typeof m.content === 'string')
      .slice(-MAX_MESSAGES)
      .map((m) => ({ role: m.role, content: m.content, ...(m.stats && typeof m.stats === 'object' ? { stats: m.stats } : {}) }));
  if (j.settings && typeof j.settings === 'object')
    for (const k of Object.keys(c.settings)) if (Number.isFinite(j.settings[k])) c.settings[k] = j.settings[k];
  return c;
}

export function saveConversation(storage, c) {
  try {
    storage.setItem(STORE_KEY, JSON.stringify({ ...c, messages: c.messages.slice(-MAX_MESSAGES) }));
    return true;
  } catch {
    return false; // storage full or disabled: the conversation still lives in the page
  }
}

// The /v1/chat/completions body for the conversation so far (every message, the system
// prompt first when set). Settings that are not numbers in range are left out.
export function requestBody(c) {
  const msgs = [];
  if (c.system.trim()) msgs.push({ role: 'system', content: c.system });
  for (const m of c.messages) if (m.content !== '' || m.role === 'user') msgs.push({ role: m.role, content: m.content });
  const body = { messages: msgs, stream: true, stream_options: { include_usage: true } };
  const t = c.settings.temperature, p = c.settings.top_p, n = c.settings.max_tokens;
  if (Number.isFinite(t) && t >= 0 && t <= 2) body.temperature = t;
  if (Number.isFinite(p) && p > 0 && p <= 1) body.top_p = p;
  if (Number.isInteger(n) && n >= 1) body.max_tokens = n;
  return body;
}

// The figures under a reply. usage: the stream's last chunk (may be absent when stopped);
// chunks: content chunks seen (one per token on this server); times in ms (performance.now).
// tok/s is the decode rate: tokens after the first over the time after the first.
export function replyStats({ usage, chunks, t0, tFirst, tEnd, stopped }) {
  const completion = usage && Number.isFinite(usage.completion_tokens) ? usage.completion_tokens : chunks;
  const st = { completion_tokens: completion, stopped: !!stopped };
  if (usage && Number.isFinite(usage.prompt_tokens)) st.prompt_tokens = usage.prompt_tokens;
  if (Number.isFinite(tFirst) && Number.isFinite(t0)) st.first_token_ms = Math.max(0, Math.round(tFirst - t0));
  if (completion > 1 && Number.isFinite(tFirst) && tEnd > tFirst) st.tokens_per_second = Math.round(((completion - 1) * 1000 * 10) / (tEnd - tFirst)) / 10;
  return st;
}

// "12 prompt + 40 tokens · 35.2 tok/s · first token 80 ms · stopped"
export function statsLine(st) {
  if (!st) return '';
  const parts = [];
  parts.push((Number.isFinite(st.prompt_tokens) ? st.prompt_tokens + ' prompt + ' : '') + st.completion_tokens + ' tokens');
  if (Number.isFinite(st.tokens_per_second)) parts.push(st.tokens_per_second + ' tok/s');
  if (Number.isFinite(st.first_token_ms)) parts.push('first token ' + st.first_token_ms + ' ms');
  if (st.stopped) parts.push('stopped');
  return parts.join(' · ');
}
