// Greedy continuation of a token-id prompt by runtime-js's WASM VM in Node, for a compiled build
// folder (`tessera compile --target wasm`, or tessera.app.compile.cached_compile): the Engine's own
// chunked prefill (chunks of the build's prefill bound) and the build's on-device greedy sampler, as
// a chat turn runs them, but on ids, so that a test can hand it any prompt, of any length.
//
//   node tests/js/greedy-ids.mjs BUILD_DIR IDS.json STEPS   -> {"tokens": [...], "chunks": [...], "seconds": {...}}
//
// Used by tests/models/test_long_prompt.py (not a node --test file: it needs a compiled model).
import { readFile } from "node:fs/promises";
import { join } from "node:path";

import { Engine, HostTensor, loadBuild, VirtualMachine, WasmDevice } from "../../runtime-js/src/tessera.js";
import { prefillChunk } from "../../runtime-js/src/engine.js";
import { Tokenizer } from "../../runtime-js/src/vendor/tokenizers.js";

const ORIGIN = "http://build.test/";
const [folder, idsPath, stepsArg] = process.argv.slice(2);
const fetchFn = async (/** @type {string} */ url) => {
  try {
    return new Response(await readFile(join(folder, new URL(url).pathname)));
  } catch {
    return new Response("not found", { status: 404 });
  }
};
const NO_CACHE = { kind: "none", get: async () => undefined, put: async () => undefined };

const started = performance.now();
const loaded = await loadBuild(ORIGIN, { fetchFn, cache: NO_CACHE });
const chatConfig = JSON.parse(await readFile(join(folder, "chat-config.json"), "utf8"));
const tokenizer = new Tokenizer(JSON.parse(await readFile(join(folder, "tokenizer.json"), "utf8")), {});
const vm = await VirtualMachine.create(new WasmDevice(), loaded.executable, loaded.weights, loaded.modules, {});
const engine = new Engine({ vm, chatConfig, tokenizer, prefillChunk: prefillChunk(loaded.executable, chatConfig) });
const loadSeconds = (performance.now() - started) / 1000;

const prompt = JSON.parse(await readFile(idsPath, "utf8"));
const chunks = [];
const run = vm.runOnDevice.bind(vm);
vm.runOnDevice = (/** @type {string} */ name, /** @type {any[]} */ ...args) => {
  if (name === "prefill") chunks.push([args[0].shape[0], args[1]]);
  return run(name, ...args);
};
const greedy = { temperature: 0, topK: 0, topP: 1, penalty: 1 };
const prefillStart = performance.now();
let logits = await engine.prefill(prompt, 0);
engine.cached = [...prompt];
const tokens = [await engine.nextToken(logits, greedy, () => 0)];
const prefillSeconds = (performance.now() - prefillStart) / 1000;
while (tokens.length < Number(stepsArg)) {
  engine.cached.push(tokens.at(-1));
  logits = await vm.runOnDevice("decode", new HostTensor(Int32Array.of(tokens.at(-1)), [1]), engine.cached.length);
  tokens.push(await engine.nextToken(logits, greedy, () => 0));
}
const seconds = { load: loadSeconds, prefill: prefillSeconds, decode: (performance.now() - prefillStart) / 1000 - prefillSeconds };
process.stdout.write(JSON.stringify({ tokens, chunks, seconds }) + "\n");
