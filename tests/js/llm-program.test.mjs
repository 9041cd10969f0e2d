// The LLM program contract in runtime-js (llm-program.js): chat-config.json's program section names the
// functions a chat calls. The engine calls the functions it names (a bundle whose functions are renamed
// still chats), and refuses, in one line naming the problem, a config without the section, with another
// sampler layout, of a batched build, or naming a function the executable lacks.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { before, test } from "node:test";

import { createEngine, Engine, readProgram, SAMPLER_LAYOUT, validateChatConfig } from "../../runtime-js/src/tessera.js";
import { bundle, FIXTURES, folderFetch, ORIGIN, tinyGGUF } from "../browser/bundle.mjs";

const program = (functions = { prefill: "prefill", decode: "decode", sample: "sample", sample_greedy: "sample_greedy" }) => ({
  version: 1, functions, state: ["cache_k_0", "cache_v_0"], sampler: [...SAMPLER_LAYOUT] });
const stateParams = (names) => names.map((name, register) => ({ name, register, state: true }));
const executable = (...names) => ({ functions: Object.fromEntries(names.map((name) => [name,
  { params: [{ name: "ids", register: 9, state: false }, ...stateParams(["cache_k_0", "cache_v_0"])] }])) });

test("the program section's functions by role, checked against the executable", () => {
  const read = readProgram({ program: program() }, executable("prefill", "decode", "sample", "sample_greedy", "other"));
  assert.deepEqual(read.functions, { prefill: "prefill", decode: "decode", sample: "sample", sample_greedy: "sample_greedy" });
  assert.deepEqual(read.state, ["cache_k_0", "cache_v_0"]);
  assert.throws(() => readProgram({ context_length: 64 }), (error) => {
    assert.equal(error.name, "FormatError");
    assert.equal(error.message, "chat-config.json has no program section (it was compiled by an older Tessera): compile the model " +
      "again with this compiler (tessera compile)");
    return true;
  });
  const sampler = { program: { ...program(), sampler: ["temperature", "top_k"] } };
  assert.throws(() => readProgram(sampler), new RegExp("^FormatError: chat-config.json's program.sampler is \\[\"temperature\", \"top_k\"\\]; " +
    "this runtime knows \\[\"temperature\", \"top_k\", \"top_p\", \"repetition_penalty\", \"random\"\\]$"));
  assert.throws(() => readProgram({ program: { ...program(), version: 2 } }), /program.version is 2; this runtime knows version 1/);
  const batched = program({ prefill_paged: "prefill_paged", decode_batch: "decode_batch", sample: "sample", sample_greedy: "sample_greedy" });
  assert.throws(() => readProgram({ program: batched }), /names prefill_paged and decode_batch, a batched build .*compile the model without --max-batch/);
  assert.throws(() => readProgram({ program: program() }, executable("prefill", "sample", "sample_greedy")),
    /^FormatError: chat-config.json: program.functions.decode names 'decode', a function executable.json does not have$/);
  const swapped = { program: { ...program(), state: ["cache_v_0", "cache_k_0"] } };
  assert.throws(() => readProgram(swapped, executable("prefill", "decode", "sample", "sample_greedy")),
    /^FormatError: chat-config.json: program.state is \["cache_v_0", "cache_k_0"\]; function 'prefill' \(prefill\) takes the state \["cache_k_0", "cache_v_0"\]$/);
});

test("the section's schema (docs/chat-config.schema.json) is checked when chat-config.json is read", () => {
  const config = (section) => ({ context_length: 64, stop_token_ids: [2], program: section });
  assert.ok(validateChatConfig(config(program())));
  const both = program({ prefill: "p", decode: "d", prefill_paged: "pp", decode_batch: "db", sample: "s", sample_greedy: "g" });
  assert.throws(() => validateChatConfig(config(both)), /^FormatError: chat-config.json is malformed: program.functions /);
  assert.throws(() => validateChatConfig(config({ ...program(), version: 2 })), /^FormatError: chat-config.json is malformed: program.version is 2, not 1$/);
  const batched = program({ prefill_paged: "pp", decode_batch: "db", sample: "s", sample_greedy: "g" });
  assert.throws(() => validateChatConfig(config(batched)), /lacks the field 'page_size'/);
});

