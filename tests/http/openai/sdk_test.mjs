// The official openai npm client against `larql serve`: completions and chat, streaming and
// not, logprobs, usage, stop, and the SDK's typed errors for our 400/404 answers.
// usage: node sdk_test.mjs http://127.0.0.1:PORT/v1   (run by tests/cli/server.sh)
import OpenAI from "openai";

const baseURL = process.argv[2];
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });
let failed = 0;
function ok(name, cond, detail) {
  if (cond) console.log(`ok - sdk: ${name}`);
  else {
    failed++;
    console.log(`not ok - sdk: ${name}`);
    if (detail !== undefined) console.log(`#   ${JSON.stringify(detail).slice(0, 500)}`);
  }
}
async function step(name, fn) {
  try {
    await fn();
  } catch (e) {
    ok(name, false, String(e && e.stack ? e.stack : e));
  }
}

let modelId = "";
await step("models.list", async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  modelId = ids[0];
  ok("models.list", ids.length === 1 && page.data[0].object === "model", page.data);
});

const messages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Say something about France." },
];
let chatText = "";
await step("chat non-stream", async () => {
  const r = await client.chat.completions.create({ model: modelId, messages, max_tokens: 12, temperature: 0 });
  chatText = r.choices[0].message.content;
  ok("chat non-stream: message, finish_reason, usage", r.object === "chat.completion" &&
    r.choices[0].message.role === "assistant" && typeof chatText === "string" &&
    ["stop", "length"].includes(r.choices[0].finish_reason) &&
    r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens && r.usage.completion_tokens > 0, r);
});

await step("chat with a prediction (Predicted Outputs)", async () => {
  const r = await client.chat.completions.create({
    model: modelId, messages, max_tokens: 12, temperature: 0, prediction: { type: "content", content: chatText },
  });
  const d = r.usage.completion_tokens_details || {};
  ok("chat prediction: the same answer, accepted/rejected prediction tokens in usage",
    r.choices[0].message.content === chatText && Number.isInteger(d.accepted_prediction_tokens) &&
    Number.isInteger(d.rejected_prediction_tokens), r);
});

await step("chat stream", async () => {
  const stream = await client.chat.completions.create({
    model: modelId, messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = "", finish = null, usage = null, chunks = 0, role = null;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta.role) role = ch.delta.role;
      if (ch.delta.content) text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  ok("chat stream: same text as non-stream", text === chatText, { text, chatText });
  ok("chat stream: role, finish_reason, usage chunk", role === "assistant" && ["stop", "length"].includes(finish) &&
    usage && usage.completion_tokens > 0 && chunks > 2, { role, finish, usage, chunks });
});

await step("chat logprobs", async () => {
  const r = await client.chat.completions.create({
    model: modelId, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2,
  });
  const lp = r.choices[0].logprobs.content;
  ok("chat logprobs: one real entry per token", lp.length === r.usage.completion_tokens &&
    lp.every((e) => e.logprob <= 0 && e.top_logprobs.length === 2 && Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4) &&
    lp.some((e) => e.logprob < -1e-6), lp);
});

let compText = "";
await step("completions non-stream", async () => {
  const r = await client.completions.create({ model: modelId, prompt: "Once upon a time", max_tokens: 10, temperature: 0 });
  compText = r.choices[0].text;
  ok("completions non-stream", r.object === "text_completion" && typeof compText === "string" &&
    r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 10, r);
});

await step("completions stream", async () => {
  const stream = await client.completions.create({ model: modelId, prompt: "Once upon a time", max_tokens: 10, temperature: 0, stream: true });
  let text = "", finish = null;
  for await (const c of stream) {
    for (const ch of c.choices) {
      text += ch.text;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  ok("completions stream: same text, finish_reason", text === compText && ["stop", "length"].includes(finish), { text, compText, finish });
});

await step("completions stop", async () => {
  const long = await client.completions.create({ model: modelId, prompt: "Once upon a time", max_tokens: 30, temperature: 0 });
  const t = long.choices[0].text;
  let stop = null;
  for (let k = 2; k + 2 < t.length; k++) {
    const c = t.slice(k, k + 2);
    if (c.trim() && !c.includes("\ufffd") && t.indexOf(c) === k) { stop = c; break; }
  }
  if (!stop) return ok("completions stop (model text too short)", true);
  const r = await client.completions.create({ model: modelId, prompt: "Once upon a time", max_tokens: 30, temperature: 0, stop: [stop] });
  ok("completions stop: cut before the stop string", r.choices[0].text === t.slice(0, t.indexOf(stop)) && r.choices[0].finish_reason === "stop",
    { stop, got: r.choices[0].text });
});

await step("errors", async () => {
  let e400 = null, e404 = null;
  const two = await client.chat.completions.create({ model: modelId, messages, n: 2, max_tokens: 4 });
  ok("n=2 -> two choices through the SDK", two.choices.length === 2 && two.choices.every((c, i) => c.index === i), JSON.stringify(two.choices));
  const streamed = await client.chat.completions.create({ model: modelId, messages, n: 2, max_tokens: 4, stream: true });
  const texts = ["", ""], ends = [null, null];
  for await (const chunk of streamed)
    for (const c of chunk.choices) { texts[c.index] += c.delta.content || ""; if (c.finish_reason) ends[c.index] = c.finish_reason; }
  ok("n=2 streamed through the SDK: both choices stream to their finish_reason", ends.every((f) => f === "stop" || f === "length"),
    JSON.stringify({ texts, ends }));
  const schema = { type: "object", properties: { n: { type: "integer" }, s: { type: "string", maxLength: 5 } },
    required: ["n", "s"], additionalProperties: false };
  const js = await client.chat.completions.create({ model: modelId, messages, max_tokens: 100,
    response_format: { type: "json_schema", json_schema: { name: "t", strict: true, schema } } });
  let parsed = null;
  try { parsed = JSON.parse(js.choices[0].message.content); } catch (e) { parsed = null; }
  ok("response_format json_schema -> JSON of the schema", parsed !== null && Number.isInteger(parsed.n) &&
    typeof parsed.s === "string" && [...parsed.s].length <= 5 /* code points, as JSON Schema counts */ && Object.keys(parsed).length === 2, js.choices[0].message.content);
  e400 = null;
  try {
    await client.chat.completions.create({ model: modelId, messages, response_format: { type: "json_schema",
      json_schema: { name: "t", schema: { type: "strng" } } } });
  } catch (e) { e400 = e; }
  ok("response_format with a bad schema -> SDK BadRequestError", e400 instanceof OpenAI.BadRequestError && /unknown type/.test(e400.message), String(e400));
  try {
    await client.completions.create({ model: "no-such-model", prompt: "x" });
  } catch (e) { e404 = e; }
  ok("unknown model -> SDK NotFoundError", e404 instanceof OpenAI.NotFoundError, String(e404));
});

await step("embeddings", async () => {
  const r = await client.embeddings.create({ model: modelId, input: ["hello", "world"], encoding_format: "float" });
  ok("embeddings", r.data.length === 2 && r.data[0].embedding.length > 0 && r.usage.prompt_tokens > 0, r.usage);
  const b = await client.embeddings.create({ model: modelId, input: "hello" }); // SDK asks for base64 and decodes it
  ok("embeddings base64 decoded by the SDK", b.data[0].embedding.length === r.data[0].embedding.length, b.data[0].embedding.length);
});

console.log(`# sdk done, ${failed} failed`);
process.exit(failed ? 1 : 0);
