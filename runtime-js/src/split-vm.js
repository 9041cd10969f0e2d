// The VM of a build split across devices (docs/format.md, "Devices (version 4)"; `tessera compile
// --gpu-layers N`): kernels on WebGPU beside kernels on WebAssembly, each device with its own memory.
//
// Each device gets its share of the executable (devicePart): its kernels, a copy of each weight it
// reads (constant_devices), and of each function the parameters, arena buffers and launches on it.
// The WebGPU VM (vm.js) and the WASM VM (wasm-vm.js) prepare their share as they would a whole
// executable; this module runs a function's steps in program order across the two and makes the
// `to_device` copies between their memories:
//
//   WebGPU -> WASM: after the GPU work recorded so far, the source is copied into a MAP_READ staging
//     buffer; that is submitted, the buffer mapped, and its bytes set into the WebAssembly memory, so
//     the WASM kernels after the copy read what the GPU wrote.
//   WASM -> WebGPU: the GPU work recorded so far is submitted first, then queue.writeBuffer takes the
//     bytes out of the WebAssembly memory: the write lands after that work and before the work
//     recorded after it.
//
// A straight-line function (the LLM's prefill, decode and sample) is bound at load on both devices,
// as each VM binds its own. Any other function runs in the frame interpreter (interpreter.js) over
// SplitMachine, which hands each request to the machine of the device it concerns.

import { libraryRegistry } from "./builtins.js";
import { DeviceError, requestDeviceFor } from "./device.js";
import { fromDeviceBytes } from "./host.js";
import { InterpretedFunction, Interpreter, TensorValue } from "./interpreter.js";
import {
  assembleResult, bindArguments, FunctionTable, isStraightLine, resultRegisters, RuntimeCheckError, upperBounds,
} from "./program.js";
import { checkDeviceFit, WASM_FIT, webgpuFit } from "./plan-checks.js";
import { FormatError } from "./schema.js";
import { evalShape } from "./shape.js";
import { DeviceTensor, VirtualMachine, VMFunction } from "./vm.js";
import { WasmFunction, WasmTensor, WasmVirtualMachine } from "./wasm-vm.js";

/* global GPUBufferUsage, GPUMapMode */

const align4 = (/** @type {number} */ n) => Math.ceil(n / 4) * 4;

/** A `to_device` copies a tensor into one of the same bytes (as the Python VM's storage.check_copy).
 * @param {number} from @param {number} into @param {string} fn */
function checkCopy(from, into, fn) {
  if (from !== into) throw new RuntimeCheckError(`${fn}: to_device copies ${from} bytes into a tensor of ${into}`);
}

/** How people call a device of a split build: its first vdevice, "webgpu:0". @param {any} device */
export const deviceName = (device) => device.vdevices[0] ?? `${device.kind}:${device.id}`;

