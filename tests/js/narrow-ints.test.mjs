// int8, uint8, int16, uint16, uint64 and bool tensors through runtime-js on the WASM device in Node: graphs
// imported from ONNX (tests/js/narrow-ints-fixtures.py) with int8 and uint8 (or int16, uint16 and uint64)
// inputs, an int8 (int16) and a bool weight, and results that wrap. On a device such tensors are one 32-bit word per element (int8 sign-extended, uint8
// zero-extended, bool 0 or 1: docs/kernels.md), on the host bytes: inputs and weights are widened on
// upload and results narrowed on read-back (the low byte, as numpy's astype keeps), through both the
// InferenceSession and the VirtualMachine of loadBuild, planned and interpreted alike.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { before, test } from "node:test";
import { pathToFileURL } from "node:url";

import { fromDeviceBytes, HostTensor, toDeviceBytes } from "../../runtime-js/src/host.js";
import { InterpretedFunction } from "../../runtime-js/src/interpreter.js";
import { InferenceSession, loadBuild, openDevice, Tensor, VirtualMachine } from "../../runtime-js/src/tessera.js";
import { fileFetch, NO_CACHE, ROOT, tessera } from "../browser/bundle.mjs";

const FOLDER = join(ROOT, "build", "narrow-ints-js");
let cases;

const urlOf = (target, program = "narrow") => pathToFileURL(join(FOLDER, target, program)).href + "/";
const tensorOf = ({ type, data, dims }) => new Tensor(type, data, dims);

before(() => {
  tessera([join(ROOT, "tests", "js", "narrow-ints-fixtures.py"), FOLDER, "wasm"], "python");
  cases = JSON.parse(readFileSync(join(FOLDER, "cases.json"), "utf8"));
});

test("host and device forms: int8 sign-extended, uint8 and uint16 zero-extended, narrowed to the low bits", () => {
  const words = (bytes) => [...new Int32Array(bytes.buffer, 0, bytes.byteLength / 4)];
  assert.deepEqual(words(toDeviceBytes(Int8Array.of(-128, -1, 0, 127), "int8")), [-128, -1, 0, 127]);
  assert.deepEqual(words(toDeviceBytes(Uint8Array.of(0, 128, 255), "uint8")), [0, 128, 255]);
  assert.deepEqual(words(toDeviceBytes(Int16Array.of(-32768, 300), "int16")), [-32768, 300]);
  assert.deepEqual(words(toDeviceBytes(Uint16Array.of(65535), "uint16")), [65535]);
  const raw = new Uint8Array(Int32Array.of(-128, -1, 300, 0x7f).buffer);  // 300: what astype(int8) makes 44
  assert.deepEqual([...fromDeviceBytes(raw, [4], "int8").data], [-128, -1, 44, 127]);
  assert.deepEqual([...fromDeviceBytes(raw, [4], "uint8").data], [128, 255, 44, 127]);
  assert.deepEqual([...fromDeviceBytes(raw, [4], "int16").data], [-128, -1, 300, 127]);
  assert.deepEqual([...fromDeviceBytes(raw, [4], "uint16").data], [65408, 65535, 300, 127]);
  assert.equal(new HostTensor(Uint8Array.of(1, 2), [2], "uint8").dtype, "uint8");
  assert.equal(new HostTensor(Int8Array.of(1, 2), [2]).dtype, "int8");
});

/** Run ``program``'s case through an InferenceSession; its outputs, once each equals numpy's. */
async function runSession(program) {
  const { inputs, outputs: expected } = cases[program];
  const session = await InferenceSession.create(urlOf("wasm", program), { fetchFn: fileFetch, cache: NO_CACHE });
  assert.deepEqual(session.inputMetadata.map((m) => m.type), Object.values(inputs).map((t) => t.type));
  const outputs = await session.run(Object.fromEntries(Object.entries(inputs).map(([name, t]) => [name, tensorOf(t)])));
  for (const [name, want] of Object.entries(expected)) {
    const got = outputs[name];
    assert.equal(got.type, want.type, name);
    assert.deepEqual([...got.dims], want.dims, name);
    assert.deepEqual([...got.data].map(Number), want.data, name);
  }
  await session.release();
  return outputs;
}

test("an InferenceSession takes int8 and uint8 feeds and gives numpy's wrapped results, weights included", async () => {
  assert.ok(tensorOf(cases.narrow.inputs.a).data instanceof Int8Array && tensorOf(cases.narrow.inputs.b).data instanceof Uint8Array);
  const outputs = await runSession("narrow");
  assert.ok(outputs.sum.data instanceof Int8Array && outputs.poly.data instanceof Uint8Array && outputs.flags.data instanceof Uint8Array);
});

test("an InferenceSession takes int16, uint16 and uint64 feeds and gives numpy's results", async () => {
  const outputs = await runSession("wide");
  assert.ok(outputs.sum.data instanceof Int16Array && outputs.poly.data instanceof Uint16Array && outputs.big.data instanceof BigUint64Array);
});

test("the VirtualMachine of loadBuild widens int8 and bool weights, planned or interpreted, with or without the loader's dtype", async () => {
  const loaded = await loadBuild(urlOf("wasm"), { fetchFn: fileFetch, cache: NO_CACHE });
  assert.equal(loaded.weights.get("weight").dtype, "int8");  // the tensor cache's record, passed on to the VM
  const bare = new Map([...loaded.weights].map(([name, view]) => [name, new Uint8Array(view.buffer, view.byteOffset, view.byteLength)]));
  const { inputs, outputs } = cases.narrow;
  const args = [new HostTensor(Int8Array.from(inputs.a.data), [7]), new HostTensor(Uint8Array.from(inputs.b.data), [7], "uint8")];
  for (const [weights, interpreted] of [[loaded.weights, false], [bare, false], [loaded.weights, true]]) {
    const vm = await VirtualMachine.create(await openDevice(loaded.executable), loaded.executable, weights, loaded.modules);
    if (interpreted) vm.functions.set("main", new InterpretedFunction(vm.interpreter, "main"));
    const results = await vm.run("main", ...args);
    const what = interpreted ? "interpreted" : weights === bare ? "weights without a dtype" : "planned";
    Object.values(outputs).forEach((expected, i) => {
      assert.equal(results[i].dtype, expected.type, what);
      assert.deepEqual([...results[i].data], expected.data, `${what}: output ${i}`);
    });
    vm.device.destroy?.();
  }
});
