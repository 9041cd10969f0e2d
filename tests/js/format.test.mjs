// The runtime refuses files that are not what they claim, with a sentence that names the problem.
import assert from "node:assert/strict";
import { test } from "node:test";

import { validateBundle, validateChatConfig, validateExecutable, validateTensorCache } from "../../runtime-js/src/format.js";

const executable = () => ({
  format: "tessera-executable", version: 1, target: { kind: "webgpu" }, constants: [],
  kernels: [{ name: "k", wgsl: "", entry_point: "k", bindings: [], scalars: [], grid: ["1", "1", "1"] }],
  functions: { main: { params: [], code: [], tensors: {}, locations: {}, memory: {}, symbols: {} } },
});
const tensorCache = () => ({
  format: "tessera-tensor-cache", version: 1,
  records: [{ dataPath: "params_shard_0.bin", nbytes: 64, sha256: "a".repeat(64),
    records: [{ name: "w", byteOffset: 0, nbytes: 64 }] }],
});

test("well-formed files pass", () => {
  assert.ok(validateExecutable(executable()));
  assert.ok(validateTensorCache(tensorCache()));
  assert.ok(validateBundle({ format: "tessera-bundle", version: 1, builds: [{ path: "webgpu/", kind: "webgpu" }],
    tokenizer: "webgpu/tokenizer.json", chat_config: "webgpu/chat-config.json" }));
  assert.ok(validateChatConfig({ context_length: 1024, stop_token_ids: [2] }));
});

test("each kind of bad file is named", () => {
  assert.throws(() => validateExecutable({ ...executable(), version: 2 }, "x/executable.json"),
    /x\/executable.json: format version 2; this runtime reads version 1: rebuild the bundle/);
  assert.throws(() => validateExecutable({ format: "gguf" }), /not a Tessera executable/);
  assert.throws(() => validateExecutable({ ...executable(), target: { kind: "vulkan" } }), /built for vulkan, not webgpu/);
  const noGrid = executable();
  delete noGrid.kernels[0].grid;
  assert.throws(() => validateExecutable(noGrid), /kernel 0 has no grid/);
  const outside = tensorCache();
  outside.records[0].records[0].nbytes = 128;
  assert.throws(() => validateTensorCache(outside), /tensor w \(bytes 0\.\.128\) lies outside shard params_shard_0.bin of 64 bytes/);
  const escape = tensorCache();
  escape.records[0].dataPath = "../secret.bin";
  assert.throws(() => validateTensorCache(escape), /bad shard path/);
  assert.throws(() => validateBundle({ format: "tessera-bundle", version: 1, builds: [] }), /lists no builds/);
  assert.throws(() => validateChatConfig({ stop_token_ids: [] }), /context_length is missing/);
});
