// A build split across devices (format version 4, docs/format.md "Devices"): runtime-js reads it with
// the Python loader's cross-checks, refuses one that binds a kernel to another device's tensor or names
// a device it does not have, and says which device it lacks. The one VM runs it over a composite
// device (devices/split.js), here of two stand-in devices whose kernels are JS functions; WebGPU and
// WASM together: tests/browser/split.test.mjs.
import assert from "node:assert/strict";
import { test } from "node:test";

import { openDevice, SplitDevice, WasmDevice } from "../../runtime-js/src/devices/index.js";
import { runsOn, validateExecutable } from "../../runtime-js/src/format.js";
import { HostTensor } from "../../runtime-js/src/host.js";
import { InterpretedFunction } from "../../runtime-js/src/interpreter.js";
import { VirtualMachine } from "../../runtime-js/src/vm.js";

const LIMITS = { maxBufferSize: 1024, maxComputeInvocationsPerWorkgroup: 256, maxComputeWorkgroupStorageSize: 0,
  maxStorageBufferBindingSize: 512, maxStorageBuffersPerShaderStage: 3 };
const tensor = (device) => ({ shape: ["n", "8"], dtype: "float32", bytes: "n * 32", device });
const sinfo = { kind: "tensor", dtype: "float32", ndim: 2, shape: ["n", "8"] };
const kernel = (name, backend, module, device) => ({
  name, backend, module, device, entry_point: `k_${name}`, workgroup_size: [64, 1, 1], grid: ["n", "1", "1"],
  abi: { bindings: ["read", "read", "write"].map((access, index) => ({ index, tensor: `t${index}`, dtype: "float32", access,
    role: access === "read" ? "input" : "output" })), scalars: [{ name: "n", passed: "uniform", binding: 3, offset: 0 }] },
  requirements: { features: [], limits: {} },
});
const device = (kind, backend) => ({ kind, id: 0, vdevices: [`${kind}:0`], target: { kind, name: kind, backend, features: [] },
  required_features: [], required_limits: LIMITS });

/** main(x, y on WebGPU; z on WASM) = (x + y) moved to WASM, times z: the shape of what --gpu-layers writes. */
const splitExecutable = () => ({
  format: "tessera-executable", version: 4, target: device("webgpu", "wgsl").target, required_features: [], required_limits: LIMITS,
  devices: [device("webgpu", "wgsl"), device("wasm", "c-wasm")], constant_devices: { w: [0, 1] }, constants: ["w"], libraries: [],
  modules: [{ path: "webgpu_0/kernels/000_k_add.wgsl", backend: "wgsl", nbytes: 10, sha256: "b".repeat(64) },
    { path: "wasm_0/kernels.wasm", backend: "c-wasm", nbytes: 10, sha256: "c".repeat(64) }],
  kernels: [kernel("add", "wgsl", "webgpu_0/kernels/000_k_add.wgsl", 0), kernel("multiply", "c-wasm", "wasm_0/kernels.wasm", 1)],
  functions: { main: {
    params: [["x", 0, 0], ["y", 1, 0], ["z", 2, 1]].map(([name, register, on]) => ({ name, register, sinfo, state: false, device: on })),
    code: [{ op: "launch", kernel: 0, args: [0, 1], outs: [3], scalars: ["n"] }, { op: "to_device", src: 3, dst: 4, device: 1 },
      { op: "launch", kernel: 1, args: [4, 2], outs: [5], scalars: ["n"] }, { op: "ret", src: 5 }],
    registers: 6, symbols: { n: { upper_bound: 16 } }, unbounded_symbols: [], result: sinfo, runtime_allocations: [],
    tensors: { 0: tensor(0), 1: tensor(0), 2: tensor(1), 3: tensor(0), 4: tensor(1), 5: tensor(1) },
    locations: { 0: { kind: "param", index: 0 }, 1: { kind: "param", index: 1 }, 2: { kind: "param", index: 2 },
      3: { kind: "arena", token: 0 }, 4: { kind: "arena", token: 1 }, 5: { kind: "arena", token: 2 } },
    memory: { static: true, recursive: false, arena_bytes: 2048, buffers: [1024, 1024], buffer_devices: [0, 1],
      liveness_lower_bound_bytes: 1024, storages: [
        { index: 0, size: "n * 32", static_size: 512, buffer: 0, offset: 0, device: 0, tensors: ["a"] },
        { index: 1, size: "n * 32", static_size: 512, buffer: 1, offset: 0, device: 1, tensors: ["b"] },
        { index: 2, size: "n * 32", static_size: 512, buffer: 1, offset: 512, device: 1, tensors: ["c"] }] } } },
});

