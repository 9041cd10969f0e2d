// The tensor API in Node (issue 36): the wasm builds of ResNet and BERT that tests/test_tensor_api_models.py
// runs in Python and through C (tests/js/tensor-api-models-fixtures.py: transformers' classes, random weights,
// torch.onnx.export, one build per target) give onnxruntime's outputs through InferenceSession at two sizes.
// Small configs by default; TESSERA_TENSOR_API_MODELS=long runs ResNet-50 and BERT-base (pytest -m long does).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { before, test } from "node:test";
import { pathToFileURL } from "node:url";

import { InferenceSession, Tensor } from "../../runtime-js/src/tessera.js";
import { fileFetch, NO_CACHE, ROOT, tessera } from "../browser/bundle.mjs";

const LONG = process.env.TESSERA_TENSOR_API_MODELS === "long";
const FOLDER = join(ROOT, "build", "tensor-api-models", LONG ? "long" : "small");
const ARRAYS = { float32: Float32Array, int64: BigInt64Array };
let cases;

/** A .bin of the fixtures as a Tensor of its type and dims. */
function tensorOf({ type, dims, file }) {
  const bytes = readFileSync(join(FOLDER, file));
  return new Tensor(type, new ARRAYS[type](bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)), dims);
}

before(() => {
  tessera([join(ROOT, "tests", "js", "tensor-api-models-fixtures.py"), FOLDER, ...(LONG ? ["--long"] : [])], "python");
  cases = JSON.parse(readFileSync(join(FOLDER, "cases.json"), "utf8"));
});

for (const name of ["resnet", "bert"]) {
  test(`${name} on WASM gives onnxruntime's outputs at two sizes from one build`, { timeout: 1_800_000 }, async () => {
    const model = cases[name];
    const session = await InferenceSession.create(pathToFileURL(join(FOLDER, name, "wasm")).href + "/",
      { device: "wasm", fetchFn: fileFetch, cache: NO_CACHE });
    assert.deepEqual(session.inputNames, model.inputs);
    assert.deepEqual(session.outputNames, model.outputs);
    for (const call of model.calls) {
      const feeds = Object.fromEntries(Object.entries(call.inputs).map(([input, t]) => [input, tensorOf(t)]));
      const outputs = await session.run(feeds);
      for (const want of call.outputs) {
        const got = outputs[want.name];
        const what = `${name} at ${JSON.stringify(call.sizes)}, ${want.name}`;
        assert.equal(got.type, "float32", what);
        assert.deepEqual([...got.dims], want.dims, what);
        const expected = tensorOf(want).data;
        let worst = 0, at = -1;
        got.data.forEach((v, i) => {
          const ratio = Math.abs(v - expected[i]) / (want.atol + model.rtol * Math.abs(expected[i]));
          if (!(ratio <= worst)) [worst, at] = [ratio, i];
        });
        assert.ok(worst <= 1, `${what}[${at}]: ${got.data[at]}, expected ${expected[at]} (${worst.toFixed(2)}x the tolerance)`);
      }
    }
    await session.release();
  });
}
