// Chat that keeps working in runtime-js (issue 17, item 5): fitConversation leaves out the oldest turns as
// Python's fit_conversation does, and the engine, on the tiny model's WASM build in Node (context 64),
// goes on past the context, telling how many messages it left out, turn for turn as the Python VM does
// with the same build. Bad requests are clear errors; a chat config that asks for more context than the
// build has is refused at load, before any weight is fetched.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { cpSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { before, test } from "node:test";

import { ChatError, checkMaxTokens, createEngine, fitConversation } from "../../runtime-js/src/tessera.js";
import { bundle, FIXTURES, folderFetch, ORIGIN, ROOT, tinyGGUF } from "../browser/bundle.mjs";

const CONTEXT = 64;
const QUESTIONS = ["Hello there", "What is the capital of France?", "And of Italy?", "Tell me more about it",
  "Why is that?", "One more question, please"];
const SYSTEM = { role: "system", content: "You answer briefly." };
let site;

before(() => {
  site = bundle("tiny-site-context-64", tinyGGUF(), CONTEXT, "wasm");
});

/** A stand-in for the chat template and tokenizer: a token per word, two per message around it. */
const words = (/** @type {any[]} */ messages) => new Array(messages.reduce((n, m) => n + 2 + m.content.split(/\s+/).filter(Boolean).length, 0)).fill(0);

function turns(n) {
  return Array.from({ length: n }, (_, i) => [{ role: "user", content: `question ${i} x` }, { role: "assistant", content: `answer ${i} y` }]).flat();
}

test("a long history is never rendered beyond a context's worth of messages, with the same result", () => {
  const system = { role: "system", content: "be brief" };
  const messages = [system, ...turns(5000), { role: "user", content: "last question" }];
  const seen = [];
  const counting = (/** @type {any[]} */ chosen) => { seen.push(chosen.length); return words(chosen); };
  const fitted = fitConversation(messages, counting, 64, 16);
  assert.ok(Math.max(...seen) <= 65, `rendered ${Math.max(...seen)} messages`);
  assert.deepEqual(fitted.messages, [system, ...messages.slice(-9)]);
  assert.equal(fitted.dropped, messages.length - 10);
});

test("fitConversation drops the oldest turns, keeps the system prompt and gives the reply room", () => {
  const system = { role: "system", content: "be brief" };
  const messages = [system, ...turns(10), { role: "user", content: "last question" }];
  const fitted = fitConversation(messages, words, 64, 16);
  assert.deepEqual(fitted.messages, [system, ...messages.slice(-9)]);
  assert.equal(fitted.dropped, 12);
  assert.equal(fitted.promptIds.length, 48);
  assert.equal(fitted.notice, "the conversation no longer fits the model's context of 64 tokens: the 12 oldest messages " +
    "were left out (the system prompt is kept)");
  const whole = [...turns(3), { role: "user", content: "and now?" }];
  assert.equal(fitConversation(whole, words, 64, 16).dropped, 0);
  assert.equal(fitConversation(whole, words, 64, 16).notice, null);
  assert.ok(fitConversation(messages, words, 64, 1000).promptIds.length <= 32);
  assert.throws(() => fitConversation([...turns(2), { role: "user", content: "w ".repeat(70) }], words, 64, 8),
    /^ChatError: the prompt has 72 tokens; the context window is 64 \(with room for one reply token\), even with only its last turn: /);
});

test("bad requests are clear errors", () => {
  for (const [messages, error] of [[[], /the conversation has no messages/], ["hi", /the conversation has no messages/],
    [[{ role: "user" }], /message 0 is not an object with a role and a content/],
    [[{ role: "user", content: "" }], /the prompt is empty/],
    [[{ role: "user", content: "hi" }, { role: "assistant", content: "Hello" }, { role: "user", content: " \n" }], /the prompt is empty/]]) {
    assert.throws(() => fitConversation(/** @type {any} */ (messages), words, 64, 8), (e) => e instanceof ChatError && error.test(e.message));
  }
  for (const maxTokens of [0, -3, 2.5, "8", null, true]) {
    assert.throws(() => checkMaxTokens(maxTokens), /max_tokens must be a whole number of at least 1/);
  }
});

/** Each turn of the same conversation through the Python VM (wasmtime) on the same WASM build. */
function pythonTurns(folder) {
  const script = `
import json, sys
from tessera.app.chat import ChatSession, Sampling
session = ChatSession(sys.argv[1])
messages, out = [json.loads(sys.argv[2])], []
for question in json.loads(sys.argv[3]):
    messages.append({"role": "user", "content": question})
    fitted = session.fit(messages, 8)
    result = session.reply(messages, 8, Sampling(temperature=0))
    out.append({"dropped": result["dropped_messages"], "notice": fitted.notice, "reply": result["reply"]})
    messages = fitted.messages + [{"role": "assistant", "content": result["reply"]}]
print(json.dumps(out))`;
  return JSON.parse(execFileSync(join(ROOT, ".venv", "bin", "python"), ["-c", script, folder, JSON.stringify(SYSTEM),
    JSON.stringify(QUESTIONS)], { cwd: ROOT, encoding: "utf8", env: { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? "/tmp" } }));
}

