// Function calling and structured output with the official openai npm client against
// `larql serve`: tools with required arguments (non-stream, and streamed through the SDK's
// own accumulator, client.chat.completions.stream), a named tool_choice, a second turn
// carrying the tool result, chat.completions.parse with a strict json_schema, and the
// SDK's typed error for a tool_choice naming an unknown function.
// usage: node sdk_tools.mjs http://127.0.0.1:PORT/v1   (run by tests/cli/grammar.sh)
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
import Ajv from "ajv";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0, timeout: 120000 });
let failed = 0;
function ok(name, cond, detail) {
  if (cond) console.log(`ok - sdk tools: ${name}`);
  else {
    failed++;
    console.log(`not ok - sdk tools: ${name}`);
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

const model = (await client.models.list()).data[0].id;
const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 12 }, unit: { type: "string", enum: ["c", "f"] } },
      required: ["city", "unit"],
      additionalProperties: false,
    },
    strict: true,
  },
};
const messages = [{ role: "user", content: "What is the weather in Paris?" }];
const argsOk = (s) => {
  try {
    const a = JSON.parse(s);
    return Object.keys(a).length === 2 && typeof a.city === "string" && [...a.city].length <= 12 && ["c", "f"].includes(a.unit);
  } catch (e) {
    return false;
  }
};

let call = null;
await step("tools non-stream", async () => {
  const r = await client.chat.completions.create({ model, messages, tools: [weather], tool_choice: "required", max_tokens: 400, seed: 1 });
  const m = r.choices[0].message;
  call = m.tool_calls && m.tool_calls[0];
  ok("tools non-stream: a get_weather call with its required arguments, finish tool_calls",
    r.choices[0].finish_reason === "tool_calls" && call && call.type === "function" && call.id &&
    call.function.name === "get_weather" && argsOk(call.function.arguments), r.choices[0]);
});

await step("tools streamed", async () => {
  const s = client.chat.completions.stream({ model, messages, tools: [weather], tool_choice: "required", max_tokens: 400, seed: 2 });
  const fin = await s.finalChatCompletion();
  const c = fin.choices[0];
  const tc = c.message.tool_calls && c.message.tool_calls[0];
  ok("tools streamed: the SDK's accumulator rebuilds the call", c.finish_reason === "tool_calls" && tc &&
    tc.id && tc.function.name === "get_weather" && argsOk(tc.function.arguments), c);
});

await step("named tool_choice", async () => {
  const r = await client.chat.completions.create({ model, messages, tools: [weather],
    tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 400, seed: 3 });
  ok("named tool_choice", r.choices[0].message.tool_calls[0].function.name === "get_weather", r.choices[0]);
});

await step("second turn", async () => {
  const c = call || { id: "call_x", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\",\"unit\":\"c\"}" } };
  const r = await client.chat.completions.create({ model, tools: [weather], max_tokens: 8, messages: [
    ...messages, { role: "assistant", content: null, tool_calls: [c] },
    { role: "tool", tool_call_id: c.id, content: "18 C and sunny" }] });
  ok("second turn carrying the tool result", ["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason), r.choices[0]);
});

await step("parse", async () => {
  const schema = { type: "object", properties: { name: { type: "string", maxLength: 8 }, age: { type: "integer" } },
    required: ["name", "age"], additionalProperties: false };
  const r = await client.chat.completions.parse({ model, messages, max_tokens: 400, seed: 4,
    response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema } } });
  const p = r.choices[0].message.parsed;
  ok("chat.completions.parse with a strict json_schema", p && typeof p.name === "string" && [...p.name].length <= 8 &&
    Number.isInteger(p.age) && Object.keys(p).length === 2, r.choices[0].message);
});

await step("parse with zod", async () => {
  // the SDK's zod helper: the schema goes out as a strict json_schema, the reply comes back parsed
  const City = z.object({ city: z.string().max(12), population: z.number().int(), coastal: z.boolean(),
    languages: z.array(z.enum(["en", "fr", "de"])).max(3) });
  const r = await client.chat.completions.parse({ model, messages, max_tokens: 300, seed: 5,
    response_format: zodResponseFormat(City, "city") });
  const p = r.choices[0].message.parsed;
  ok("chat.completions.parse with zodResponseFormat returns an object zod accepts", p && City.safeParse(p).success,
    r.choices[0].message);
});

await step("sampled outputs validate", async () => {
  // 50 outputs sampled at temperature 1 (5 requests of n = 10), each checked by ajv against the
  // schema that constrained it
  const schema = { type: "object", properties: {
      id: { type: "integer", minimum: 0, maximum: 999 }, name: { type: "string", minLength: 1, maxLength: 10 },
      kind: { enum: ["cat", "dog", "bird"] }, score: { type: "number" }, tags: { type: "array", items: { type: "string", maxLength: 6 }, maxItems: 3 },
      ok: { type: "boolean" } },
    required: ["id", "name", "kind", "score", "tags", "ok"], additionalProperties: false };
  const validate = new Ajv({ strict: false }).compile(schema);
  let valid = 0, total = 0;
  const bad = [];
  for (let k = 0; k < 5; k++) {
    const r = await client.chat.completions.create({ model, messages, max_tokens: 300, n: 10, temperature: 1, seed: 100 + k * 10,
      response_format: { type: "json_schema", json_schema: { name: "pet", strict: true, schema } } });
    for (const c of r.choices) {
      total++;
      let v = false;
      try { v = validate(JSON.parse(c.message.content)); } catch (e) { v = false; }
      if (v) valid++; else if (bad.length < 3) bad.push([c.finish_reason, c.message.content]);
    }
  }
  ok(`every one of ${total} sampled outputs (temperature 1) is JSON that ajv validates against its schema`,
    total === 50 && valid === 50, { valid, total, bad });
});

await step("errors", async () => {
  let e = null;
  try {
    await client.chat.completions.create({ model, messages, tools: [weather], tool_choice: { type: "function", function: { name: "nope" } } });
  } catch (x) { e = x; }
  ok("tool_choice naming an unknown function -> BadRequestError", e instanceof OpenAI.BadRequestError && /not among the tools/.test(e.message), String(e));
});

console.log(`# sdk tools done, ${failed} failed`);
