// The WASM build on a pool of threads (worker_threads in Node, as Web Workers in a page): the threaded
// module (kernels-threads.wasm) over one shared memory gives the single-threaded module's tokens, at
// thread counts that split launches unevenly and that exceed some launches' workgroups; a context
// without cross-origin isolation, or a build without the threaded module, runs on one thread and says why.
import assert from "node:assert/strict";
import { cpSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { after, before, test } from "node:test";

import { SplitDevice } from "../../runtime-js/src/devices/split.js";
import { WasmDevice } from "../../runtime-js/src/devices/wasm.js";
import { threadsOf } from "../../runtime-js/src/engine.js";
import { WasmPool } from "../../runtime-js/src/devices/wasm-pool.js";
import { createEngine } from "../../runtime-js/src/tessera.js";
import { FIXTURES, bundle, folderFetch, ORIGIN, tinyGGUF } from "../browser/bundle.mjs";

const PROMPT = [{ role: "user", content: "Hello there" }];
let site;
const engines = [];

before(() => {
  site = bundle("tiny-site-wasm-threads", tinyGGUF(), 256, "wasm");
});

after(() => {
  for (const engine of engines) engine.vm.device.destroy();
});

async function open(options, root = site) {
  const engine = await createEngine(`${ORIGIN}models/tiny/`, { fetchFn: folderFetch(root), backend: "wasm", ...options });
  engines.push(engine);
  return engine;
}

/** A greedy reply, a seeded sampled one, and a second turn over the cached first. */
async function replies(engine) {
  const greedy = (await engine.chat.completions.create({ messages: PROMPT, temperature: 0, max_tokens: 24 })).choices[0].message.content;
  const sampled = (await engine.chat.completions.create({ messages: PROMPT, temperature: 1, top_k: 40, top_p: 0.9, seed: 7,
    max_tokens: 12 })).choices[0].message.content;
  await engine.resetChat();
  const first = (await engine.chat.completions.create({ messages: PROMPT, temperature: 0, max_tokens: 6 })).choices[0].message.content;
  const second = (await engine.chat.completions.create({ messages: [...PROMPT, { role: "assistant", content: first },
    { role: "user", content: "And then?" }], temperature: 0, max_tokens: 8 })).choices[0].message.content;
  return { greedy, sampled, second };
}

test("on 2, 3 and 5 threads the WASM build gives the one-thread build's tokens", async () => {
  const single = await open({ wasmThreads: 1 });
  assert.equal(single.device.threads, 1);
  assert.equal(single.device.name, "WebAssembly SIMD on the CPU");
  assert.equal(single.device.threading, "one thread was asked for");
  const expected = await replies(single);
  assert.ok(expected.greedy.length > 0 && expected.sampled.length > 0);
  for (const threads of [2, 3, 5]) {
    const engine = await open({ wasmThreads: threads });
    assert.equal(engine.device.threads, threads);
    assert.equal(engine.device.name, "WebAssembly SIMD on the CPU");
    assert.match(engine.device.threading, new RegExp(`^${threads} threads \\(Web Workers over one shared memory\\)`));
    assert.ok(engine.vm.device.memory.buffer instanceof SharedArrayBuffer);
    assert.deepEqual(await replies(engine), expected, `${threads} threads`);
  }
});

test("a context that is not cross-origin isolated runs on one thread and says so", async () => {
  const threaded = await open({ wasmThreads: 2 });
  const expected = (await threaded.chat.completions.create({ messages: PROMPT, temperature: 0, max_tokens: 12 })).choices[0].message.content;
  globalThis.crossOriginIsolated = false;  // as a page served without COOP/COEP sees it
  try {
    const engine = await open({ wasmThreads: 4 });
    assert.equal(engine.device.threads, 1);
    assert.equal(engine.device.name, "WebAssembly SIMD on the CPU");
    assert.match(engine.device.threading, /not cross-origin isolated .*Cross-Origin-Opener-Policy: same-origin.*Cross-Origin-Embedder-Policy: require-corp.* one thread/);
    assert.ok(!(engine.vm.device.memory.buffer instanceof SharedArrayBuffer));
    const reply = await engine.chat.completions.create({ messages: PROMPT, temperature: 0, max_tokens: 12 });
    assert.equal(reply.choices[0].message.content, expected);
  } finally {
    delete globalThis.crossOriginIsolated;
  }
});

test("a build without the threaded module runs on one thread and says to rebuild it", async () => {
  const older = join(FIXTURES, "tiny-site-wasm-no-threads");
  rmSync(older, { recursive: true, force: true });
  cpSync(site, older, { recursive: true });
  const build = join(older, "models", "tiny", "wasm");
  const exe = JSON.parse(readFileSync(join(build, "executable.json"), "utf8"));
  exe.modules = exe.modules.filter((m) => m.path !== "kernels-threads.wasm");
  writeFileSync(join(build, "executable.json"), JSON.stringify(exe));
  rmSync(join(build, "kernels-threads.wasm"));
  const engine = await open({ wasmThreads: 3 }, older);
  assert.equal(engine.device.threads, 1);
  assert.match(engine.device.threading, /no threaded kernels \(kernels-threads\.wasm\): rebuild it/);
  const reply = await engine.chat.completions.create({ messages: PROMPT, temperature: 0, max_tokens: 12 });
  const single = await open({ wasmThreads: 1 });
  assert.equal(reply.choices[0].message.content,
    (await single.chat.completions.create({ messages: PROMPT, temperature: 0, max_tokens: 12 })).choices[0].message.content);
});

test("where workers cannot start, the threaded module runs on one thread and says why", async () => {
  const single = await open({ wasmThreads: 1 });
  const expected = (await single.chat.completions.create({ messages: PROMPT, temperature: 0, max_tokens: 12 })).choices[0].message.content;
  const start = WasmPool.start;
  WasmPool.start = async () => { throw new Error("refused by the page's Content-Security-Policy"); };
  try {
    const engine = await open({ wasmThreads: 3 });
    assert.equal(engine.device.threads, 1);
    assert.equal(engine.device.threading,
      "the thread pool could not start (refused by the page's Content-Security-Policy), so WebAssembly runs on one thread");
    assert.ok(engine.vm.device.memory.buffer instanceof SharedArrayBuffer);  // the threaded module, on this thread
    const reply = await engine.chat.completions.create({ messages: PROMPT, temperature: 0, max_tokens: 12 });
    assert.equal(reply.choices[0].message.content, expected);
  } finally {
    WasmPool.start = start;
  }
});

test("a thread count that is not a whole number from 1 is refused by name", async () => {
  for (const threads of [0, 1.5, -2]) {
    await assert.rejects(open({ wasmThreads: threads }), new RegExp(`threads must be a whole number from 1, not ${threads}`));
  }
});

/** A module of nothing and a shared memory: what a pool's start posts to workers that never instantiate it. */
const EMPTY = new WebAssembly.Module(Uint8Array.of(0, 0x61, 0x73, 0x6d, 1, 0, 0, 0));
const SHARED = new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true });