test("a conversation past the context goes on, turn for turn as in the Python VM, and says what it left out", async () => {
  const expected = pythonTurns(join(site, "models", "tiny", "wasm"));
  const engine = await createEngine(`${ORIGIN}models/tiny/`, { fetchFn: folderFetch(site), backend: "wasm" });
  let messages = [SYSTEM];
  const seen = [];
  for (const question of QUESTIONS) {
    messages.push({ role: "user", content: question });
    const chunks = [];
    for await (const chunk of await engine.chat.completions.create({ messages, temperature: 0, max_tokens: 8, stream: true })) {
      chunks.push(chunk);
    }
    const { usage } = chunks.at(-1);
    const reply = chunks.map((c) => c.choices[0].delta.content ?? "").join("");
    seen.push({ dropped: usage.extra.dropped_messages, notice: usage.extra.notice, reply });
    assert.ok(usage.completion_tokens >= 1 && usage.prompt_tokens + usage.completion_tokens <= CONTEXT, JSON.stringify(usage));
    // As the chat page does: the messages left out are not sent again.
    messages = [messages[0], ...messages.slice(1 + usage.extra.dropped_messages), { role: "assistant", content: reply }];
  }
  assert.deepEqual(seen, expected);
  assert.ok(seen.some((turn) => turn.dropped > 0), JSON.stringify(seen));
  assert.ok(seen.filter((turn) => turn.dropped).every((turn) => turn.notice.startsWith(
    "the conversation no longer fits the model's context of 64 tokens: ") && turn.notice.endsWith("(the system prompt is kept)")));

  // Not streamed: the same usage; and bad requests reject with what is wrong.
  const whole = await engine.chat.completions.create({ messages: [SYSTEM, { role: "user", content: "Hi" }], temperature: 0, max_tokens: 4 });
  assert.equal(whole.usage.extra.dropped_messages, 0);
  assert.equal(whole.usage.extra.notice, null);
  for (const [request, error] of [
    [{ messages: [], max_tokens: 4 }, /^ChatError: the conversation has no messages/],
    [{ messages: [{ role: "user", content: "" }] }, /^ChatError: the prompt is empty/],
    [{ messages: [{ role: "user", content: "Hi" }], max_tokens: 0 }, /^ChatError: max_tokens must be a whole number of at least 1, not 0$/],
    [{ messages: [{ role: "user", content: "Hi" }], max_tokens: -3 }, /^ChatError: max_tokens must be a whole number of at least 1, not -3$/],
    [{ messages: [{ role: "user", content: "word ".repeat(100) }] }, /^ChatError: the prompt has \d+ tokens; the context window is 64/],
  ]) {
    await assert.rejects(engine.chat.completions.create(request), error);
  }
  const after = await engine.chat.completions.create({ messages: [{ role: "user", content: "Hi" }], temperature: 0, max_tokens: 2 });
  assert.equal(after.usage.completion_tokens, 2, "the engine still replies after refused requests");
});

/** The site with its chat-config.json changed. */
function siteWith(name, changes) {
  const copy = join(FIXTURES, name);
  rmSync(copy, { recursive: true, force: true });
  cpSync(site, copy, { recursive: true });
  const path = join(copy, "models", "tiny", "chat-config.json");
  writeFileSync(path, JSON.stringify({ ...JSON.parse(readFileSync(path, "utf8")), ...changes }));
  return copy;
}

test("a chat config that asks for more context than the build has is refused at load, before any weight", async () => {
  const requests = [];
  const larger = siteWith("tiny-site-context-65", { context_length: CONTEXT + 1 });
  await assert.rejects(createEngine(`${ORIGIN}models/tiny/`, { fetchFn: folderFetch(larger, requests), backend: "wasm" }),
    (error) => error instanceof ChatError && error.message === "chat-config.json asks for a context of 65 tokens, but this " +
      "build was compiled for 64: recompile with --context 65, or set context_length to at most 64");
  assert.deepEqual(requests.filter((url) => url.includes("params_shard_")), []);
});

test("a hostile chat template is a clear error, and the engine goes on", async () => {
  const loops = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
  const hostile = siteWith("tiny-site-hostile-template", { chat_template: loops });
  const engine = await createEngine(`${ORIGIN}models/tiny/`, { fetchFn: folderFetch(hostile), backend: "wasm" });
  await assert.rejects(engine.chat.completions.create({ messages: [{ role: "user", content: "Hi" }], max_tokens: 4 }),
    /^TemplateBudgetError: the chat template ran past its budget of 100,064 steps/);
  assert.equal(engine.busy, false);
});