/** ``splitExecutable()`` changed by ``damage``, validated. @param {(doc: any) => void} damage */
const damaged = (damage) => {
  const doc = splitExecutable();
  damage(doc);
  return () => validateExecutable(doc, "split/executable.json");
};

test("a split build passes the loader's checks, and runs on neither device alone", () => {
  const doc = validateExecutable(splitExecutable());
  assert.ok(!runsOn(doc, "webgpu") && !runsOn(doc, "wasm"));
});

test("a bad version-4 file is refused, naming the field", () => {
  assert.throws(damaged((d) => { delete d.devices; }),
    /split\/executable.json is malformed: devices must list the devices of a version 4 executable, and only of one/);
  assert.throws(damaged((d) => { d.version = 3; }), /devices must list the devices of a version 4 executable, and only of one/);
  assert.throws(damaged((d) => { d.version = 5; }), /format version 5; this runtime reads versions 3 and 4: rebuild the bundle/);
  // A kernel bound to the other device's tensor: z (on WASM) to the WebGPU add.
  assert.throws(damaged((d) => { d.functions.main.code[0].args = [0, 2]; }),
    /functions\.main\.code\[0\] binds register 2, on device 1, to kernel 0, which runs on device 0/);
  assert.throws(damaged((d) => { d.functions.main.tensors[4].device = 0; }),
    /functions\.main\.code\[1\]\.dst is not a tensor on device 1/);
  // Device indices past the list, wherever a device is named.
  assert.throws(damaged((d) => { d.kernels[1].device = 2; }), /kernels\[1\]\.device is 2, but the executable has 2 device\(s\)/);
  assert.throws(damaged((d) => { d.functions.main.code[1].device = 7; }),
    /functions\.main\.code\[1\]\.device is 7, but the executable has 2 device\(s\)/);
  assert.throws(damaged((d) => { d.functions.main.memory.buffer_devices = [0, 3]; }),
    /functions\.main\.memory\.buffer_devices\[1\] is 3, but the executable has 2 device\(s\)/);
  assert.throws(damaged((d) => { d.functions.main.memory.buffer_devices = [0]; }),
    /functions\.main\.memory\.buffer_devices lists 1 devices for 2 buffers/);
  assert.throws(damaged((d) => { d.constant_devices = { w: [2] }; }), /constant_devices\.w names a weight or device the executable does not have/);
  assert.throws(damaged((d) => { d.constant_devices = { v: [0] }; }), /constant_devices\.v names a weight or device/);
  // What this runtime runs: WebGPU and WASM devices, one of each, each kernel by its device's backend.
  assert.throws(damaged((d) => { d.devices[1] = device("opencl", "opencl"); }),
    /device opencl:0 is a opencl device; this runtime runs webgpu and wasm devices/);
  assert.throws(damaged((d) => { d.devices[1] = { ...device("webgpu", "wgsl"), id: 1, vdevices: ["webgpu:1"] }; }),
    /split across two webgpu devices; this runtime runs one of each kind/);
  assert.throws(damaged((d) => { d.kernels[1].device = 0; d.functions.main.tensors[4].device = 0; d.functions.main.tensors[2].device = 0;
    d.functions.main.tensors[5].device = 0; d.functions.main.code[1].device = 0; }),
  /kernel multiply is for the c-wasm backend but placed on webgpu:0, a webgpu device \(wgsl\)/);
});

/**
 * A device of ``kind`` over host memory whose kernels are JS functions by kernel name (the Device
 * interface of devices/index.js): a stand-in for WebGPU or WASM that Node can run.
 * @param {string} kind @param {Record<string, Function>} kernels
 */
