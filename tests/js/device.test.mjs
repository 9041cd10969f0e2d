// Device negotiation against fake adapters: a missing feature or limit is named, and the engine then
// falls back to the bundle's WASM build, saying why; a software adapter (SwiftShader) is recognized
// and the engine prefers the WASM build on it unless the page asks for WebGPU.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { after, test } from "node:test";

import {
  createEngine, formatBytes, orderBuilds, requestDeviceFor, softwareRenderer, wasmMisfit, webgpuMisfit,
} from "../../runtime-js/src/tessera.js";
import { bundle, tinyGGUF } from "../browser/bundle.mjs";

const original = Object.getOwnPropertyDescriptor(globalThis, "navigator");
let requested = null;

function fakeGPU(adapter) {
  Object.defineProperty(globalThis, "navigator", { configurable: true, value: { gpu: { requestAdapter: async () => adapter } } });
}

function adapter({ features = [], limits = {}, info = { description: "Fake Adapter" } } = {}) {
  return {
    features: new Set(features),
    limits: { maxStorageBuffersPerShaderStage: 8, maxComputeInvocationsPerWorkgroup: 256, maxBufferSize: 1 << 28, ...limits },
    info,
    requestDevice: async (descriptor) => { requested = descriptor; return { fake: true }; },
  };
}

const executable = { required_features: ["shader-f16"], required_limits: { maxStorageBuffersPerShaderStage: 10,
  maxComputeInvocationsPerWorkgroup: 256 } };

after(() => {
  if (original) Object.defineProperty(globalThis, "navigator", original);
  else delete globalThis.navigator;
});

test("a missing feature, a short limit and no adapter are each named", async () => {
  fakeGPU(adapter());
  await assert.rejects(requestDeviceFor(executable), /this device lacks the WebGPU feature 'shader-f16'/);
  fakeGPU(adapter({ features: ["shader-f16"] }));
  await assert.rejects(requestDeviceFor(executable),
    /needs the WebGPU limit maxStorageBuffersPerShaderStage = 10; this device allows 8/);
  fakeGPU(null);
  await assert.rejects(requestDeviceFor(executable), /no adapter is available/);
});

test("only what exceeds the spec defaults is requested", async () => {
  fakeGPU(adapter({ features: ["shader-f16"], limits: { maxStorageBuffersPerShaderStage: 16 } }));
  const { adapterName } = await requestDeviceFor(executable);
  assert.equal(adapterName, "Fake Adapter");
  assert.deepEqual(requested, { requiredFeatures: ["shader-f16"], requiredLimits: { maxStorageBuffersPerShaderStage: 10 } });
});

// What Chromium 156's headless SwiftShader adapter reports (isFallbackAdapter moved to adapter.info).
const SWIFTSHADER = { vendor: "google", architecture: "swiftshader", device: "", description: "", isFallbackAdapter: true };

test("software adapters are recognized by isFallbackAdapter or by name; a GPU is not", () => {
  assert.equal(softwareRenderer({ info: SWIFTSHADER }), "SwiftShader");
  assert.equal(softwareRenderer({ info: { vendor: "mesa", device: "llvmpipe (LLVM 15.0.6, 256 bits)" } }), "llvmpipe");
  assert.equal(softwareRenderer({ info: { description: "Microsoft Basic Render Driver" } }), "WARP");
  assert.equal(softwareRenderer({ info: { vendor: "acme", description: "Acme CPU renderer" } }), "Acme CPU renderer / acme");
  assert.equal(softwareRenderer({ isFallbackAdapter: true, info: { vendor: "", architecture: "" } }), "a fallback adapter");
  assert.equal(softwareRenderer({ info: { vendor: "nvidia", architecture: "ada", description: "NVIDIA GeForce RTX 4090" } }), null);
  assert.equal(softwareRenderer({ info: { vendor: "apple", architecture: "metal-3", isFallbackAdapter: false } }), null);
});

test("builds are tried in the bundle's order, WASM first on a software adapter unless the page asks", () => {
  const builds = [{ name: "webgpu", kind: "webgpu" }, { name: "wasm", kind: "wasm" }];
  const names = (choice) => choice.builds.map((b) => b.name);
  assert.deepEqual(names(orderBuilds(builds, "auto", null)), ["webgpu", "wasm"]);
  const software = orderBuilds(builds, "auto", "SwiftShader");
  assert.deepEqual(names(software), ["wasm", "webgpu"]);
  assert.equal(software.reason, "the WebGPU adapter is a software renderer (SwiftShader), slower than WebAssembly on this CPU");
  const forced = orderBuilds(builds, "webgpu", "SwiftShader");
  assert.deepEqual(names(forced), ["webgpu"]);
  assert.match(forced.reason, /the page asked for WebGPU \(backend: "webgpu"\), although the adapter is a software renderer/);
  assert.deepEqual(names(orderBuilds(builds.slice(0, 1), "auto", "SwiftShader")), ["webgpu"], "no WASM build: WebGPU still runs");
});

let site;

/** A fetch over the tiny model's bundle; ``requests`` lists what it was asked for. */
function bundleFetch(requests = []) {
  site ??= bundle("tiny-site", tinyGGUF());
  return async (url) => {
    requests.push(url);
    try {
      return new Response(await readFile(join(site, new URL(url).pathname)));
    } catch {
      return new Response("", { status: 404 });
    }
  };
}

