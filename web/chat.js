// The chat's state without the DOM: the conversations kept in localStorage (a list; a damaged
// entry is an empty list, never an exception; the round-1 single conversation is taken over),
// the settings with their ranges (a value out of range is clamped, and the page says so), the
// request body, the per-token probabilities, and the figures shown under a reply.

export const STORE_KEY = 'larql.chats.v2';
const OLD_KEY = 'larql.chat.v1';
const MAX_MESSAGES = 500;
const MAX_CONVS = 50;

// name: [min, max, default, integer?, label]; seed: empty means a random one
export const SETTINGS = {
  temperature: [0, 2, 0.7, false, 'Temperature'],
  top_p: [0.01, 1, 0.95, false, 'Top-p'],
  max_tokens: [1, 32768, 256, true, 'Max tokens'],
  frequency_penalty: [-2, 2, 0, false, 'Frequency penalty'],
  presence_penalty: [-2, 2, 0, false, 'Presence penalty'],
  seed: [0, 2 ** 53 - 1, null, true, 'Seed'],
};

export function defaultSettings() {
  const s = {};
  for (const [k, v] of Object.entries(SETTINGS)) s[k] = v[2];
  return s;
}

// A setting typed by the user -> {value, note}: the value to use (clamped into range,
// rounded when it must be an integer, the default when empty or not a number) and a note
// saying what was changed ('' when the input was taken as is).
export function checkSetting(name, raw) {
  const [min, max, def, int, label] = SETTINGS[name];
  const t = String(raw ?? '').trim();
  if (t === '') return { value: def, note: '' };
  let x = Number(t);
  if (!Number.isFinite(x)) return { value: def, note: `${label} “${t}” is not a number: using ${def ?? 'a random one'}.` };
  let note = '';
  if (int && !Number.isInteger(x)) {
    x = Math.round(x);
    note = `${label} must be a whole number: using ${x}.`;
  }
  if (x < min || x > max) {
    const c = Math.min(max, Math.max(min, x));
    note = `${label} ${t} is out of range (${min} to ${max}): using ${c}.`;
    x = c;
  }
  return { value: x, note };
}

export function newConversation(now = Date.now()) {
  return { id: 'c' + now.toString(36) + Math.floor(Math.random() * 1e6).toString(36), title: '', system: '', messages: [], updated: now };
}

function cleanMessage(m) {
  if (!m || (m.role !== 'user' && m.role !== 'assistant') || typeof m.content !== 'string') return null;
  const out = { role: m.role, content: m.content };
  if (m.stats && typeof m.stats === 'object') out.stats = m.stats;
  if (typeof m.finish === 'string') out.finish = m.finish;
  if (Array.isArray(m.lp)) out.lp = m.lp;
  return out;
}

function cleanConversation(c) {
  if (!c || typeof c !== 'object' || typeof c.id !== 'string') return null;
  const out = newConversation();
  out.id = c.id.slice(0, 64);
  if (typeof c.title === 'string') out.title = c.title.slice(0, 200);
  if (typeof c.system === 'string') out.system = c.system;
  if (Number.isFinite(c.updated)) out.updated = c.updated;
  if (Array.isArray(c.messages)) out.messages = c.messages.map(cleanMessage).filter(Boolean).slice(-MAX_MESSAGES);
  return out;
}

function cleanSettings(j) {
  const s = defaultSettings();
  if (j && typeof j === 'object')
    for (const k of Object.keys(s)) if (j[k] !== undefined && j[k] !== null) s[k] = checkSetting(k, j[k]).value;
  return s;
}

function parse(storage, key) {
  try {
    return JSON.parse(storage.getItem(key) || 'null');
  } catch {
    return null;
  }
}

// -> {current: id, convs: [conversation, newest first], settings}; always at least one
// conversation, the current one among them.
export function loadStore(storage) {
  const j = parse(storage, STORE_KEY);
  const st = { current: '', convs: [], settings: defaultSettings() };
  if (j && typeof j === 'object') {
    if (Array.isArray(j.convs)) st.convs = j.convs.map(cleanConversation).filter(Boolean).slice(0, MAX_CONVS);
    st.settings = cleanSettings(j.settings);
    if (typeof j.current === 'string') st.current = j.current;
  } else {
    const old = parse(storage, OLD_KEY); // round 1 kept one conversation
    if (old && typeof old === 'object') {
      const c = cleanConversation({ ...old, id: 'c-old' });
      if (c && (c.messages.length || c.system)) st.convs.push(c);
      st.settings = cleanSettings(old.settings);
    }
  }
  if (!st.convs.length) st.convs.push(newConversation());
  if (!st.convs.some((c) => c.id === st.current)) st.current = st.convs[0].id;
  return st;
}

export function saveStore(storage, st) {
  try {
    storage.setItem(STORE_KEY, JSON.stringify({ current: st.current, settings: st.settings, convs: st.convs.slice(0, MAX_CONVS) }));
    return true;
  } catch {
    // storage full: drop the per-token probabilities (the bulk) and try once more
    try {
      const slim = st.convs.map((c) => ({ ...c, messages: c.messages.map(({ lp, ...m }) => m) }));
      storage.setItem(STORE_KEY, JSON.stringify({ current: st.current, settings: st.settings, convs: slim.slice(0, MAX_CONVS) }));
    } catch {
      return false; // disabled: the conversations still live in the page
    }
    return true;
  }
}

export const currentConv = (st) => st.convs.find((c) => c.id === st.current);

// The list's name for a conversation: its title, else its first user message, cut short.
export function convTitle(c) {
  const t = c.title || (c.messages.find((m) => m.role === 'user') || {}).content || 'New conversation';
  const one = t.replace(/\s+/g, ' ').trim();
  return one.length > 48 ? one.slice(0, 47) + '…' : one;
}

// The /v1/chat/completions body for the conversation so far (the system prompt first when
// set), with the settings and per-token log-probabilities (5 alternatives) asked for.
export function requestBody(c, settings) {
  const msgs = [];
  if (c.system.trim()) msgs.push({ role: 'system', content: c.system });
  for (const m of c.messages) if (m.content !== '' || m.role === 'user') msgs.push({ role: m.role, content: m.content });
  const body = { messages: msgs, stream: true, stream_options: { include_usage: true }, logprobs: true, top_logprobs: 5 };
  for (const k of Object.keys(SETTINGS)) {
    const v = settings[k];
    if (v === null || v === undefined) continue;
    const { value } = checkSetting(k, v);
    if (value !== null) body[k] = value;
  }
  return body;
}

// One token of a stream's logprobs.content -> {t: text, p: probability, b: bytes (only when
// the text is not the bytes, e.g. a piece of a character), alt: [[text, probability]...]}
export function tokenProb(e) {
  if (!e || typeof e !== 'object' || typeof e.token !== 'string' || !Number.isFinite(e.logprob)) return null;
  const out = { t: e.token, p: Math.exp(e.logprob) };
  if (e.token.includes('\ufffd') && Array.isArray(e.bytes)) out.b = e.bytes.filter((x) => Number.isInteger(x) && x >= 0 && x < 256);
  out.alt = Array.isArray(e.top_logprobs)
    ? e.top_logprobs.filter((a) => a && typeof a.token === 'string' && Number.isFinite(a.logprob)).map((a) => [a.token, Math.exp(a.logprob)])
    : [];
  return out;
}

// "83.2%" with sensible digits for small values.
export function pct(p) {
  if (!Number.isFinite(p)) return '–';
  const x = p * 100;
  return (x >= 10 ? x.toFixed(1) : x >= 0.1 ? x.toFixed(2) : x.toExponential(1)) + '%';
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
