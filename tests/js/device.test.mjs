// Device negotiation against fake adapters: a missing feature or limit is named, and the engine then
// falls back to the bundle's WASM build, saying why.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { after, test } from "node:test";

import { createEngine, requestDeviceFor } from "../../runtime-js/src/tessera.js";
import { bundle, tinyGGUF } from "../browser/bundle.mjs";

const original = Object.getOwnPropertyDescriptor(globalThis, "navigator");
let requested = null;

function fakeGPU(adapter) {
  Object.defineProperty(globalThis, "navigator", { configurable: true, value: { gpu: { requestAdapter: async () => adapter } } });
}

function adapter({ features = [], limits = {} } = {}) {
  return {
    features: new Set(features),
    limits: { maxStorageBuffersPerShaderStage: 8, maxComputeInvocationsPerWorkgroup: 256, maxBufferSize: 1 << 28, ...limits },
    info: { description: "Fake Adapter" },
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

test("the engine falls back to WASM and says which WebGPU need was not met", async () => {
  const site = bundle("tiny-site", tinyGGUF());
  const fetchFn = async (url) => {
    try {
      return new Response(await readFile(join(site, new URL(url).pathname)));
    } catch {
      return new Response("", { status: 404 });
    }
  };
  // The tiny model's WebGPU build needs 5 storage buffers per stage; this adapter allows 4.
  fakeGPU(adapter({ limits: { maxStorageBuffersPerShaderStage: 4 } }));
  const engine = await createEngine("http://bundle.test/models/tiny/", { fetchFn });
  assert.equal(engine.device.kind, "wasm");
  assert.match(engine.device.name, /WebGPU: the model needs the WebGPU limit maxStorageBuffersPerShaderStage = \d+; this device allows 4/);
});
