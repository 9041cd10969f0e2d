// Every generated WGSL kernel, f16 included, through Tint's checks in Dawn's null backend (npm
// `webgpu`): what Chromium cannot check here for want of shader-f16 (shaders.mjs says what each
// place checks).
import assert from "node:assert/strict";
import { test } from "node:test";

import { create as createDawn, globals as dawnGlobals } from "webgpu";

import { compileAll, loadShaders } from "./shaders.mjs";

Object.assign(globalThis, dawnGlobals);

// Held by the module, for the life of the process: dawn.node aborts or segfaults (most runs here)
// when the object `create` returned is collected while its adapter and device are in use.
const gpu = createDawn(["backend=null"]);

test("every kernel, f16 included, passes Tint's WGSL checks and Dawn's pipeline checks (null backend)", async () => {
  const { shaders, f16 } = loadShaders();
  const adapter = await gpu.requestAdapter();
  assert.ok(adapter, "dawn.node offered no null-backend adapter");
  assert.ok(adapter.features.has("shader-f16") && adapter.features.has("subgroups"));
  // The null adapter's limits are WebGPU's defaults, and every kernel fits them today.
  const device = await adapter.requestDevice({ requiredFeatures: ["shader-f16", "subgroups"] });
  const report = await compileAll(device, shaders);
  // The check is live: an f16 kernel with an f32 value where an f16 belongs is refused.
  const broken = { ...f16[0], source: `${f16[0].source}\nfn tessera_broken() -> f16 { return 1.0f; }\n` };
  const control = await compileAll(device, [broken]);
  device.destroy();
  assert.deepEqual(report.failures, []);
  assert.equal(report.compiled, shaders.length);
  assert.equal(control.compiled, 0);
  assert.match(control.failures[0].errors.join("\n"), /return statement type must match/);
  console.log(`Dawn's null backend (Tint) took all ${shaders.length} kernels, ${f16.length} of them f16`);
});
