// The tensor API in Chromium (issue 36): the same builds of ResNet and BERT that Python, C and Node run
// (tests/js/tensor-api-models-fixtures.py: transformers' classes, random weights, torch.onnx.export) give
// onnxruntime's outputs through InferenceSession on WebGPU (SwiftShader here) and on WASM (on the page's
// thread and in a Web Worker), at two sizes from one build. Small configs by default;
// TESSERA_TENSOR_API_MODELS=long runs ResNet-50 and BERT-base on WASM only (a real-size run on SwiftShader
// takes minutes).
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { ROOT, tessera } from "./bundle.mjs";
import { openWebGPUPage, serveFolders } from "./chromium.mjs";

const LONG = process.env.TESSERA_TENSOR_API_MODELS === "long";
const SUBFOLDER = `build/tensor-api-models/${LONG ? "long" : "small"}/`;
let session;

/** In the page: every call of ``name`` on its ``target`` build through a session opened with ``options``;
 * the worst error as a multiple of the tolerance, and the first problems. */
async function runInPage([base, name, target, options]) {
  const { InferenceSession, Tensor } = await import("/runtime-js/src/tessera.js");
  const arrays = { float32: Float32Array, int64: BigInt64Array };
  const load = async ({ type, dims, file }) => new Tensor(type, new arrays[type](await (await fetch(base + file)).arrayBuffer()), dims);
  const model = (await (await fetch(`${base}cases.json`)).json())[name];
  const s = await InferenceSession.create(`${base}${name}/${target}/`, options);
  const problems = [];
  let worst = 0;
  const started = performance.now();
  for (const call of model.calls) {
    const feeds = {};
    for (const [input, t] of Object.entries(call.inputs)) feeds[input] = await load(t);
    const outputs = await s.run(feeds);
    for (const want of call.outputs) {
      const got = outputs[want.name];
      if (!got || got.dims.join() !== want.dims.join()) {
        problems.push(`${want.name}: ${got?.type} ${got?.dims}`);
        continue;
      }
      const expected = (await load(want)).data;
      got.data.forEach((v, i) => {
        const ratio = Math.abs(v - expected[i]) / (want.atol + model.rtol * Math.abs(expected[i]));
        if (!(ratio <= worst)) worst = ratio;
        if (!(ratio <= 1) && problems.length < 5) problems.push(`${JSON.stringify(call.sizes)} ${want.name}[${i}] ${v} != ${expected[i]}`);
      });
    }
  }
  const ms = performance.now() - started;
  const names = [s.inputNames, s.outputNames];
  const device = s.device.kind;
  await s.release();
  return { problems, worst, device, names, ms, wanted: [model.inputs, model.outputs] };
}

before(async () => {
  tessera([join(ROOT, "tests", "js", "tensor-api-models-fixtures.py"), join(ROOT, SUBFOLDER), ...(LONG ? ["--long"] : [])], "python");
  session = await openWebGPUPage(serveFolders(ROOT, [join(ROOT, "runtime-js/src/"), join(ROOT, SUBFOLDER)]));
});

after(async () => {
  await session?.close();
});

const RUNS = [
  ["wasm", { device: "wasm" }],
  ["wasm", { device: "wasm", worker: true }],
  // WebGPU on the page's thread only: a SwiftShader run is 10-20 s, and WebGPU in a Worker is
  // tests/browser/inference-session.test.mjs's
  ...(LONG ? [] : [["webgpu", { device: "webgpu" }]]),
];

for (const name of ["resnet", "bert"]) {
  for (const [target, options] of RUNS) {
    test(`${name} on ${target} ${JSON.stringify(options)} gives onnxruntime's outputs`, { timeout: 1_800_000 }, async () => {
      const result = await session.page.evaluate(runInPage, [`/${SUBFOLDER}`, name, target, options]);
      assert.deepEqual(result.problems, [], JSON.stringify(result));
      assert.ok(result.worst <= 1, JSON.stringify(result));
      assert.equal(result.device, target);
      assert.deepEqual(result.names, result.wanted);
    });
  }
}