export class SplitVirtualMachine extends FunctionTable {
  /**
   * @param {any} exe a version-4 executable.json, checked by format.js (one WebGPU and one WASM device)
   * @param {Map<string, ArrayBufferView>} weights the constants by name (tensor-cache records)
   * @param {Map<string, ArrayBuffer>} modules the kernel module files by path (WGSL text, the WASM module)
   * @param {{gpuDevice?: GPUDevice, adapter?: any, libraries?: Record<string, Function>}} [options]
   *   gpuDevice: the GPUDevice of the WebGPU part; by default one is requested (from ``adapter`` when given)
   *   with the features and limits the build's WebGPU device lists
   */
  static async create(exe, weights, modules, { gpuDevice, adapter, libraries } = {}) {
    if (!exe.devices) throw new Error("this executable runs on one device: load it with VirtualMachine or WasmVirtualMachine");
    const registry = libraryRegistry(exe, libraries);
    const gpuIndex = exe.devices.findIndex((/** @type {any} */ d) => d.kind === "webgpu");
    const wasmIndex = exe.devices.findIndex((/** @type {any} */ d) => d.kind === "wasm");
    if (gpuIndex < 0 || wasmIndex < 0 || exe.devices.length !== 2) {
      throw new DeviceError(`this build is split across ${exe.devices.map(deviceName).join(", ")}; runtime-js runs one WebGPU and one WASM device`);
    }
    gpuDevice ??= await requestGpu(exe.devices[gpuIndex], adapter);
    // The whole plan, each storage and launch against its own device (each part checks its share again).
    const fits = exe.devices.map((/** @type {any} */ _, /** @type {number} */ i) => (i === gpuIndex ? webgpuFit(gpuDevice.limits) : WASM_FIT));
    checkDeviceFit(exe, fits.map((fit, i) => ({ ...fit, name: `device ${deviceName(exe.devices[i])}` })), "executable.json", (message) => new DeviceError(message));
    const gpu = await VirtualMachine.create(gpuDevice, devicePart(exe, gpuIndex), weights, modules);
    const wasm = await WasmVirtualMachine.create(devicePart(exe, wasmIndex), weights, modules);
    const vm = new SplitVirtualMachine(exe, { gpu, wasm, gpuIndex, wasmIndex });
    vm.interpreter = new Interpreter(exe, new SplitMachine(vm), vm.functions, registry);
    for (const [name, record] of Object.entries(exe.functions)) {
      const fast = straightLine(record) && gpu.functions.get(name) instanceof VMFunction &&
        wasm.functions.get(name) instanceof WasmFunction;
      vm.functions.set(name, fast ? new SplitFunction(vm, name, record) : new SplitInterpretedFunction(vm, name, record));
    }
    return vm;
  }

  /** @param {any} exe @param {{gpu: VirtualMachine, wasm: WasmVirtualMachine, gpuIndex: number, wasmIndex: number}} parts */
  constructor(exe, { gpu, wasm, gpuIndex, wasmIndex }) {
    super();
    this.exe = exe;
    this.gpu = gpu;
    this.wasm = wasm;
    /** The VM of each device, by its index in exe.devices. */
    this.parts = /** @type {(VirtualMachine|WasmVirtualMachine)[]} */ ([]);
    this.parts[gpuIndex] = gpu;
    this.parts[wasmIndex] = wasm;
    /** @type {Interpreter} */ this.interpreter = /** @type {any} */ (null);
    this.copies = 0;  // to_device copies so far, for tests and benchmarks (a split Llama: 2 per decode step)
  }

  /** The kind of device ``index`` ("webgpu" or "wasm"). @param {number} index */
  kindOf(index) {
    return this.parts[index] === this.gpu ? "webgpu" : "wasm";
  }

  /** Zero every state tensor (each KV cache on its device), for a new conversation. */
  resetState() {
    this.gpu.resetState();
    this.wasm.resetState();
  }

  /**
   * ``value`` as an argument of a parameter on a device of ``kind``: a result left in place on the other
   * device comes to the host first (a host tensor, a number or a result on that device is as it is).
   * @param {any} value @param {string} kind
   */
  async argumentOn(value, kind) {
    if (value instanceof DeviceTensor && kind === "wasm") {
      value.checkCurrent();
      const bytes = await this.gpu.machine.read(new TensorValue(value.buffer, value.offset, value.nbytes, value.shape, value.dtype));
      return fromDeviceBytes(bytes, value.shape, value.dtype);
    }
    if (value instanceof WasmTensor && kind === "webgpu") {
      value.checkCurrent();
      return fromDeviceBytes(this.wasm.bytes().subarray(value.pointer, value.pointer + value.nbytes), value.shape, value.dtype);
    }
    return value;
  }
}

/** A GPUDevice for the build's WebGPU device, or a DeviceError that names it. @param {any} device @param {any} adapter */
async function requestGpu(device, adapter) {
  try {
    return (await requestDeviceFor(device, adapter)).device;
  } catch (error) {
    if (!(error instanceof DeviceError)) throw error;
    throw new DeviceError(`this build runs part of its model on ${deviceName(device)} (WebGPU): ${error.message}`);
  }
}

