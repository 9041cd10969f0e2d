// InferenceSession and Tensor (runtime-js/src/inference-session.js) on the WASM device in Node: the
// executables of tests/js/inference-session-fixtures.py (a function with a symbolic size shared by three
// inputs, the conformance suite's CNN, an ONNX classifier with a symbolic batch) give the outputs of numpy,
// the reference interpreter and onnx's reference evaluator; their inputs and outputs are described as
// ONNX Runtime Web describes them; and every feed that does not fit is an error naming the input, as in
// Python (tests/test_inference_session.py).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { before, test } from "node:test";
import { pathToFileURL } from "node:url";

import { InferenceSession, InferenceSessionError, Tensor } from "../../runtime-js/src/tessera.js";
import { fileFetch, NO_CACHE, ROOT, tessera } from "../browser/bundle.mjs";

const FOLDER = join(ROOT, "build", "inference-session-js");
let cases;

const urlOf = (target, program) => pathToFileURL(join(FOLDER, target, program)).href + "/";
const open = (program, options = {}) => InferenceSession.create(urlOf("wasm", program), { fetchFn: fileFetch, cache: NO_CACHE, ...options });
const tensorOf = ({ type, data, dims }) => new Tensor(type, type === "int64" ? data.map(BigInt) : data, dims);

/** Each output close to its reference (elementwise, numpy's allclose). */
function assertClose(got, expected, rtol, atol, what) {
  assert.equal(got.type, expected.type, what);
  assert.deepEqual([...got.dims], expected.dims, what);
  const values = [...got.data].map(Number);
  values.forEach((v, i) => {
    const want = expected.data[i];
    assert.ok(Math.abs(v - want) <= atol + rtol * Math.abs(want), `${what}[${i}]: ${v}, expected ${want}`);
  });
}

before(() => {
  tessera([join(ROOT, "tests", "js", "inference-session-fixtures.py"), FOLDER, "wasm", "webgpu"], "python");
  cases = JSON.parse(readFileSync(join(FOLDER, "cases.json"), "utf8"));
});

