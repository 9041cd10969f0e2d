// The WASM build of a model, run by the runtime's WebAssembly VM in Node (no browser, no GPU):
// its greedy reply equals the Python VM's (WebGPU build, llvmpipe) for the same model and prompt.
import assert from "node:assert/strict";
import { cpSync, readFileSync, rmSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { before, test } from "node:test";

import { createEngine } from "../../runtime-js/src/tessera.js";
import { InterpretedFunction } from "../../runtime-js/src/interpreter.js";
import { FIXTURES, bundle, folderFetch, ORIGIN, pythonGreedyReply, tessera, tinyGGUF } from "../browser/bundle.mjs";

let site;

before(() => {
  site = bundle("tiny-site", tinyGGUF());
});

test("the WASM build replies as the Python VM does", async () => {
  const expected = pythonGreedyReply(join(site, "models", "tiny", "webgpu"), "Hello there", 12);
  const progress = [];
  const engine = await createEngine(`${ORIGIN}models/tiny/`, {
    fetchFn: folderFetch(site), backend: "auto", initProgressCallback: (p) => progress.push(p),
  });
  assert.equal(engine.device.kind, "wasm");  // Node has no WebGPU: the runtime fell back
  assert.equal(engine.device.name, "WebAssembly SIMD on the CPU");
  assert.match(engine.device.reason, /^no usable WebGPU: this browser has no WebGPU/);
  assert.ok(progress.some((p) => p.text.startsWith("WASM build: no usable WebGPU: this browser has no WebGPU")));
  assert.equal(progress.at(-1).text, "Ready");
  // prefill, decode and the samplers are straight lines: their launches are prepared at load.
  for (const [name, fn] of engine.vm.functions) assert.ok(!(fn instanceof InterpretedFunction), `${name} is interpreted`);
  const reply = await engine.chat.completions.create({
    messages: [{ role: "user", content: "Hello there" }], temperature: 0, max_tokens: 12,
  });
  assert.equal(reply.choices[0].message.content, expected);
  assert.equal(reply.choices[0].finish_reason, "length");
  assert.equal(reply.usage.completion_tokens, 12);
  assert.ok(reply.usage.extra.decode_tokens_per_s > 0);

  // A second turn reuses the cache: only the new turn's tokens are prefilled.
  const messages = [{ role: "user", content: "Hello there" }, { role: "assistant", content: reply.choices[0].message.content },
    { role: "user", content: "And then?" }];
  const chunks = [];
  for await (const chunk of await engine.chat.completions.create({ messages, temperature: 0, max_tokens: 4, stream: true })) {
    chunks.push(chunk);
  }
  const usage = chunks.at(-1).usage;
  assert.ok(usage.extra.prefill_tokens < usage.prompt_tokens / 2, JSON.stringify(usage));
  assert.equal(chunks.map((c) => c.choices[0].delta.content ?? "").join("").length > 0, true);

  // Seeded sampling repeats; a prompt past the context is refused with its numbers.
  const sampled = async () => (await engine.chat.completions.create({ messages: messages.slice(0, 1), temperature: 1,
    top_k: 40, top_p: 0.9, seed: 5, max_tokens: 6 })).choices[0].message.content;
  assert.equal(await sampled(), await sampled());
  await assert.rejects(engine.chat.completions.create({ messages: [{ role: "user", content: "word ".repeat(400) }] }),
    /the prompt has \d+ tokens; the context window is 256/);
});

test("a prompt longer than the build's prefill chunk is prefilled in several calls", async () => {
  // The bundle's WASM build recompiled to take at most 4 prompt positions per prefill call.
  const chunked = join(FIXTURES, "tiny-site-chunked");
  rmSync(chunked, { recursive: true, force: true });
  cpSync(site, chunked, { recursive: true });
  const compiled = join(FIXTURES, "tiny-wasm-chunk4");
  tessera(["compile", tinyGGUF(), "--target", "wasm", "--context", "256", "--prefill-chunk", "4", "-o", compiled, "-q"]);
  assert.equal(JSON.parse(readFileSync(join(compiled, "chat-config.json"), "utf8")).prefill_chunk, 4);
  // Its program and kernels in place of the bundle's; the weights (the same constants) stay the bundle's.
  for (const file of ["executable.json", "kernels.wasm"]) {
    cpSync(join(compiled, file), join(chunked, "models", "tiny", "wasm", file));
  }
  const engine = await createEngine(`${ORIGIN}models/tiny/`, { fetchFn: folderFetch(chunked), backend: "auto" });
  assert.equal(engine.device.kind, "wasm");
  const calls = [];
  const run = engine.vm.runOnDevice.bind(engine.vm);
  engine.vm.runOnDevice = (name, ...args) => { calls.push([name, args[0].shape?.[0], args[1]]); return run(name, ...args); };
  const reply = await engine.chat.completions.create({
    messages: [{ role: "user", content: "Hello there" }], temperature: 0, max_tokens: 12,
  });
  // The whole-prompt build's reply (the Python VM on the WebGPU build, which prefills it at once).
  assert.equal(reply.choices[0].message.content, pythonGreedyReply(join(site, "models", "tiny", "webgpu"), "Hello there", 12));
  const prefills = calls.filter(([name]) => name === "prefill");
  const prompt = reply.usage.prompt_tokens;
  assert.equal(prefills.length, Math.ceil(prompt / 4));
  assert.deepEqual(prefills.map(([, n, total]) => [n, total]),
    prefills.map((_, i) => [Math.min(4, prompt - 4 * i), Math.min(4 * (i + 1), prompt)]));
});

test("in a bundle of three builds over one copy of the weights, the WASM build replies as the Python VM runs each", async () => {
  const three = bundle("tiny-three-builds", tinyGGUF(), 64, "webgpu-f16,webgpu,wasm");
  const model = join(three, "models", "tiny");
  const index = JSON.parse(await readFile(join(model, "bundle.json"), "utf8"));
  assert.deepEqual(index.builds.map((b) => b.name), ["webgpu-f16", "webgpu", "wasm"]);
  // The three tensor caches list shards of one folder; the bytes they name are stored once.
  const caches = await Promise.all(index.builds.map(async (b) => JSON.parse(await readFile(join(model, b.tensor_cache), "utf8"))));
  const shards = new Set(caches.flatMap((c) => c.records.map((s) => s.dataPath)));
  assert.ok(caches.every((c) => c.records.every((s) => shards.has(s.dataPath))));
  const replies = index.builds.map((b) => pythonGreedyReply(join(model, b.path), "Hello there", 8));
  assert.deepEqual(replies, [replies[0], replies[0], replies[0]]);
  const requests = [];
  const engine = await createEngine(`${ORIGIN}models/tiny/`, { fetchFn: folderFetch(three, requests) });
  assert.equal(engine.device.build, "wasm");
  const reply = await engine.chat.completions.create({ messages: [{ role: "user", content: "Hello there" }], temperature: 0,
    max_tokens: 8 });
  assert.equal(reply.choices[0].message.content, replies[0]);
  assert.deepEqual(requests.filter((url) => url.includes("/webgpu")), [], "nothing of the WebGPU builds was fetched");
});