function hostDevice(kind, kernels) {
  const memories = new Set();
  const floats = (view) => new Float32Array(view.memory.bytes.buffer, view.offset, view.nbytes / 4);
  const device = {
    kind, name: `host ${kind}`, launches: 0,
    fits: () => [{ storageAlignment: 4, workgroups: 2 ** 31 - 1, name: `${kind} device` }],
    owns: (memory) => memories.has(memory),
    partOf: () => 0,
    reserve() {},
    allocate(nbytes) {
      const memory = { bytes: new Uint8Array(Math.max(nbytes, 4)) };
      memories.add(memory);
      return { memory, offset: 0 };
    },
    allocateWith(bytes) {
      const place = device.allocate(bytes.byteLength);
      place.memory.bytes.set(bytes);
      return place;
    },
    upload: (memory, offset, bytes) => memory.bytes.set(bytes, offset),
    fillZero: (memory, offset, nbytes) => memory.bytes.fill(0, offset, offset + nbytes),
    readBack: async (view) => view.memory.bytes.slice(view.offset, view.offset + view.nbytes),
    copy: (source, destination) => destination.memory.bytes.set(source.memory.bytes.subarray(source.offset, source.offset + source.nbytes), destination.offset),
    loadKernels: async (records) => records.map((record) => kernels[record.name]),
    bind: (run, views) => ({ run, views }),
    launch({ run, views }, scalars) {
      device.launches += 1;
      run(...views.map(floats), ...scalars);
    },
    flush() {},
    destroy() {},
  };
  return device;
}

/** The split executable's two devices, as the VM's composite device. */
function splitDevice() {
  const gpu = hostDevice("webgpu", { add: (a, b, out, n) => { for (let i = 0; i < n * 8; i++) out[i] = a[i] + b[i]; } });
  const wasm = hostDevice("wasm", { multiply: (a, b, out, n) => { for (let i = 0; i < n * 8; i++) out[i] = a[i] * b[i]; } });
  return new SplitDevice([gpu, wasm], ["webgpu:0", "wasm:0"]);
}

test("the VM runs a split build over the composite device: each launch on its part, one copy between them", async () => {
  const doc = splitExecutable();
  const main = doc.functions.main;
  main.code.unshift(...main.params.map((p) => ({ op: "match", reg: p.register, sinfo, what: `main's ${p.name}`, text: "R.Tensor((n, 8), \"float32\")" })));
  validateExecutable(doc);
  const device = splitDevice();
  const vm = await VirtualMachine.create(device, doc, new Map([["w", new Float32Array(4)]]), new Map());
  assert.ok(!(vm.functions.get("main") instanceof InterpretedFunction), "main is planned at load");
  assert.equal(device.name, "host webgpu (webgpu:0) + host wasm (wasm:0)");
  const n = 3;
  const values = (seed) => new HostTensor(Float32Array.from({ length: n * 8 }, (_, i) => seed + i), [n, 8]);
  const [x, y, z] = [values(1), values(2), values(3)];
  const want = x.data.map((xi, i) => (xi + y.data[i]) * z.data[i]);
  const got = await vm.run("main", x, y, z);
  assert.deepEqual(got.shape, [n, 8]);
  assert.deepEqual(Array.from(got.data), Array.from(want));
  assert.equal(vm.copies, 1);
  assert.deepEqual(device.parts.map((p) => p.launches), [1, 1]);
  // A result left on the WASM part goes in as x, a parameter on the WebGPU part: it moves by the host.
  const kept = await vm.runOnDevice("main", x, y, z);
  assert.equal(device.partOf(kept.memory), 1);
  const again = await vm.run("main", kept, y, z);
  assert.deepEqual(Array.from(again.data), Array.from(want.map((v, i) => (v + y.data[i]) * z.data[i])));
  assert.equal(vm.copies, 3);
  await assert.rejects(vm.run("main", kept, y, z), /this result of main was overwritten by a later call of main/);
  // The weight on each device that constant_devices names, and on no other.
  assert.equal(device.partOf(vm.constant("w", 1).memory), 1);
  assert.equal(device.partOf(vm.constant("w", 0).memory), 0);
});

test("a split build runs on its devices together: one device alone is refused, naming them", async () => {
  const doc = validateExecutable(splitExecutable());
  await assert.rejects(VirtualMachine.create(new WasmDevice(), doc, new Map(), new Map()), (error) => {
    assert.equal(error.name, "DeviceError");
    assert.match(error.message, /^this executable is split across webgpu:0 and wasm:0; a wasm device runs one: open its devices together/);
    return true;
  });
});

test("without WebGPU, opening a split build's devices names the device it lacks", async () => {
  const doc = validateExecutable(splitExecutable());
  await assert.rejects(openDevice(doc), (error) => {
    assert.equal(error.name, "DeviceError");
    assert.match(error.message, /^this build runs part of its model on webgpu:0 \(WebGPU\): this browser has no WebGPU/);
    return true;
  });
});