/** Whether a function of a split build takes the fast path: a straight line (program.js) once its copies
 * are set aside, each copy between tensors with a place. @param {any} record */
export function straightLine(record) {
  const known = (/** @type {number} */ reg) => record.tensors[String(reg)] !== undefined && record.locations[String(reg)] !== undefined;
  const copies = record.code.filter((/** @type {any} */ op) => op.op === "to_device");
  return copies.every((/** @type {any} */ op) => known(op.src) && known(op.dst)) &&
    isStraightLine({ ...record, code: record.code.filter((/** @type {any} */ op) => op.op !== "to_device") });
}

/**
 * The share of ``exe`` on device ``index``, as an executable of its own for that device's VM: its kernels
 * (launches renumbered to them), the weights it reads, its target and requirements, and of each function
 * the parameters, arena buffers and storages on it, its launches in program order, and a tuple of the
 * results it holds. Of a function that is not a straight line only the state parameters are kept: the
 * interpreter runs it over both devices (SplitMachine).
 * @param {any} exe @param {number} index
 */
export function devicePart(exe, index) {
  const { devices, constant_devices: placements = {}, ...rest } = exe;
  const device = devices[index];
  /** @type {Map<number, number>} */
  const kernelIndex = new Map();
  /** @type {any[]} */
  const kernels = [];
  exe.kernels.forEach((/** @type {any} */ kernel, /** @type {number} */ k) => {
    if ((kernel.device ?? 0) !== index) return;
    kernelIndex.set(k, kernels.length);
    kernels.push(kernel);
  });
  const paths = new Set(kernels.map((k) => k.module));
  const constants = exe.constants.filter((/** @type {string} */ name) => (placements[name] ?? [0]).includes(index));
  const functions = Object.fromEntries(Object.entries(exe.functions).map(([name, record]) =>
    [name, functionPart(name, record, index, deviceName(device), kernelIndex, new Set(constants))]));
  return { ...rest, target: device.target, required_features: device.required_features, required_limits: device.required_limits,
    modules: exe.modules.filter((/** @type {any} */ m) => paths.has(m.path)), kernels, constants, libraries: [], functions };
}

/**
 * @param {string} name @param {any} record @param {number} index @param {string} label the device's name
 * @param {Map<number, number>} kernelIndex @param {Set<string>} constants the weights on the device
 */
function functionPart(name, record, index, label, kernelIndex, constants) {
  const onDevice = (/** @type {number} */ reg) => (record.tensors[String(reg)]?.device ?? 0) === index;
  const memory = record.memory;
  const bufferDevices = memory.buffer_devices ?? memory.buffers.map(() => 0);
  /** @type {Map<number, number>} */
  const bufferIndex = new Map();
  memory.buffers.forEach((/** @type {number} */ _, /** @type {number} */ b) => {
    if (bufferDevices[b] === index) bufferIndex.set(b, bufferIndex.size);
  });
  const storages = memory.storages
    .filter((/** @type {any} */ s) => (s.buffer === null ? (s.device ?? 0) === index : bufferIndex.has(s.buffer)))
    .map((/** @type {any} */ s) => ({ ...s, buffer: s.buffer === null ? null : bufferIndex.get(s.buffer) }));
  // What a kernel of this device binds must be in this device's memory: the loader checked the tensors'
  // devices; their places must agree.
  const tokens = new Set(storages.map((/** @type {any} */ s) => s.index));
  for (const [reg, loc] of Object.entries(record.locations)) {
    if (!onDevice(Number(reg))) continue;
    const where = `executable.json is malformed: functions.${name}.locations['${reg}']`;
    if (loc.kind === "arena" && !tokens.has(loc.token)) throw new FormatError(`${where} places a tensor of ${label} in storage ${loc.token}, which is another device's`);
    if (loc.kind === "constant" && !constants.has(loc.name)) throw new FormatError(`${where} reads the weight ${loc.name} on ${label}, where constant_devices does not place it`);
  }
  const straight = straightLine(record);
  const launches = straight ? record.code.filter((/** @type {any} */ op) => op.op === "launch" && kernelIndex.has(op.kernel))
    .map((/** @type {any} */ op) => ({ ...op, kernel: kernelIndex.get(op.kernel) })) : [];
  const results = straight ? resultRegisters(record).filter(onDevice) : [];
  const params = record.params.filter((/** @type {any} */ p) => record.tensors[String(p.register)] && onDevice(p.register) &&
    (straight || p.state));
  const tuple = record.registers;  // one register more, for the tuple of this device's results
  return { ...record, params, registers: tuple + 1,
    code: [...launches, { op: "tuple", dst: tuple, fields: results }, { op: "ret", src: tuple }],
    memory: { ...memory, buffers: memory.buffers.filter((/** @type {number} */ _, /** @type {number} */ b) => bufferIndex.has(b)), storages } };
}

