// The devices the VM (vm.js) runs on, behind one interface, and the table that opens them by kind.
// A new device is one module implementing Device plus one row in DEVICE_OPENERS.
//
// A view is bytes of device memory: ``memory`` (a GPUBuffer, a WebAssembly.Memory ...), ``offset``
// and ``nbytes``. ``part`` is a device of a split build (its index in executable.json's devices);
// a device of one part ignores it.
//
// @typedef {{memory: any, offset: number, nbytes: number}} View
// @typedef {{
//   kind: string, name: string, backend: string (the kernels it runs; none for a split device),
//   fits: () => import("../plan-checks.js").DeviceFit[],  what the plan checks ask, one per part
//   owns: (memory: any) => boolean, partOf: (memory: any) => number,
//   reserve: (nbytes: number, part?: number) => void,     room for what is allocated at load, asked first
//   allocate: (nbytes: number, part?: number) => {memory: any, offset: number},
//   allocateWith: (bytes: Uint8Array, part?: number) => {memory: any, offset: number},
//   upload: (memory: any, offset: number, bytes: Uint8Array) => void,   after the work recorded before
//   fillZero: (memory: any, offset: number, nbytes: number) => void,
//   readBack: (view: View) => Uint8Array | Promise<Uint8Array>,         once the work recorded before has run
//   copy: (source: View, destination: View) => void | Promise<void>,
//   loadKernels: (kernels: any[], modules: Map<string, ArrayBuffer>) => Promise<any[]>,  a handle per kernel
//   bind: (kernel: any, views: View[], site: object) => any,  reusable across launches of ``site``
//   launch: (bound: any, scalars: number[], grid: number[]) => void,
//   flush: () => void, destroy: () => void,
// }} Device

import { DeviceError } from "../device.js";
import { deviceName, SplitDevice } from "./split.js";
import { openWasm } from "./wasm.js";
import { openWebGPU } from "./webgpu.js";

/** A build split across devices opens a device per entry of its devices, each by this table, as one SplitDevice.
 * @param {any} exe @param {any} options */
async function openSplit(exe, options) {
  const parts = [];
  for (const entry of exe.devices) {
    const open = DEVICE_OPENERS[entry.kind];
    if (!open || entry.kind === "split") throw new DeviceError(`this build runs part of its model on ${deviceName(entry)}, a ${entry.kind} device this runtime does not have`);
    try {
      parts.push(await open(entry, options));
    } catch (error) {
      for (const part of parts) part.destroy();
      if (!(error instanceof DeviceError)) throw error;
      throw new DeviceError(`this build runs part of its model on ${deviceName(entry)} (${KIND_LABELS[entry.kind]}): ${error.message}`);
    }
  }
  return new SplitDevice(parts, exe.devices.map(deviceName));
}

/** How people call each kind of device. @type {Record<string, string>} */
export const KIND_LABELS = { webgpu: "WebGPU", wasm: "WASM", split: "WebGPU + WASM" };

/**
 * Each kind of device by the function that opens one for an executable, or throws a DeviceError saying
 * why it cannot here. Options: ``adapter`` (the WebGPU adapter to ask), ``gpuDevice`` (a GPUDevice to use),
 * ``threads`` (the most threads a WASM device runs on), ``memoryLimit`` (the most WebAssembly memory it may use).
 * @type {Record<string, (exe: any, options: {adapter?: any, gpuDevice?: GPUDevice, threads?: number, memoryLimit?: number}) => Promise<any>>}
 */
export const DEVICE_OPENERS = { webgpu: openWebGPU, wasm: openWasm, split: openSplit };

/** The kind of device each backend's kernels run on (docs/format.md, the kernel record's backend). */
const BACKEND_KINDS = /** @type {Record<string, string>} */ ({ wgsl: "webgpu", "c-wasm": "wasm" });

/** The kind of device ``exe`` runs on: "split" for a build split across devices, else the one its kernels'
 * backend runs on (its target's, for a build without kernels). @param {any} exe */
export function deviceKind(exe) {
  if (exe.devices) return "split";
  const backend = exe.kernels[0]?.backend ?? exe.target?.backend;
  return BACKEND_KINDS[backend] ?? backend;
}

/** Open the device ``exe`` runs on (``kind``, by default deviceKind's), by DEVICE_OPENERS.
 * @param {any} exe @param {{kind?: string, adapter?: any, gpuDevice?: GPUDevice, threads?: number, memoryLimit?: number}} [options] */
export async function openDevice(exe, { kind = deviceKind(exe), ...options } = {}) {
  const open = DEVICE_OPENERS[kind];
  if (!open) throw new DeviceError(`this runtime has no ${kind} device (it has ${Object.keys(DEVICE_OPENERS).join(", ")})`);
  return open(exe, options);
}

export { deviceName, SplitDevice };
export { WasmDevice } from "./wasm.js";
export { WebGPUDevice } from "./webgpu.js";
