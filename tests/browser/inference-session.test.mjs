// InferenceSession in Chromium: the executables of tests/js/inference-session-fixtures.py, compiled for
// WebGPU (SwiftShader here) and for WASM, give the reference outputs (numpy, the reference interpreter,
// onnx's reference evaluator) on the page's thread and in a Web Worker; "auto" runs the first build
// whose device opens; a feed that does not fit is an error naming the input in the Worker form too.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { ROOT, tessera } from "./bundle.mjs";
import { openWebGPUPage, serveFolders } from "./chromium.mjs";

const FOLDER = join(ROOT, "build", "inference-session-browser");
const MOBILENET = join(ROOT, "build", "inference-session-mobilenet");
const SERVED = ["runtime-js/src/", "build/inference-session-browser/", "build/inference-session-mobilenet/"].map((p) => join(ROOT, p));
let session;

/** In the page: every call of ``program`` through a session opened with ``options`` on the build ``target``
 * (or, for an array, on those builds); the largest relative error past tolerance, as text, or null. */
async function runInPage([program, targets, options]) {
  const { InferenceSession, Tensor } = await import("/runtime-js/src/tessera.js");
  const cases = await (await fetch("/build/inference-session-browser/cases.json")).json();
  const urls = targets.map((t) => `/build/inference-session-browser/${t}/${program}/`);
  const s = await InferenceSession.create(urls.length === 1 ? urls[0] : urls, options);
  const { calls, rtol = 1e-6, atol = 1e-6 } = cases[program];
  const problems = [];
  const started = performance.now();
  for (const [index, call] of calls.entries()) {
    const feeds = Object.fromEntries(Object.entries(call.inputs).map(([name, t]) =>
      [name, new Tensor(t.type, t.type === "int64" ? t.data.map(BigInt) : t.data, t.dims)]));
    const outputs = await s.run(feeds);
    s.outputNames.forEach((name, i) => {
      const got = outputs[name], want = call.outputs[i];
      if (got.type !== want.type || got.dims.join() !== want.dims.join()) problems.push(`${index} ${name}: ${got.type} ${got.dims}`);
      [...got.data].map(Number).forEach((v, k) => {
        if (!(Math.abs(v - want.data[k]) <= atol + rtol * Math.abs(want.data[k]))) problems.push(`${index} ${name}[${k}] ${v} != ${want.data[k]}`);
      });
    });
  }
  const ms = performance.now() - started;
  let fault = null;
  try {
    await s.run({});
  } catch (error) {
    fault = `${error.name}: ${error.message} (${error.input})`;
  }
  const device = s.device.kind;
  await s.release();
  return { problems: problems.slice(0, 5), device, fault, ms };
}

before(async () => {
  tessera([join(ROOT, "tests", "js", "inference-session-fixtures.py"), FOLDER, "webgpu", "wasm"], "python");
  tessera([join(ROOT, "tests", "js", "inference-session-fixtures.py"), "--mobilenet", MOBILENET], "python");
  session = await openWebGPUPage(serveFolders(ROOT, SERVED));
});

after(async () => {
  await session?.close();
});

const RUNS = [
  ["onnx", ["webgpu"], { device: "webgpu" }, "webgpu"],
  ["cnn", ["webgpu"], { device: "auto" }, "webgpu"],
  ["pair", ["webgpu"], {}, "webgpu"],
  ["onnx", ["wasm"], { device: "wasm" }, "wasm"],
  ["onnx", ["webgpu", "wasm"], { device: "wasm" }, "wasm"],  // the WebGPU build passed over
  ["cnn", ["webgpu"], { device: "webgpu", worker: true }, "webgpu"],
  ["onnx", ["wasm"], { worker: true }, "wasm"],
];

for (const [program, targets, options, device] of RUNS) {
  test(`${program} on ${targets.join("+")} ${JSON.stringify(options)}`, { timeout: 180_000 }, async () => {
    const result = await session.page.evaluate(runInPage, [program, targets, options]);
    assert.deepEqual(result.problems, []);
    assert.equal(result.device, device);
    const first = program === "pair" ? "x0" : program === "cnn" ? "image" : "pixel_values";
    assert.match(result.fault, new RegExp(`^InferenceSessionError: input '${first}' is missing .*\\(${first}\\)$`));
  });
}

// MobileNetV2 at its real size on WASM, in a Worker. Not on WebGPU here: on SwiftShader one run took 7 minutes
// (2 busy cores); the WebGPU path is checked on the small programs above.
test("MobileNetV2 on WASM in a Worker gives onnxruntime's logits", { timeout: 300_000 }, async () => {
  const result = await session.page.evaluate(async () => {
    const { InferenceSession, Tensor } = await import("/runtime-js/src/tessera.js");
    const base = "/build/inference-session-mobilenet/";
    const s = await InferenceSession.create(`${base}wasm/`, { worker: true });
    const pixels = new Float32Array(await (await fetch(`${base}input-2.bin`)).arrayBuffer());
    const started = performance.now();
    const outputs = await s.run({ pixel_values: new Tensor("float32", pixels, [2, 3, 224, 224]) });
    const ms = performance.now() - started;
    const expected = await (await fetch(`${base}logits-2.json`)).json();
    const got = [...outputs[s.outputNames[0]].data];
    await s.release();
    return { dims: [...outputs[s.outputNames[0]].dims], worst: Math.max(...got.map((v, i) => Math.abs(v - expected[i]) / (1e-3 + Math.abs(expected[i])))), ms, kept: pixels.length };
  });
  assert.deepEqual(result.dims, [2, 10]);
  assert.ok(result.worst <= 1e-3, JSON.stringify(result));
  assert.equal(result.kept, 2 * 3 * 224 * 224);  // the caller's tensor is not detached by the transfer
});
