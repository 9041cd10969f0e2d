// The device table (runtime-js/src/devices/index.js): createEngine opens a build's device by its kind
// through DEVICE_OPENERS, and an executable names the kind it runs on; a kind the table lacks is an
// error listing the kinds it has.
import assert from "node:assert/strict";
import { before, test } from "node:test";

import { createEngine, DEVICE_OPENERS, deviceKind, openDevice, VirtualMachine, WasmDevice } from "../../runtime-js/src/tessera.js";
import { bundle, folderFetch, ORIGIN, tinyGGUF } from "../browser/bundle.mjs";

test("an executable's device kind comes from its kernels' backend, or its devices when split", () => {
  const kernel = (backend) => ({ backend });
  assert.equal(deviceKind({ kernels: [kernel("wgsl")], target: { backend: "wgsl" } }), "webgpu");
  assert.equal(deviceKind({ kernels: [kernel("c-wasm")], target: { backend: "c-wasm" } }), "wasm");
  assert.equal(deviceKind({ kernels: [], target: { backend: "c-wasm" } }), "wasm");
  assert.equal(deviceKind({ kernels: [kernel("wgsl")], devices: [{}, {}] }), "split");
});

test("a kind the table lacks is refused, listing the kinds it has", async () => {
  await assert.rejects(openDevice({ kernels: [{ backend: "metal" }] }),
    /^DeviceError: this runtime has no metal device \(it has webgpu, wasm, split\)$/);
  assert.ok(await openDevice({ kernels: [{ backend: "c-wasm" }] }) instanceof WasmDevice);
});

test("a device refuses an executable whose kernels are another backend's, naming the kernel", async () => {
  const exe = { kernels: [{ name: "k_add", backend: "wgsl" }], functions: {}, constants: [] };
  await assert.rejects(VirtualMachine.create(new WasmDevice(), exe, new Map(), new Map()),
    /^DeviceError: kernel k_add is for the wgsl backend; the wasm device runs c-wasm$/);
});

let site;

before(() => {
  site = bundle("tiny-site", tinyGGUF());
});

test("createEngine opens the build's device through the table", async () => {
  const opened = [];
  const open = DEVICE_OPENERS.wasm;
  DEVICE_OPENERS.wasm = async (exe, options) => {
    const device = await open(exe, options);
    opened.push(device);
    return device;
  };
  try {
    const engine = await createEngine(`${ORIGIN}models/tiny/`, { fetchFn: folderFetch(site), backend: "wasm" });
    assert.equal(opened.length, 1);
    assert.equal(engine.vm.device, opened[0]);
    assert.equal(engine.device.name, "WebAssembly SIMD on the CPU");
  } finally {
    DEVICE_OPENERS.wasm = open;
  }
});
