// float16 tensors through runtime-js on the WASM device in Node: a graph imported from ONNX
// (tests/js/float16-fixtures.py) with a float16 input and weight, an f16 add and casts both ways. The
// WASM kernels keep f16 tensors as halves and compute them as floats, rounded to half as a GPU's f16
// arithmetic is (codegen/c); the host holds a half's bits in a Uint16Array. Every result is compared
// bit for bit with numpy's (NaN: any NaN).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { before, test } from "node:test";
import { pathToFileURL } from "node:url";

import { InferenceSession, Tensor } from "../../runtime-js/src/tessera.js";
import { fileFetch, NO_CACHE, ROOT, tessera } from "../browser/bundle.mjs";

const FOLDER = join(ROOT, "build", "float16-js");
let cases;

before(() => {
  tessera([join(ROOT, "tests", "js", "float16-fixtures.py"), FOLDER], "python");
  cases = JSON.parse(readFileSync(join(FOLDER, "cases.json"), "utf8"));
});

/** A tensor of cases.json's bits: a float16 one takes them as they are, a float32 one as its bytes. */
function tensorOf({ type, bits, dims }) {
  const data = type === "float16" ? Uint16Array.from(bits) : new Float32Array(Uint32Array.from(bits).buffer);
  return new Tensor(type, data, dims);
}

/** A result's bits, NaN as null (its payload is the kernel's business). */
function bitsOf(tensor) {
  const bits = tensor.type === "float16" ? tensor.data : new Uint32Array(tensor.data.buffer, tensor.data.byteOffset,
    tensor.data.length);
  const nan = (b) => (tensor.type === "float16" ? (b & 0x7c00) === 0x7c00 && (b & 0x3ff) !== 0
    : (b & 0x7f800000) === 0x7f800000 && (b & 0x7fffff) !== 0);
  return [...bits].map((b) => (nan(b) ? null : b));
}

test("a WASM build with float16 inputs, weights and results runs in runtime-js and matches numpy bit for bit", async () => {
  const { inputs, outputs: expected } = cases.halves;
  const url = pathToFileURL(join(FOLDER, "wasm", "halves")).href + "/";
  const session = await InferenceSession.create(url, { fetchFn: fileFetch, cache: NO_CACHE });
  assert.deepEqual(session.inputMetadata.map((m) => m.type), ["float16", "float32"]);
  const outputs = await session.run(Object.fromEntries(Object.entries(inputs).map(([name, t]) => [name, tensorOf(t)])));
  for (const [name, want] of Object.entries(expected)) {
    const got = outputs[name];
    assert.equal(got.type, want.type, name);
    assert.deepEqual([...got.dims], want.dims, name);
    assert.deepEqual(bitsOf(got), bitsOf(tensorOf(want)), name);
  }
  await session.release();
});
