// int8, uint8 and bool tensors through runtime-js on the WASM device in Node: a graph imported from ONNX
// (tests/js/narrow-ints-fixtures.py) with int8 and uint8 inputs, an int8 and a bool weight, and results
// that wrap. On a device such tensors are one 32-bit word per element (int8 sign-extended, uint8
// zero-extended, bool 0 or 1: docs/kernels.md), on the host bytes: inputs and weights are widened on
// upload and results narrowed on read-back (the low byte, as numpy's astype keeps), through both the
// InferenceSession and the VirtualMachine of loadBuild, planned and interpreted alike.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { before, test } from "node:test";
import { pathToFileURL } from "node:url";

import { fromDeviceBytes, HostTensor, toDeviceBytes } from "../../runtime-js/src/host.js";
import { InterpretedFunction } from "../../runtime-js/src/interpreter.js";
import { InferenceSession, loadBuild, openDevice, Tensor, VirtualMachine } from "../../runtime-js/src/tessera.js";
import { ROOT, tessera } from "../browser/bundle.mjs";

const FOLDER = join(ROOT, "build", "narrow-ints-js");
const NO_CACHE = { kind: "none", get: async () => undefined, put: async () => undefined };
let cases;

async function fileFetch(url) {
  try {
    return new Response(await readFile(new URL(url)));
  } catch {
    return new Response("not found", { status: 404 });
  }
}

const urlOf = (target) => pathToFileURL(join(FOLDER, target, "narrow")).href + "/";

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

test("an InferenceSession takes int8 and uint8 feeds and gives numpy's wrapped results, weights included", async () => {
  const session = await InferenceSession.create(urlOf("wasm"), { fetchFn: fileFetch, cache: NO_CACHE });
  assert.deepEqual(session.inputMetadata.map((m) => m.type), ["int8", "uint8"]);
  const feeds = Object.fromEntries(Object.entries(cases.inputs).map(([name, { type, data, dims }]) => [name, new Tensor(type, data, dims)]));
  assert.ok(feeds.a.data instanceof Int8Array && feeds.b.data instanceof Uint8Array);
  const outputs = await session.run(feeds);
  for (const [name, expected] of Object.entries(cases.outputs)) {
    const got = outputs[name];
    assert.equal(got.type, expected.type, name);
    assert.deepEqual([...got.dims], expected.dims, name);
    assert.deepEqual([...got.data], expected.data, name);
  }
  assert.ok(outputs.sum.data instanceof Int8Array && outputs.poly.data instanceof Uint8Array && outputs.flags.data instanceof Uint8Array);
  await session.release();
});

test("the VirtualMachine of loadBuild widens int8 and bool weights, planned or interpreted, with or without the loader's dtype", async () => {
  const loaded = await loadBuild(urlOf("wasm"), { fetchFn: fileFetch, cache: NO_CACHE });
  assert.equal(loaded.weights.get("weight").dtype, "int8");  // the tensor cache's record, passed on to the VM
  const bare = new Map([...loaded.weights].map(([name, view]) => [name, new Uint8Array(view.buffer, view.byteOffset, view.byteLength)]));
  const args = [new HostTensor(Int8Array.from(cases.inputs.a.data), [7]), new HostTensor(Uint8Array.from(cases.inputs.b.data), [7], "uint8")];
  for (const [weights, interpreted] of [[loaded.weights, false], [bare, false], [loaded.weights, true]]) {
    const vm = await VirtualMachine.create(await openDevice(loaded.executable), loaded.executable, weights, loaded.modules);
    if (interpreted) vm.functions.set("main", new InterpretedFunction(vm.interpreter, "main"));
    const results = await vm.run("main", ...args);
    const what = interpreted ? "interpreted" : weights === bare ? "weights without a dtype" : "planned";
    Object.values(cases.outputs).forEach((expected, i) => {
      assert.equal(results[i].dtype, expected.type, what);
      assert.deepEqual([...results[i].data], expected.data, `${what}: output ${i}`);
    });
    vm.device.destroy?.();
  }
});