test("the engine falls back to WASM and says which WebGPU need was not met", async () => {
  // The tiny model's WebGPU build needs 5 storage buffers per stage; this adapter allows 4.
  fakeGPU(adapter({ limits: { maxStorageBuffersPerShaderStage: 4 } }));
  const engine = await createEngine("http://bundle.test/models/tiny/", { fetchFn: bundleFetch() });
  assert.equal(engine.device.kind, "wasm");
  assert.match(engine.device.reason,
    /^no usable WebGPU: the model needs the WebGPU limit maxStorageBuffersPerShaderStage = \d+; this device allows 4$/);
});

test("on a SwiftShader adapter the engine runs the WASM build and its progress says why", async () => {
  fakeGPU(adapter({ info: SWIFTSHADER }));
  requested = null;
  const texts = [];
  const engine = await createEngine("http://bundle.test/models/tiny/", { fetchFn: bundleFetch(),
    initProgressCallback: ({ text }) => texts.push(text) });
  assert.equal(engine.device.kind, "wasm");
  assert.equal(requested, null, "no WebGPU device was requested");
  const why = "the WebGPU adapter is a software renderer (SwiftShader), slower than WebAssembly on this CPU";
  assert.equal(engine.device.reason, why);
  assert.ok(texts.includes(`WASM build: ${why}`), `progress texts: ${texts}`);
});

test("a build's figures are checked against the device's limits, each refusal naming the numbers", () => {
  const build = { name: "webgpu-f16", kind: "webgpu", features: ["shader-f16"], memory: { weights_bytes: 100 << 20,
    arena_bytes: 20 << 20, kv_cache_bytes: 8 << 20, total_bytes: 128 << 20, largest_buffer_bytes: 300 << 20,
    largest_binding_bytes: 200 << 20 } };
  assert.equal(webgpuMisfit(build, adapter()), "build webgpu-f16 needs the WebGPU feature 'shader-f16', which this device lacks");
  assert.equal(webgpuMisfit(build, adapter({ features: ["shader-f16"] })), "build webgpu-f16 needs a buffer of 300.0 MiB " +
    "(314572800 bytes) (its largest weight, KV cache tensor or arena buffer); this device's maxBufferSize is 256.0 MiB (268435456 bytes)");
  const roomy = adapter({ features: ["shader-f16"], limits: { maxBufferSize: 1 << 30 } });
  assert.equal(webgpuMisfit(build, roomy), "build webgpu-f16 binds 200.0 MiB (209715200 bytes) at once; this device's " +
    "maxStorageBufferBindingSize is 128.0 MiB (134217728 bytes)", "an adapter that does not say has the spec default");
  assert.equal(webgpuMisfit(build, adapter({ features: ["shader-f16"], limits: { maxBufferSize: 1 << 30,
    maxStorageBufferBindingSize: 1 << 30 } })), null);
  assert.equal(wasmMisfit(build, 64 << 20), "build webgpu-f16 needs 128.0 MiB (134217728 bytes) of WebAssembly memory " +
    "(weights 100.0 MiB (104857600 bytes), arenas 20.0 MiB (20971520 bytes), KV cache 8.00 MiB (8388608 bytes)); " +
    "WebAssembly allows 64.0 MiB (67108864 bytes)");
  assert.equal(wasmMisfit(build), null, "4 GiB by default");
  assert.equal(formatBytes(5 * 2 ** 30), "5.00 GiB (5368709120 bytes)");
});

test("a device too small for every build is refused before anything but bundle.json is fetched", async () => {
  const requests = [];
  const fetchFn = bundleFetch(requests);
  const index = JSON.parse(await (await fetchFn("http://bundle.test/models/tiny/bundle.json")).text());
  const [webgpu, wasm] = index.builds;
  requests.length = 0;
  fakeGPU(adapter({ limits: { maxBufferSize: 1 << 20 } }));
  const error = await createEngine("http://bundle.test/models/tiny/", { fetchFn, wasmMemoryLimit: 4 << 20 }).then(
    () => assert.fail("the engine was made"), (e) => e);
  assert.equal(error.name, "DeviceError");
  const m = wasm.memory;
  assert.equal(error.message, "this model does not fit this device, so nothing of it was downloaded: " +
    `build webgpu needs a buffer of ${formatBytes(webgpu.memory.largest_buffer_bytes)} (its largest weight, KV cache ` +
    "tensor or arena buffer); this device's maxBufferSize is 1.00 MiB (1048576 bytes); " +
    `build wasm needs ${formatBytes(m.total_bytes)} of WebAssembly memory (weights ${formatBytes(m.weights_bytes)}, ` +
    `arenas ${formatBytes(m.arena_bytes)}, KV cache ${formatBytes(m.kv_cache_bytes)}); WebAssembly allows 4.00 MiB (4194304 bytes)`);
  assert.deepEqual(requests, ["http://bundle.test/models/tiny/bundle.json"]);
});

test("a WebGPU build too big for the adapter is passed over unfetched, and the WASM build says why", async () => {
  const requests = [];
  fakeGPU(adapter({ limits: { maxStorageBufferBindingSize: 1 << 20 } }));
  requested = null;
  const engine = await createEngine("http://bundle.test/models/tiny/", { fetchFn: bundleFetch(requests) });
  assert.equal(engine.device.kind, "wasm");
  assert.equal(requested, null, "no WebGPU device was requested");
  assert.match(engine.device.reason, /^no usable WebGPU: build webgpu binds 3\.19 MiB \(3342336 bytes\) at once; this device's maxStorageBufferBindingSize is 1\.00 MiB \(1048576 bytes\)$/);
  assert.deepEqual(requests.filter((url) => url.includes("/webgpu/")), []);
  assert.ok(requests.some((url) => /\/weights\/params_shard_\d+\.bin$/.test(url)), "the shared weights were fetched");
});