test("the engine calls the functions the program section names, with the sampler's layout", async () => {
  const calls = [];
  const vm = {
    runOnDevice: async (name, ...args) => { calls.push([name, args.length]); return "logits"; },
    run: async (name, logits, history, params) => { calls.push([name, Array.from(params.data)]); return { data: [7] }; },
  };
  const renamed = program({ prefill: "fill", decode: "step", sample: "pick", sample_greedy: "pick_best" });
  const engine = new Engine({ vm, tokenizer: null, chatConfig: { context_length: 64, program: renamed }, prefillChunk: 64 });
  await engine.prefill([1, 2, 3], 0);
  engine.cached = [1, 2, 3];
  assert.equal(await engine.nextToken("logits", { temperature: 0, topK: 5, topP: 0.5, penalty: 1.25 }, () => 0.5), 7);
  assert.equal(await engine.nextToken("logits", { temperature: 0.75, topK: 5, topP: 0.5, penalty: 1.25 }, () => 0.5), 7);
  assert.deepEqual(calls, [["fill", 2], ["pick_best", [0, 5, 0.5, 1.25, 0]], ["pick", [0.75, 5, 0.5, 1.25, 0.5]]]);
});

let site;

before(() => {
  site = bundle("tiny-site", tinyGGUF());
});

/** folderFetch over the tiny bundle, with the model's chat-config.json and executable.json changed by ``edit``.
 * @param {(file: string, doc: any) => void} edit */
function editedFetch(edit) {
  const files = folderFetch(site);
  return async (url) => {
    const response = await files(url);
    const file = new URL(url).pathname.split("/").at(-1);
    if (!["chat-config.json", "executable.json"].includes(file)) return response;
    const doc = await response.json();
    edit(file, doc);
    return new Response(JSON.stringify(doc));
  };
}

test("a bundle whose functions are renamed chats, as its program section names them", async () => {
  const names = { prefill: "fill", decode: "step", sample: "pick", sample_greedy: "pick_best" };
  const plain = await createEngine(`${ORIGIN}models/tiny/`, { fetchFn: folderFetch(site) });
  const renamed = await createEngine(`${ORIGIN}models/tiny/`, { fetchFn: editedFetch((file, doc) => {
    if (file === "chat-config.json") doc.program.functions = names;
    else doc.functions = Object.fromEntries(Object.entries(doc.functions).map(([name, record]) => [names[name] ?? name, record]));
  }) });
  assert.deepEqual([...renamed.vm.functions.keys()].sort(), Object.values(names).sort());
  const request = { messages: [{ role: "user", content: "Hello there" }], temperature: 0, max_tokens: 6 };
  const [want, got] = [await plain.chat.completions.create(request), await renamed.chat.completions.create(request)];
  assert.equal(got.choices[0].message.content, want.choices[0].message.content);
});

test("a bundle compiled before the program section, or naming a missing function, is refused in one line", async () => {
  const requests = [];
  const files = folderFetch(site, requests);
  const old = async (url) => {
    const response = await files(url);
    if (!url.endsWith("chat-config.json")) return response;
    const { program: _, ...doc } = await response.json();
    return new Response(JSON.stringify(doc));
  };
  await assert.rejects(createEngine(`${ORIGIN}models/tiny/`, { fetchFn: old }),
    /^FormatError: chat-config.json has no program section \(it was compiled by an older Tessera\): compile the model again with this compiler \(tessera compile\)$/);
  assert.deepEqual(requests.filter((url) => url.endsWith("executable.json")), [], "no build was fetched");
  const missing = editedFetch((file, doc) => { if (file === "chat-config.json") doc.program.functions.decode = "decode_step"; });
  await assert.rejects(createEngine(`${ORIGIN}models/tiny/`, { fetchFn: missing }),
    /program.functions.decode names 'decode_step', a function executable.json does not have/);
  assert.ok((await readFile(join(FIXTURES, "tiny-site", "models", "tiny", "chat-config.json"), "utf8")).includes('"program"'));
});
