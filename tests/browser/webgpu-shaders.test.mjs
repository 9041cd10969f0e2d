// Chrome's WGSL compiler (Tint) accepts every kernel the Python test suite generated and ran on
// llvmpipe, and one of them computes the right numbers on Chromium's WebGPU.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { after, before, test } from "node:test";

import { openWebGPUPage } from "./chromium.mjs";

const SHADER_FILE = "build/test-shaders.json";
let session;

before(async () => {
  session = await openWebGPUPage();
});
after(async () => session && session.close());

function loadShaders() {
  assert.ok(existsSync(SHADER_FILE), `${SHADER_FILE} is missing: the Python kernel tests write it (make test)`);
  return JSON.parse(readFileSync(SHADER_FILE, "utf8"));
}

test("every generated kernel compiles in Chromium", async () => {
  const { shaders } = loadShaders();
  const report = await session.page.evaluate(async (shaders) => {
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) return { error: "no WebGPU adapter" };
    const hasF16 = adapter.features.has("shader-f16");
    // Kernels record the features they need; ask for what the adapter offers, as the runtime will.
    const wanted = ["shader-f16", "subgroups"].filter((name) => adapter.features.has(name));
    const device = await adapter.requestDevice({ requiredFeatures: wanted });
    const failures = [];
    let compiled = 0;
    let skipped = 0;
    for (const shader of shaders) {
      if (shader.needs_f16 && !hasF16) { skipped++; continue; }
      const module = device.createShaderModule({ code: shader.source });
      const info = await module.getCompilationInfo();
      const errors = info.messages.filter((m) => m.type === "error");
      if (errors.length) {
        failures.push({ name: shader.name, errors: errors.map((m) => `${m.lineNum}:${m.linePos} ${m.message}`) });
        continue;
      }
      try {
        await device.createComputePipelineAsync({ layout: "auto", compute: { module, entryPoint: shader.entry_point } });
        compiled++;
      } catch (error) {
        failures.push({ name: shader.name, errors: [String(error)] });
      }
    }
    return { compiled, skipped, failures, adapter: adapter.info ? adapter.info.description || adapter.info.vendor : "" };
  }, shaders);
  assert.equal(report.error, undefined, report.error);
  assert.deepEqual(report.failures, []);
  assert.ok(report.compiled >= shaders.length / 2, `compiled ${report.compiled} of ${shaders.length}`);
  console.log(`compiled ${report.compiled} kernels in Chromium, ${report.skipped} need shader-f16 (${report.adapter})`);
});

test("a softmax kernel (subgroup reduction) runs in Chromium and matches numpy", async () => {
  const { example } = loadShaders();
  const got = await session.page.evaluate(async (ex) => {
    const adapter = await navigator.gpu.requestAdapter();
    const device = await adapter.requestDevice({ requiredFeatures: ex.features });
    const module = device.createShaderModule({ code: ex.source });
    const pipeline = await device.createComputePipelineAsync({ layout: "auto", compute: { module, entryPoint: ex.entry_point } });
    const input = new Float32Array(ex.input);
    const storage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
    const inBuffer = device.createBuffer({ size: input.byteLength, usage: storage });
    device.queue.writeBuffer(inBuffer, 0, input);
    const outBuffer = device.createBuffer({ size: input.byteLength, usage: storage });
    const params = device.createBuffer({ size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(params, 0, new Int32Array([...ex.scalars, 0, 0, 0].slice(0, 4)));
    const resources = [inBuffer, outBuffer, params];
    const bindGroup = device.createBindGroup({
      layout: pipeline.getBindGroupLayout(0),
      entries: resources.map((buffer, binding) => ({ binding, resource: { buffer } })),
    });
    const readback = device.createBuffer({ size: input.byteLength, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bindGroup);
    pass.dispatchWorkgroups(...ex.grid);
    pass.end();
    encoder.copyBufferToBuffer(outBuffer, 0, readback, 0, input.byteLength);
    device.queue.submit([encoder.finish()]);
    await readback.mapAsync(GPUMapMode.READ);
    return Array.from(new Float32Array(readback.getMappedRange()));
  }, example);
  assert.equal(got.length, example.expected.length);
  const worst = Math.max(...got.map((v, i) => Math.abs(v - example.expected[i])));
  assert.ok(worst < 1e-5, `max |chromium - numpy| = ${worst}`);
});