/** A step of a straight-line function: launches [from, to) of one device's share, or a copy.
 * @typedef {{run: string, from: number, to: number} | {copy: {from: string, to: string, src: number, dst: number, staging: GPUBuffer|null}}} Step */

/** A straight-line function of a split build: each device's share bound at load by its VM (VMFunction,
 * WasmFunction); a call runs their launches in program order, with the copies between. */
class SplitFunction {
  /** @param {SplitVirtualMachine} vm @param {string} name @param {any} record */
  constructor(vm, name, record) {
    this.vm = vm;
    this.name = name;
    this.record = record;
    this.generation = 0;  // calls so far: a result left in place by an earlier one is stale
    this.bounds = upperBounds(record);
    this.gpu = /** @type {VMFunction} */ (vm.gpu.functions.get(name));
    this.wasm = /** @type {WasmFunction} */ (vm.wasm.functions.get(name));
    const deviceOf = (/** @type {number} */ reg) => vm.kindOf(record.tensors[String(reg)]?.device ?? 0);
    this.inputKinds = record.params.filter((/** @type {any} */ p) => !p.state).map((/** @type {any} */ p) => vm.kindOf(p.device ?? 0));
    /** @type {Step[]} */
    this.steps = [];
    const launched = /** @type {Record<string, number>} */ ({ webgpu: 0, wasm: 0 });
    for (const op of record.code) {
      if (op.op === "launch") {
        const run = vm.kindOf(vm.exe.kernels[op.kernel].device ?? 0);
        const last = this.steps.at(-1);
        if (last && "run" in last && last.run === run) last.to += 1;
        else this.steps.push({ run, from: launched[run], to: launched[run] + 1 });
        launched[run] += 1;
      } else if (op.op === "to_device") {
        const [from, to] = [deviceOf(op.src), vm.kindOf(op.device)];
        const bytes = align4(evalShape(record.tensors[String(op.src)].bytes, this.bounds));
        const staging = from === "webgpu" && to === "wasm" ?
          vm.gpu.createBuffer(bytes, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST) : null;
        this.steps.push({ copy: { from, to, src: op.src, dst: op.dst, staging } });
      }
    }
  }

  /** @param {any[]} args @param {boolean} toHost */
  async call(args, toHost) {
    const { vm, record } = this;
    const { inputs, values, heap } = bindArguments(this.name, record, args, this.bounds);
    for (const [i, param] of inputs.entries()) {
      values.set(param.register, await vm.argumentOn(values.get(param.register), this.inputKinds[i]));
    }
    let encoder = vm.gpu.device.createCommandEncoder();
    this.gpu.writeInputs(encoder, inputs, values);
    this.wasm.writeInputs(inputs, values);
    this.generation += 1;  // from here, results of the last call left in place are stale
    for (const step of this.steps) {
      if (!("run" in step)) encoder = await this.copy(step.copy, heap, encoder);
      else if (step.run === "webgpu") this.gpu.encodeLaunches(encoder, heap, step.from, step.to);
      else this.wasm.runLaunches(heap, step.from, step.to);
    }
    const results = await this.gpu.resultTensors(encoder, heap, toHost, this);
    for (const [reg, value] of this.wasm.resultTensors(heap, toHost, this)) results.set(reg, value);
    return assembleResult(record, results);
  }

