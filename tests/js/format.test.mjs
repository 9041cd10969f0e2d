// The runtime refuses files that are not what they claim, with a sentence that names the problem.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  isInsidePath, runsOn, validateBundle, validateChatConfig, validateExecutable, validateTensorCache,
} from "../../runtime-js/src/format.js";

const executable = () => ({
  format: "tessera-executable", version: 3, target: { kind: "webgpu", name: "webgpu", backend: "wgsl", features: [] },
  required_features: [], required_limits: {}, constants: [], libraries: [],
  modules: [{ path: "kernels/000_k.wgsl", backend: "wgsl", nbytes: 10, sha256: "b".repeat(64) }],
  kernels: [{ name: "k", backend: "wgsl", module: "kernels/000_k.wgsl", entry_point: "k", workgroup_size: [64, 1, 1],
    abi: { bindings: [], scalars: [] }, grid: ["1", "1", "1"], requirements: { features: [], limits: {} } }],
  functions: { main: { params: [], code: [{ op: "prim", dst: 0, value: "1" }, { op: "ret", src: 0 }], registers: 1,
    symbols: {}, unbounded_symbols: [], tensors: {}, locations: {}, runtime_allocations: [],
    result: { kind: "prim", dtype: "int64", value: null },
    memory: { static: true, recursive: false, arena_bytes: 0, buffers: [], storages: [], liveness_lower_bound_bytes: 0 } } },
});
const tensorCache = () => ({
  format: "tessera-tensor-cache", version: 1,
  records: [{ dataPath: "params_shard_0.bin", format: "raw-shard", nbytes: 64, sha256: "a".repeat(64),
    records: [{ name: "w", shape: [16], dtype: "float32", format: "raw", byteOffset: 0, nbytes: 64 }] }],
});

const bundleIndex = () => ({
  format: "tessera-bundle", version: 2, model: "m", tokenizer: "webgpu/tokenizer.json", chat_config: "webgpu/chat-config.json",
  builds: [{ name: "webgpu", kind: "webgpu", path: "webgpu/", features: [], tensor_cache: "weights/webgpu.json",
    download_bytes: 10933594, memory: { weights_bytes: 6732096, arena_bytes: 960768, kv_cache_bytes: 32768,
      total_bytes: 7725632, largest_buffer_bytes: 3342336, largest_binding_bytes: 3342336 } }],
});

test("well-formed files pass", () => {
  assert.ok(validateExecutable(executable()));
  assert.ok(validateTensorCache(tensorCache()));
  assert.ok(validateBundle(bundleIndex()));
  assert.ok(validateChatConfig({ context_length: 1024, stop_token_ids: [2] }));
});

test("each kind of bad file is named", () => {
  for (const other of [1, 2, 5]) {
    assert.throws(() => validateExecutable({ ...executable(), version: other }, "x/executable.json"),
      new RegExp(`x/executable.json: format version ${other}; this runtime reads versions 3 and 4: rebuild the bundle`));
  }
  const stray = executable();
  stray.functions.main.code = [{ op: "call", dst: 0, func: "nowhere", args: [] }, { op: "ret", src: 0 }];
  assert.throws(() => validateExecutable(stray), /functions\.main\.code\[0\]\.func is 'nowhere', which is not a function of the executable/);
  assert.throws(() => validateExecutable({ format: "gguf" }), /not a Tessera executable/);
  const spirv = executable();
  spirv.kernels[0].backend = "spirv";
  assert.throws(() => validateExecutable(spirv), /kernel k is for the spirv backend; this runtime runs wgsl, c-wasm/);
  const unlisted = executable();
  unlisted.kernels[0].module = "kernels/other.wgsl";
  assert.throws(() => validateExecutable(unlisted), /kernels\[0\]\.module is 'kernels\/other.wgsl', which the executable's modules do not list/);
  for (const bad of ["../k.wgsl", "/k.wgsl", "https://evil.test/k.wgsl", "%2e%2e/k.wgsl", "a//b", "C:/k", "..\t/k.wgsl",
    ".\n./k.wgsl"]) {
    const escaping = executable();
    escaping.modules[0].path = bad;
    assert.throws(() => validateExecutable(escaping), /modules\[0\]\.path .* is not a relative path inside the folder: it /, bad);
  }
  assert.ok(isInsidePath("kernels/000_k.wgsl") && runsOn(executable(), "webgpu") && !runsOn(executable(), "wasm"));
  const noGrid = executable();
  delete noGrid.kernels[0].grid;
  assert.throws(() => validateExecutable(noGrid), /kernels\[0\] lacks the field 'grid'/);
  const outside = tensorCache();
  outside.records[0].records[0].nbytes = 128;
  outside.records[0].records[0].shape = [32];
  assert.throws(() => validateTensorCache(outside), /records\[0\]\.records\[0\] lies outside its shard: bytes 0 to 128 of 64/);
  const escape = tensorCache();
  escape.records[0].dataPath = "../secret.bin";
  assert.throws(() => validateTensorCache(escape), /records\[0\]\.dataPath '\.\.\/secret\.bin' is not a relative path inside the folder: it has a '\.' or '\.\.' part/);
  assert.throws(() => validateBundle({ ...bundleIndex(), builds: [] }), /lists no builds/);
  assert.throws(() => validateChatConfig({ stop_token_ids: [] }), /the document lacks the field 'context_length'/);
});

test("a bundle.json figure that is missing, negative, fractional or huge is named, as is an old version", () => {
  const damaged = (/** @type {(b: any) => void} */ damage) => {
    const doc = bundleIndex();
    damage(doc);
    return () => validateBundle(doc, "m/bundle.json");
  };
  assert.throws(damaged((b) => { delete b.builds[0].download_bytes; }), /^FormatError: m\/bundle.json: build webgpu's download_bytes is missing$/);
  assert.throws(damaged((b) => { b.builds[0].memory.arena_bytes = -5; }),
    /build webgpu's memory.arena_bytes is -5, outside 0 \.\. 2\*\*53 - 1 bytes/);
  assert.throws(damaged((b) => { b.builds[0].memory.total_bytes = JSON.parse("1e400"); }),
    /build webgpu's memory.total_bytes is Infinity, not a whole number of bytes/);
  assert.throws(damaged((b) => { b.builds[0].memory.total_bytes = 2 ** 60; }), /memory.total_bytes is 1152921504606847000, outside/);
  assert.throws(damaged((b) => { b.builds[0].memory.kv_cache_bytes = 1.5; }), /kv_cache_bytes is 1.5, not a whole number/);
  assert.throws(damaged((b) => { b.builds[0].memory.weights_bytes = "7 MB"; }), /weights_bytes is "7 MB", not a whole number/);
  assert.throws(damaged((b) => { b.builds[0].memory.largest_buffer_bytes = null; }), /largest_buffer_bytes is missing/);
  assert.throws(damaged((b) => { delete b.builds[0].memory; }), /build webgpu has no memory figures/);
  assert.throws(damaged((b) => { b.builds[0].tensor_cache = "../../secret.json"; }),
    /build webgpu's tensor_cache "..\/..\/secret.json" is not a relative path inside the model's folder/);
  assert.throws(damaged((b) => { b.version = 1; }), /version 1; this runtime reads version 2: bundle the model again/);
});