/** Web Workers stand-ins (the pool's browser path): ``behave`` says what the n-th one does. Returns the
 * workers made and a way to put the real Worker back. @param {(n: number, worker: any) => void} behave */
function fakeWorkers(behave) {
  const made = [];
  globalThis.Worker = class {
    constructor() {
      behave(made.length + 1, this);
      this.terminated = false;
      made.push(this);
    }
    postMessage() { queueMicrotask(() => this.answer?.()); }
    terminate() { this.terminated = true; }
  };
  return { made, restore: () => { delete globalThis.Worker; } };
}

test("a worker that cannot be made stops the workers made before it", async () => {
  const { made, restore } = fakeWorkers((n) => { if (n === 3) throw new Error("too many workers"); });
  try {
    await assert.rejects(WasmPool.start(EMPTY, SHARED, [0, 0, 0, 0], []), /too many workers/);
    assert.equal(made.length, 2);
    assert.ok(made.every((worker) => worker.terminated));
  } finally {
    restore();
  }
});

test("workers that never say ready, or whose message cannot be read, fail the start and are stopped", { timeout: 10000 }, async () => {
  const silent = fakeWorkers(() => {});
  try {
    await assert.rejects(WasmPool.start(EMPTY, SHARED, [0, 0, 0], [], { timeoutMs: 100 }),
      /the workers of the WASM thread pool were not ready within 100 ms/);
    assert.equal(silent.made.length, 3);
    assert.ok(silent.made.every((worker) => worker.terminated));
  } finally {
    silent.restore();
  }
  const garbled = fakeWorkers((n, worker) => { worker.answer = () => worker.onmessageerror?.({}); });
  try {
    await assert.rejects(WasmPool.start(EMPTY, SHARED, [0, 0], [], { timeoutMs: 5000 }),
      /could not start: a message of the worker could not be read/);
    assert.ok(garbled.made.every((worker) => worker.terminated));
  } finally {
    garbled.restore();
  }
});

test("a Node worker that exits before it is ready fails the start at once", { timeout: 10000 }, async () => {
  const script = join(FIXTURES, "wasm-thread-exits.mjs");
  writeFileSync(script, "process.exit(3);\n");
  await assert.rejects(WasmPool.start(EMPTY, SHARED, [0, 0], [], { script: pathToFileURL(script) }),
    /could not start: the worker exited \(code 3\)/);
});

test("a load that fails once the pool has started stops its workers and lets its memory go", async () => {
  const allocate = WasmDevice.prototype.allocate;
  let device = null;
  WasmDevice.prototype.allocate = function (nbytes) {
    if (this.pool) { device = this; throw new Error("no room for the weights"); }
    return allocate.call(this, nbytes);
  };
  try {
    await assert.rejects(open({ wasmThreads: 3 }), /no room for the weights/);
  } finally {
    WasmDevice.prototype.allocate = allocate;
  }
  assert.ok(device, "the pool started before the failure");
  assert.equal(device.pool, null);
  assert.equal(device.memory, null);
});