  /**
   * Copy tensor ``src`` into tensor ``dst`` on the other device (or on the same one), after everything
   * before it on the source's device and before everything after it on the destination's.
   * @param {{from: string, to: string, src: number, dst: number, staging: GPUBuffer|null}} copy
   * @param {Record<string, number>} heap @param {GPUCommandEncoder} encoder the GPU work recorded so far
   * @returns {Promise<GPUCommandEncoder>} the encoder to record into next
   */
  async copy({ from, to, src, dst, staging }, heap, encoder) {
    const { vm, record } = this;
    const [nbytes, into] = [src, dst].map((reg) => evalShape(record.tensors[String(reg)].bytes, heap));
    checkCopy(nbytes, into, this.name);
    const device = vm.gpu.device;
    vm.copies += 1;
    if (nbytes === 0) return encoder;
    if (from === "webgpu" && to === "wasm") {
      const source = this.gpu.location(src);
      encoder.copyBufferToBuffer(source.buffer, source.offset, /** @type {GPUBuffer} */ (staging), 0, nbytes);
      device.queue.submit([encoder.finish()]);
      await /** @type {GPUBuffer} */ (staging).mapAsync(GPUMapMode.READ, 0, nbytes);
      vm.wasm.bytes().set(new Uint8Array(/** @type {GPUBuffer} */ (staging).getMappedRange(0, nbytes)), this.wasm.pointer(dst));
      /** @type {GPUBuffer} */ (staging).unmap();
      return device.createCommandEncoder();
    }
    if (from === "wasm" && to === "webgpu") {
      device.queue.submit([encoder.finish()]);  // the GPU work before the copy runs before its write
      const destination = this.gpu.location(dst);
      device.queue.writeBuffer(destination.buffer, destination.offset, vm.wasm.memory.buffer, this.wasm.pointer(src), nbytes);
      return device.createCommandEncoder();
    }
    if (from === "webgpu") {
      const [source, destination] = [this.gpu.location(src), this.gpu.location(dst)];
      encoder.copyBufferToBuffer(source.buffer, source.offset, destination.buffer, destination.offset, nbytes);
    } else {
      const pointer = this.wasm.pointer(src);
      vm.wasm.bytes().copyWithin(this.wasm.pointer(dst), pointer, pointer + nbytes);
    }
    return encoder;
  }
}

/** A function of a split build that the interpreter runs: an argument left in place on the other device
 * comes to the host first, and the interpreter puts it on its parameter's device. */
class SplitInterpretedFunction extends InterpretedFunction {
  /** @param {SplitVirtualMachine} vm @param {string} name @param {any} record */
  constructor(vm, name, record) {
    super(vm.interpreter, name);
    this.vm = vm;
    this.inputKinds = record.params.filter((/** @type {any} */ p) => !p.state).map((/** @type {any} */ p) => vm.kindOf(p.device ?? 0));
  }

  /** @param {any[]} args @param {boolean} toHost */
  async call(args, toHost) {
    const moved = [];
    for (const [i, arg] of args.entries()) moved.push(await this.vm.argumentOn(arg, this.inputKinds[i]));
    return super.call(moved, toHost);
  }
}

/**
 * The interpreter's machine for a split build (interpreter.js, Machine): each request goes to the machine
 * of the device it names (a weight's, a state tensor's, an allocation's, a kernel's), or that holds the
 * tensor it is about (a WASM tensor has memory null, a WebGPU tensor its GPUBuffer); `to_device` reads
 * the source back from its device and writes it into the other's memory.
 */
