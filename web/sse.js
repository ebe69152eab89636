// Server-Sent Events, parsed incrementally as the bytes of a fetch() body arrive (the page
// POSTs to /v1/chat/completions, which EventSource cannot do). Follows the WHATWG
// event-stream rules the server relies on: lines end in \n, \r\n or \r (a \r at the end of a
// chunk may be half of a \r\n, so it waits for the next chunk), "data:" lines of one event
// are joined with \n, ":" lines are comments, a blank line dispatches, an event cut off by the
// end of the stream is dropped. No DOM here: tests/web/ runs it under node.

export function createSSEParser(onEvent) {
  let buf = '';
  let data = [];
  let event = '';
  let id = null;
  let first = true;

  function line(l) {
    if (l === '') {
      if (data.length) onEvent({ event: event || 'message', data: data.join('\n'), id });
      data = [];
      event = '';
      return;
    }
    if (l[0] === ':') return;
    const i = l.indexOf(':');
    const field = i < 0 ? l : l.slice(0, i);
    let value = i < 0 ? '' : l.slice(i + 1);
    if (value[0] === ' ') value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'event') event = value;
    else if (field === 'id') id = value;
  }

  return {
    feed(chunk) {
      buf += chunk;
      if (first && buf.length) {
        if (buf[0] === '\uFEFF') buf = buf.slice(1);
        first = false;
      }
      let start = 0;
      for (let i = 0; i < buf.length; i++) {
        const c = buf[i];
        if (c !== '\n' && c !== '\r') continue;
        if (c === '\r' && i === buf.length - 1) break; // maybe the first half of \r\n
        line(buf.slice(start, i));
        if (c === '\r' && buf[i + 1] === '\n') i++;
        start = i + 1;
      }
      buf = buf.slice(start);
    },
    // The stream ended: a complete last line counts, an undispatched event does not.
    end() {
      if (buf.endsWith('\r')) line(buf.slice(0, -1));
      buf = '';
      data = [];
    },
  };
}

// One "data:" payload of an OpenAI chat stream: {done} for [DONE], {error} when the server
// reports one inside the stream, else the text delta, the finish reason, the delta's
// per-token log-probabilities (logprobs.content, when asked for) and the usage (present on
// the last chunk with stream_options.include_usage).
export function parseChatChunk(data) {
  if (data === '[DONE]') return { done: true };
  let j;
  try {
    j = JSON.parse(data);
  } catch {
    return { error: 'the stream sent something that is not JSON: ' + String(data).slice(0, 200) };
  }
  if (!j || typeof j !== 'object') return { error: 'the stream sent ' + String(data).slice(0, 200) };
  if (j.error) {
    const m = typeof j.error === 'string' ? j.error : j.error.message;
    return { error: typeof m === 'string' ? m : JSON.stringify(j.error) };
  }
  const c = Array.isArray(j.choices) && j.choices.length ? j.choices[0] : null;
  const delta = c && c.delta && typeof c.delta.content === 'string' ? c.delta.content : '';
  return {
    content: delta,
    finish: c && typeof c.finish_reason === 'string' ? c.finish_reason : null,
    logprobs: c && c.logprobs && Array.isArray(c.logprobs.content) ? c.logprobs.content : null,
    usage: j.usage && typeof j.usage === 'object' ? j.usage : null,
  };
}
