// A build split across WebGPU and WebAssembly (format version 4, docs/format.md "Devices") in Chromium
// (WebGPU on SwiftShader): the tiny model compiled with --gpu-layers 1 (layer 0 on WebGPU, layer 1 and
// the head on WASM) decodes greedily in the page as its unsplit build does (the WASM one: SwiftShader
// takes seconds to compile a WebGPU build's kernels), copying between the devices once per decode
// step (the hidden state); a small split module (tests/modules.py's SPLIT_ACROSS_DEVICES) computes
// what numpy would, on the fast path and, without an upper bound, in the interpreter.
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { FIXTURES, pythonGreedyReply, ROOT, tessera, tinyGGUF } from "./bundle.mjs";
import { openWebGPUPage, serveFolders } from "./chromium.mjs";

const FOLDER = join(FIXTURES, "split");
const PROMPT = "Hi";
const TOKENS = 6;
let session;

/** A model folder holding one build of ``kind`` (tessera compile's output in build/) and a bundle.json for it. */
function compileModel(name, kind, args) {
  const model = join(FOLDER, name);
  tessera(["compile", tinyGGUF(), "-o", join(model, "build"), "--context", "64", ...args]);
  const build = { name, kind, path: "build/", features: [], tensor_cache: "build/tensor-cache.json", download_bytes: 0,
    memory: { weights_bytes: 0, arena_bytes: 0, kv_cache_bytes: 0, total_bytes: 0, largest_buffer_bytes: 0, largest_binding_bytes: 0 } };
  writeFileSync(join(model, "bundle.json"), JSON.stringify({ format: "tessera-bundle", version: 2, model: "tiny",
    tokenizer: "build/tokenizer.json", chat_config: "build/chat-config.json", builds: [build] }));
  return join(model, "build");
}

/** tests/modules.py's SPLIT_ACROSS_DEVICES: exp((x + y) * z) - x, the product on WASM; and the same
 * without an upper bound on n, whose tensors are allocated at run time (so the interpreter runs it). */
const SPLIT_MODULE = `
import sys
import tessera
from tessera.script import from_source
sys.path.insert(0, "tests")
from modules import SPLIT_ACROSS_DEVICES as source
tessera.build(from_source(source), "llvmpipe").save(sys.argv[1] + "/module")
unbounded = source.replace('        R.func_attr({"tir_var_upper_bound": {"n": 16}})\\n', "")
tessera.build(from_source(unbounded), "llvmpipe").save(sys.argv[1] + "/module-unbounded")
`;

before(async () => {
  mkdirSync(FOLDER, { recursive: true });
  compileModel("tiny-split", "webgpu", ["--gpu-layers", "1"]);
  compileModel("tiny-wasm", "wasm", ["--target", "wasm"]);
  tessera(["-c", SPLIT_MODULE, FOLDER], "python");
  session = await openWebGPUPage(serveFolders(ROOT, [join(ROOT, "runtime-js", "src"), FOLDER]));
});

after(async () => {
  await session?.close();
});

/** In the page: greedy decoding of the prompt by each model's engine (createEngine on its bundle.json),
 * with the to_device copies of each decode step, and each engine's chat reply. */
async function greedyInPage({ models, prompt, tokens }) {
  const { createEngine, HostTensor } = await import("/runtime-js/src/tessera.js");
  const runs = {};
  for (const model of models) {
    const engine = await createEngine(`/build/browser-fixtures/split/${model}/`);
    const { vm } = engine;
    const greedy = { temperature: 0, topK: 0, topP: 1, penalty: 1 };
    const ids = engine.encodeChat([{ role: "user", content: prompt }]);
    const copies = [];
    let logits = await engine.prefill(ids, 0);
    engine.cached = [...ids];
    const generated = [await engine.nextToken(logits, greedy, () => 0)];
    while (generated.length < tokens) {
      engine.cached.push(generated.at(-1));
      const before = vm.copies;
      logits = await vm.runOnDevice("decode", new HostTensor(Int32Array.of(generated.at(-1)), [1]), engine.cached.length);
      generated.push(await engine.nextToken(logits, greedy, () => 0));
      copies.push(vm.copies - before);
    }
    await engine.resetChat();
    const reply = await engine.chat.completions.create({ messages: [{ role: "user", content: prompt }], temperature: 0,
      max_tokens: tokens });
    runs[model] = { vm: { name: vm.constructor.name, device: vm.device.kind }, device: engine.device, tokens: generated, copies, reply: reply.choices[0].message.content };
  }
  return runs;
}