class SplitMachine {
  /** @param {SplitVirtualMachine} vm */
  constructor(vm) {
    this.vm = vm;
    this.gpu = vm.gpu.machine;
    this.wasm = vm.wasm.machine;
    /** The machine of each device, by index. */
    this.machines = vm.parts.map((part) => /** @type {import("./interpreter.js").Machine} */ (part.machine));
    this.pool = {
      alloc: (/** @type {number} */ nbytes, device = 0) => this.machines[device].pool.alloc(nbytes),
      release: (/** @type {any} */ block) => (block.memory === null ? this.wasm : this.gpu).pool.release(block),
    };
    /** @type {WeakMap<any, any>} */ this.localOps = new WeakMap();  // each launch renumbered to its device's kernels
    /** @type {Map<string, {device: number, index: number}[]>} */
    this.arenaPlaces = new Map(Object.entries(vm.exe.functions).map(([name, record]) => {
      const devices = record.memory.buffer_devices ?? record.memory.buffers.map(() => 0);
      return [name, devices.map((/** @type {number} */ device, /** @type {number} */ b) =>
        ({ device, index: devices.slice(0, b).filter((/** @type {number} */ d) => d === device).length }))];
    }));
  }

  /** @param {TensorValue} tensor */
  machineOf(tensor) {
    return tensor.memory === null ? this.wasm : this.gpu;
  }

  /** @param {string} name @param {number} [device] */
  constant(name, device = 0) {
    const place = this.machines[device].constant(name);
    if (place.memory === undefined || place.offset === undefined) {
      throw new RuntimeCheckError(`the weight ${name} is not placed on ${deviceName(this.vm.exe.devices[device])} (constant_devices)`);
    }
    return place;
  }

  /** @param {string} name @param {number} nbytes @param {number} [device] */
  state(name, nbytes, device = 0) {
    return this.machines[device].state(name, nbytes);
  }

  /** @param {string} fn @param {number} buffer */
  arena(fn, buffer) {
    const { device, index } = /** @type {{device: number, index: number}[]} */ (this.arenaPlaces.get(fn))[buffer];
    return this.machines[device].arena(fn, index);
  }

  /** @param {TensorValue} tensor @param {Uint8Array} bytes */
  write(tensor, bytes) {
    this.machineOf(tensor).write(tensor, /** @type {Uint8Array<ArrayBuffer>} */ (bytes));
  }

  /** @param {TensorValue} tensor */
  read(tensor) {
    return this.machineOf(tensor).read(tensor);
  }

  /** @param {any} op @param {TensorValue[]} tensors @param {number[]} scalars @param {number[]} grid */
  launch(op, tensors, scalars, grid) {
    const kernel = this.vm.exe.kernels[op.kernel];
    const device = kernel.device ?? 0;
    const machine = this.machines[device];
    tensors.forEach((tensor, i) => {
      if (this.machineOf(tensor) !== machine) {
        throw new RuntimeCheckError(`kernel ${kernel.name} runs on ${deviceName(this.vm.exe.devices[device])}, and its binding ${i} is a tensor of the other device`);
      }
    });
    let local = this.localOps.get(op);
    if (!local) {
      const part = /** @type {any} */ (this.vm.parts[device]).exe;
      local = { ...op, kernel: part.kernels.indexOf(kernel) };
      this.localOps.set(op, local);
    }
    machine.launch(local, tensors, scalars, grid);
  }

  /** `to_device`: the source's bytes, read once its device has run what came before, into the destination.
   * @param {TensorValue} source @param {TensorValue} destination */
  async copy(source, destination) {
    checkCopy(source.nbytes, destination.nbytes, "the program");
    const nbytes = source.nbytes;
    const bytes = await this.machineOf(source).read(source);
    this.machineOf(destination).write(destination, /** @type {Uint8Array<ArrayBuffer>} */ (bytes.subarray(0, nbytes)));
    this.vm.copies += 1;
  }

  flush() {
    this.gpu.flush();
    this.wasm.flush();
  }

  /** @param {any} value */
  inPlace(value) {
    return this.gpu.inPlace(value) ?? this.wasm.inPlace(value);
  }

  /** @param {{name: string, generation: number}} fn @param {number} generation @param {TensorValue} t */
  leaveInPlace(fn, generation, t) {
    return this.machineOf(t).leaveInPlace(fn, generation, t);
  }
}