test("Tensor: ONNX Runtime Web's constructor forms, and data that does not fill its dims", () => {
  const t = new Tensor("float32", new Float32Array(6), [2, 3]);
  assert.deepEqual([t.type, [...t.dims], t.size], ["float32", [2, 3], 6]);
  assert.equal(new Tensor(new Int32Array(4), [2, 2]).type, "int32");
  assert.equal(new Tensor(BigInt64Array.of(1n, 2n)).dims[0], 2);
  assert.deepEqual([...new Tensor("int64", [1, 2, 3], [3]).data], [1n, 2n, 3n]);
  assert.deepEqual([...new Tensor("bool", [true, false], [2]).data], [1, 0]);
  assert.equal(new Tensor("float16", new Uint16Array(2), [2]).type, "float16");
  assert.equal(new Tensor("uint8", new Uint8Array(3), [3]).type, "uint8");
  assert.throws(() => new Tensor("float32", new Float32Array(5), [2, 3]), /dims \[2, 3\] hold 6 elements; the data has 5/);
  assert.throws(() => new Tensor("int64", new Int32Array(2), [2]), /a int64 Tensor's data is a BigInt64Array/);
  assert.throws(() => new Tensor("complex64", new Float32Array(2), [2]), /unknown tensor type "complex64"/);
  assert.throws(() => new Tensor("float32", new Float32Array(2), [2, -1]), /whole numbers of 0 and up/);
});

test("inputs and outputs are described as ONNX Runtime Web describes them", async () => {
  const cnn = await open("cnn");
  assert.deepEqual(cnn.inputNames, ["image"]);
  assert.deepEqual(cnn.outputNames, ["output0"]);  // the CNN's executable records no result names
  assert.deepEqual(cnn.inputMetadata[0], { name: "image", isTensor: true, type: "float32", ortType: "tensor(float)",
    shape: [1, 3, 32, 32], dims: [1, 3, 32, 32] });
  assert.deepEqual(cnn.device, { kind: "wasm", name: "WebAssembly SIMD on the CPU" });
  const pair = await open("pair");
  assert.deepEqual(pair.inputMetadata.map((m) => [m.name, m.type, m.shape]),
    [["x0", "float32", ["n", 4]], ["x1", "float32", ["n", 4]], ["x2", "int64", ["n"]]]);
  assert.deepEqual(pair.outputMetadata.map((m) => [m.name, m.type, m.shape]),
    [["output0", "float32", ["n", 4]], ["output1", "float32", ["n", 4]], ["output2", "int64", ["n"]]]);
  assert.deepEqual(pair.symbolBounds, { n: 8 });
  const onnx = await open("onnx");
  assert.deepEqual(onnx.inputMetadata.map((m) => [m.name, m.shape]), [["pixel_values", ["batch", 3, 8, 8]]]);
  // the graph's output names, where the importer records them (result_names), else output0 ...
  const record = JSON.parse(readFileSync(join(FOLDER, "wasm", "onnx", "executable.json"), "utf8")).functions.main;
  const named = record.result_names ? "probabilities" : "output0";
  assert.deepEqual(onnx.outputMetadata.map((m) => [m.name, m.shape]), [[named, ["batch", 5]]]);
  await Promise.all([cnn.release(), pair.release(), onnx.release()]);
});

for (const program of ["pair", "cnn", "onnx"]) {
  test(`${program}: run gives the reference outputs`, async () => {
    const session = await open(program);
    const { calls, rtol = 1e-6, atol = 1e-6 } = cases[program];
    for (const [index, call] of calls.entries()) {
      const feeds = Object.fromEntries(Object.entries(call.inputs).map(([name, t]) => [name, tensorOf(t)]));
      const outputs = await session.run(feeds);
      assert.deepEqual(Object.keys(outputs), session.outputNames);
      session.outputNames.forEach((name, i) => assertClose(outputs[name], call.outputs[i], rtol, atol, `${program} call ${index} ${name}`));
    }
    await session.release();
    await assert.rejects(session.run({}), /this session was released/);
  });
}

test("fetches choose outputs; runs started together queue", async () => {
  const session = await open("pair");
  const x = new Tensor("float32", Float32Array.from({ length: 8 }, (_, i) => i), [2, 4]);
  const ids = new Tensor("int64", [5, 7], [2]);
  const only = await session.run({ x0: x, x1: x, x2: ids }, ["output2", "output0"]);
  assert.deepEqual(Object.keys(only), ["output2", "output0"]);
  assert.deepEqual([...only.output2.data], [10n, 14n]);
  const runs = await Promise.all([1, 2, 3].map((n) => session.run({ x0: new Tensor("float32", new Float32Array(4 * n).fill(n), [n, 4]),
    x1: new Tensor("float32", new Float32Array(4 * n).fill(1), [n, 4]), x2: new Tensor("int64", new BigInt64Array(n), [n]) })));
  runs.forEach((out, i) => assert.deepEqual([...out.output0.data], Array(4 * (i + 1)).fill(i + 2)));
  await assert.rejects(session.run({ x0: x, x1: x, x2: ids }, ["logits"]), /unknown output 'logits'; the outputs are output0, output1, output2/);
  await session.release();
});

test("every feed that does not fit is an error naming the input", async () => {
  const session = await open("pair");
  const f32 = (n, cols = 4) => new Tensor("float32", new Float32Array(n * cols), [n, cols]);
  const i64 = (n) => new Tensor("int64", new BigInt64Array(n), [n]);
  const faults = [
    [{ x0: f32(3), x2: i64(3) }, "x1", "input 'x1' is missing (the inputs are x0, x1, x2)"],
    [{ x0: f32(3), x1: f32(3), x2: i64(3), z: f32(3) }, "z", "unknown input 'z'; the inputs are x0, x1, x2"],
    [{ x0: [1, 2], x1: f32(3), x2: i64(3) }, "x0", "input 'x0': expected a Tensor, got an array"],
    [{ x0: new Tensor("int32", new Int32Array(12), [3, 4]), x1: f32(3), x2: i64(3) }, "x0",
      "input 'x0': expected type float32 (tensor(float)), got int32 (no implicit casts)"],
    [{ x0: new Tensor("float32", new Float32Array(12), [3, 4, 1]), x1: f32(3), x2: i64(3) }, "x0",
      "input 'x0': expected rank 2 (shape (n, 4)), got rank 3 (shape (3, 4, 1))"],
    [{ x0: f32(3, 5), x1: f32(3), x2: i64(3) }, "x0", "input 'x0': expected shape (n, 4), got (3, 5): dimension 1 is 5, not 4"],
    [{ x0: f32(9), x1: f32(9), x2: i64(9) }, "x0",
      "input 'x0': dimension 0 (n) is 9, above its upper bound 8 (the most the executable's memory was planned for)"],
    [{ x0: f32(3), x1: f32(2), x2: i64(3) }, "x1", "input 'x1': dimension 0 is 2, but n = 3 from input 'x0'"],
  ];
  for (const [feeds, input, message] of faults) {
    await assert.rejects(session.run(feeds), (error) => {
      assert.ok(error instanceof InferenceSessionError, String(error));
      assert.equal(error.message, message);
      assert.equal(error.input, input);
      return true;
    });
  }
  await assert.rejects(session.run([f32(1)]), /feeds is an object of input name to Tensor, not an array/);
  await session.release();
});

test("create: an unknown function, device or folder is a clear error", async () => {
  await assert.rejects(open("pair", { function: "decode" }), /the executable has no function "decode" \(functions: main\); pass \{function: NAME\}/);
  await assert.rejects(open("pair", { device: "cuda" }), /unknown device "cuda"; the devices are auto, webgpu, wasm/);
  await assert.rejects(open("pair", { device: "webgpu" }), /runs on WASM, not WebGPU \(compile it with --target webgpu\)/);
  await assert.rejects(open("nowhere"), /missing file .*nowhere\/executable.json/);
  await assert.rejects(InferenceSession.create(urlOf("wasm", "pair"), { worker: true }), /this environment has no Web Workers/);
});

test("auto over a WebGPU and a WASM build: Node has no WebGPU, so the WASM build runs and says why", async () => {
  const session = await InferenceSession.create([urlOf("webgpu", "onnx"), urlOf("wasm", "onnx")], { fetchFn: fileFetch, cache: NO_CACHE });
  assert.equal(session.device.kind, "wasm");
  assert.match(session.passedOver[0], /webgpu\/onnx\/: this browser has no WebGPU/);
  const [call] = cases.onnx.calls;
  const outputs = await session.run({ pixel_values: tensorOf(call.inputs.pixel_values) });
  assertClose(Object.values(outputs)[0], call.outputs[0], 1e-4, 1e-5, "onnx");
  await session.release();
  await assert.rejects(InferenceSession.create(urlOf("webgpu", "onnx"), { fetchFn: fileFetch, cache: NO_CACHE }),
    /this browser has no WebGPU/);
});

test("MobileNetV2 (transformers, random weights, torch.onnx.export) gives onnxruntime's logits at batch 1 and 2", { timeout: 600_000 }, async () => {
  const folder = join(ROOT, "build", "inference-session-mobilenet");
  tessera([join(ROOT, "tests", "js", "inference-session-fixtures.py"), "--mobilenet", folder], "python");
  const session = await InferenceSession.create(pathToFileURL(join(folder, "wasm")).href + "/", { fetchFn: fileFetch, cache: NO_CACHE });
  assert.deepEqual(session.inputMetadata.map((m) => [m.name, m.shape]), [["pixel_values", ["batch", 3, 224, 224]]]);
  assert.deepEqual(session.symbolBounds, { batch: 2 });
  for (const batch of [1, 2]) {
    const pixels = new Float32Array(readFileSync(join(folder, `input-${batch}.bin`)).buffer.slice(0));
    const outputs = await session.run({ pixel_values: new Tensor("float32", pixels, [batch, 3, 224, 224]) });
    const expected = JSON.parse(readFileSync(join(folder, `logits-${batch}.json`), "utf8"));
    const [name] = session.outputNames;
    assertClose(outputs[name], { type: "float32", dims: [batch, 10], data: expected }, 1e-3, 1e-3, `batch ${batch}`);
  }
  await assert.rejects(session.run({ pixel_values: new Tensor("float32", new Float32Array(3 * 3 * 224 * 224), [3, 3, 224, 224]) }),
    /input 'pixel_values': dimension 0 \(batch\) is 3, above its upper bound 2/);
  await session.release();
});