test("the tiny model split across WebGPU and WASM decodes as its unsplit build does", { timeout: 600_000 }, async () => {
  const runs = await session.page.evaluate(greedyInPage, { models: ["tiny-split", "tiny-wasm"], prompt: PROMPT, tokens: TOKENS });
  const split = runs["tiny-split"], plain = runs["tiny-wasm"];
  // One VM over a device: the composite of WebGPU and WASM, or WASM alone.
  assert.deepEqual([split.vm, plain.vm], [{ name: "VirtualMachine", device: "split" }, { name: "VirtualMachine", device: "wasm" }]);
  assert.equal(split.device.kind, "split");
  assert.match(split.device.name, /\(webgpu:0\) \+ WebAssembly SIMD on the CPU \(wasm:0\)$/);
  assert.equal(split.tokens.length, TOKENS);
  assert.deepEqual(split.tokens, plain.tokens, JSON.stringify(runs));
  assert.deepEqual(split.copies, Array(TOKENS - 1).fill(1));  // the hidden state, once a step
  assert.equal(split.reply, plain.reply);
  assert.equal(split.reply, pythonGreedyReply(join(FOLDER, "tiny-split", "build"), PROMPT, TOKENS));
});

/** In the page: the split module, bounded (fast path) and unbounded (interpreter), against plain JS. */
async function moduleInPage() {
  const { HostTensor, loadBuild, openDevice, VirtualMachine } = await import("/runtime-js/src/tessera.js");
  const { InterpretedFunction } = await import("/runtime-js/src/interpreter.js");
  const none = { kind: "none", get: async () => undefined, put: async () => undefined };
  const results = {};
  for (const name of ["module", "module-unbounded"]) {
    const { executable, weights, modules } = await loadBuild(`/build/browser-fixtures/split/${name}/`, { cache: none });
    const vm = await VirtualMachine.create(await openDevice(executable), executable, weights, modules);
    const errors = [];
    for (const n of [3, 16]) {
      const values = (seed) => Float32Array.from({ length: n * 8 }, (_, i) => Math.sin(seed * 13 + i) * 0.5);
      const [x, y, z] = [1, 2, 3].map((seed) => new HostTensor(values(seed), [n, 8]));
      const expected = x.data.map((xi, i) => Math.exp((xi + y.data[i]) * z.data[i]) - xi);
      const got = await vm.run("main", x, y, z);
      // A result left on WebGPU goes back in as z, a WASM parameter.
      const kept = await vm.runOnDevice("main", x, y, z);
      const again = await vm.run("main", x, y, kept);
      const expectedAgain = x.data.map((xi, i) => Math.exp((xi + y.data[i]) * expected[i]) - xi);
      for (const [label, out, want] of [["main", got, expected], ["main(kept)", again, expectedAgain]]) {
        const worst = Math.max(...out.data.map((v, i) => Math.abs(v - want[i]) / (1 + Math.abs(want[i]))));
        if (!(worst < 1e-5) || out.shape.join() !== `${n},8`) errors.push(`${label} n=${n}: shape ${out.shape}, error ${worst}`);
      }
    }
    results[name] = { errors, copies: vm.copies, interpreted: vm.functions.get("main") instanceof InterpretedFunction };
    vm.device.destroy();
  }
  return results;
}

test("a split module computes on both devices, on the fast path and in the interpreter", { timeout: 120_000 }, async () => {
  const results = await session.page.evaluate(moduleInPage);
  assert.deepEqual(results, {
    module: { errors: [], copies: 12, interpreted: false },  // 2 copies a call, 3 calls for each of 2 sizes
    "module-unbounded": { errors: [], copies: 12, interpreted: true },
  });
});
