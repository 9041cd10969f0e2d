// Chromium (Tint, then SwiftShader's pipeline compiler) compiles every generated WGSL kernel its
// adapter can take and refuses the rest only for want of shader-f16; one kernel computes the right
// numbers on Chromium's WebGPU. shaders.mjs says what is checked where (tint-shaders.test.mjs checks
// the f16 kernels with Tint in Dawn's null backend).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { openWebGPUPage } from "./chromium.mjs";
import { compileAll, loadShaders } from "./shaders.mjs";

let session;

before(async () => {
  session = await openWebGPUPage();
});
after(async () => session && session.close());

test("Chromium compiles every kernel its adapter can take, and refuses each f16 kernel only for want of shader-f16", async () => {
  const { shaders, f16, f32 } = loadShaders();
  await session.page.evaluate(`globalThis.compileAll = ${compileAll.toString()}`);
  const report = await session.page.evaluate(async ({ f16, f32 }) => {
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) return { error: "no WebGPU adapter" };
    const hasF16 = adapter.features.has("shader-f16");
    // Kernels record the features they need; ask for what the adapter offers, as the runtime will.
    const wanted = ["shader-f16", "subgroups"].filter((name) => adapter.features.has(name));
    const device = await adapter.requestDevice({ requiredFeatures: wanted });
    const adapterName = adapter.info ? adapter.info.architecture || adapter.info.vendor : "";
    const ran = await globalThis.compileAll(device, hasF16 ? [...f32, ...f16] : f32);
    if (hasF16) return { hasF16, adapterName, ...ran, refused: [] };
    // Without the feature, what a device does with an f16 kernel: the error the runtime's f32
    // fallback exists for, at the module's first line.
    const refused = [];
    for (const shader of f16) {
      const info = await device.createShaderModule({ code: shader.source }).getCompilationInfo();
      refused.push(info.messages.filter((m) => m.type === "error").map((m) => `${m.lineNum}: ${m.message}`).join("; "));
    }
    return { hasF16, adapterName, ...ran, refused };
  }, { f16, f32 });
  assert.equal(report.error, undefined, report.error);
  assert.deepEqual(report.failures, []);
  if (report.hasF16) {
    assert.equal(report.compiled, shaders.length);
  } else {
    assert.equal(report.compiled, f32.length);
    assert.equal(report.refused.length, f16.length);
    const otherwise = report.refused.filter((message) => !/^1: extension 'f16' is not allowed/.test(message));
    assert.deepEqual(otherwise, [], "an f16 kernel refused for something other than the missing shader-f16");
  }
  console.log(`Chromium (${report.adapterName}) compiled ${report.compiled} of ${shaders.length} kernels; ` +
    (report.hasF16 ? "shader-f16 available" : `refused the ${f16.length} f16 kernels: no shader-f16`));
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