test("a launch with more arguments than the pool passes is refused by the kernel's name and count", async () => {
  const engine = await open({ wasmThreads: 3 });
  const device = engine.vm.device;
  const kernel = engine.vm.kernels[0];
  const name = engine.vm.exe.kernels[0].name;
  const bound = device.bind(kernel, [device.allocate(64)]);
  // 1 tensor + 254 scalars + the grid: 258 arguments, which would run past the control block's 256 into the
  // words that wake the workers.
  assert.throws(() => device.launch(bound, new Array(254).fill(1), [1, 1, 1]),
    new RegExp(`kernel ${name} takes 258 arguments \\(its tensors, scalars and grid\\), more than the WASM thread pool passes \\(256\\)`));
  assert.throws(() => device.bind(kernel, new Array(254).fill({ offset: 0 })), new RegExp(`kernel ${name} takes 257 arguments`));
  assert.throws(() => device.pool.launch(0, () => {}, new Array(257).fill(0), 8), /kernel 0 takes 257 arguments before its range/);
  // The pool still runs a launch whole: the model's reply is the one-thread build's.
  const reply = await engine.chat.completions.create({ messages: PROMPT, temperature: 0, max_tokens: 8 });
  const single = await open({ wasmThreads: 1 });
  assert.equal(reply.choices[0].message.content,
    (await single.chat.completions.create({ messages: PROMPT, temperature: 0, max_tokens: 8 })).choices[0].message.content);
});

test("a split build's WASM part says its threads, as a WASM build does", async () => {
  const wasm = (await open({ wasmThreads: 3 })).vm.device;
  const gpu = { kind: "webgpu", name: "WebGPU", fits: () => [{}] };
  const split = new SplitDevice([gpu, wasm], ["webgpu:0", "wasm:0"]);
  assert.deepEqual(threadsOf(split), { threads: 3, threading: "3 threads (Web Workers over one shared memory)" });
  assert.deepEqual(threadsOf(wasm), threadsOf(split));
  assert.deepEqual(threadsOf(gpu), {});
  assert.deepEqual(threadsOf(new SplitDevice([gpu, gpu], ["webgpu:0", "webgpu:1"])), {});
});

/** The fixture's WASM build, as a device's loadKernels takes it, and its threaded module's heap base and
 * stack size (over a shared memory of its own). */
async function wasmBuild() {
  const folder = join(site, "models", "tiny", "wasm");
  const kernels = JSON.parse(readFileSync(join(folder, "executable.json"), "utf8")).kernels;
  const modules = new Map(["kernels.wasm", "kernels-threads.wasm"].map((path) => [path, readFileSync(join(folder, path))]));
  const memory = new WebAssembly.Memory({ initial: 64, maximum: 65536, shared: true });
  const { instance: { exports } } = await WebAssembly.instantiate(modules.get("kernels-threads.wasm"), { env: { memory } });
  const align = (/** @type {number} */ n) => Math.ceil(n / 16) * 16;
  return { kernels, modules, heap: align(exports.__heap_base.value), stack: align(exports.__stack_pointer.value) };
}

test("a pool that falls back to one thread gives its workers' stacks back to the tensors", async () => {
  const { kernels, modules, heap } = await wasmBuild();
  const start = WasmPool.start;
  WasmPool.start = async () => { throw new Error("refused"); };
  const device = new WasmDevice({ threads: 4 });
  try {
    await device.loadKernels(kernels, modules);
  } finally {
    WasmPool.start = start;
  }
  assert.equal(device.threads, 1);
  assert.deepEqual(device.stackTops, []);
  assert.equal(device.allocate(16).offset, heap);  // the first tensor where the first worker's stack was
  device.destroy();
});

test("the worker stacks come out of the memory limit: as many threads as fit, and threading says why", async () => {
  const { kernels, modules, heap, stack } = await wasmBuild();
  const weights = 5 << 20;
  const device = new WasmDevice({ threads: 4, memoryLimit: heap + weights + 2 * stack + 4096 });
  device.reserve(weights);
  await device.loadKernels(kernels, modules);
  assert.equal(device.threads, 3);
  assert.equal(device.threading, "3 threads (Web Workers over one shared memory): the model leaves room in " +
    `WebAssembly's memory for 2 more thread stacks of ${stack >> 20} MiB, not 3`);
  assert.ok(device.end + weights <= device.memoryLimit);
  device.destroy();
  const none = new WasmDevice({ threads: 2, memoryLimit: heap + weights + stack - 16 });
  none.reserve(weights);
  await none.loadKernels(kernels, modules);
  assert.equal(none.threads, 1);
  assert.match(none.threading, /could not start \(no room for a second thread's stack: .* for 0 more thread stacks/);
  assert.equal(none.allocate(16).offset, heap);
  none.destroy();
});
