// The virtual machine: runs the functions of an executable (docs/format.md) on a device
// (devices/index.js): WebGPU, WebAssembly, or a build split across both as one composite device.
//
// What lives on the device for the VM's lifetime is placed when it is made: the weights (a copy on
// each device of a split build that reads them, constant_devices), the state (a KV cache), each
// function's arena, and the parameters of each planned function at their upper bounds. A function
// that is one straight line of launches (and copies between devices) over a static memory plan (the
// LLM's prefill, decode and sample) is planned once, at load: every launch bound to its tensors. A
// call then writes its arguments and sizes, launches and copies in program order and, unless asked
// to leave them on the device, reads the results back: it creates nothing. Every other function runs
// in the frame interpreter (interpreter.js) over DeviceMachine (machine.js), with run-time tensors in
// pooled device buffers.

import { libraryRegistry } from "./builtins.js";
import { DeviceError } from "./device.js";
import { deviceName } from "./devices/index.js";
import { fromDeviceBytes, HostTensor, toDeviceBytes } from "./host.js";
import { InterpretedFunction, Interpreter } from "./interpreter.js";
import { checkCopy, DeviceMachine, DeviceTensor } from "./machine.js";
import { checkDeviceFit } from "./plan-checks.js";
import {
  assembleResult, bindArguments, isStraightLine, resultRegisters, RuntimeCheckError, launchSizes, upperBounds,
} from "./program.js";
import { evalShape } from "./shape.js";

export { DeviceTensor, HostTensor, RuntimeCheckError };

const align4 = (/** @type {number} */ n) => Math.ceil(n / 4) * 4;
/** The kernel backend each kind of device runs (docs/format.md). */
const BACKENDS = /** @type {Record<string, string>} */ ({ webgpu: "wgsl", wasm: "c-wasm" });

/** A view's bytes of a host argument: most dtypes are laid out on a device as on the host, written as they are.
 * @param {HostTensor} value */
function hostBytes(value) {
  const { data, dtype } = value;
  return dtype !== "bool" && data.byteLength % 4 === 0 ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
    : toDeviceBytes(data, dtype);
}

/** The device of a tensor or parameter record of a split build (0 for one device). @param {any} record */
const partOf = (record) => record?.device ?? 0;

export class VirtualMachine {
  /**
   * @param {any} device the device to run on (devices/index.js: openDevice, or new WebGPUDevice(gpuDevice), new WasmDevice())
   * @param {any} exe the parsed executable.json
   * @param {Map<string, ArrayBufferView>} weights the constants by name (tensor-cache records)
   * @param {Map<string, ArrayBuffer>} modules the kernel module files by path
   * @param {{libraries?: Record<string, Function>}} [options] host functions `call_builtin` may call, by name
   */
  static async create(device, exe, weights, modules, { libraries } = {}) {
    checkRunsOn(device, exe);
    checkDeviceFit(exe, device.fits(), "executable.json", (message) => new DeviceError(message));
    const vm = new VirtualMachine(device, exe, libraryRegistry(exe, libraries));
    await vm.load(weights, modules);
    return vm;
  }

  /** @param {any} device @param {any} exe @param {Map<string, Function>} libraries */
  constructor(device, exe, libraries) {
    this.device = device;
    this.exe = exe;
    this.libraries = libraries;
    /** @type {any[]} */ this.kernels = [];  // the device's handle of each kernel
    /** @type {Map<string, {memory: any, offset: number}[]>} */ this.constants = new Map();  // by part
    /** @type {Map<string, {memory: any, offset: number, nbytes: number}>} */ this.state = new Map();
    /** @type {Map<string, {memory: any, offset: number}[]>} */ this.arenas = new Map();  // each function's static plan
    /** @type {Map<string, {call: (args: any[], toHost: boolean) => Promise<any>, generation: number}>} */
    this.functions = new Map();
    this.copies = 0;  // to_device copies so far, for tests and benchmarks (a split Llama: 1 per decode step)
    this.machine = new DeviceMachine(this);
    this.interpreter = new Interpreter(exe, this.machine, this.functions, libraries);
  }

  /** @param {Map<string, ArrayBufferView>} weights @param {Map<string, ArrayBuffer>} modules */
  async load(weights, modules) {
    const { device, exe } = this;
    const placements = exe.constant_devices ?? {};
    for (const name of exe.constants) {
      if (!weights.get(name)) throw new Error(`the weights have no tensor '${name}' that the executable uses`);
    }
    // Room for everything placed now, asked for at once (a WebAssembly memory grows once, not per weight).
    for (const [part, nbytes] of staticBytes(exe, weights)) device.reserve(nbytes, part);
    this.kernels = await device.loadKernels(exe.kernels, modules);
    for (const name of exe.constants) {
      const data = /** @type {ArrayBufferView} */ (weights.get(name));
      const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      const places = [];
      for (const part of placements[name] ?? [0]) places[part] = device.allocateWith(bytes, part);
      this.constants.set(name, places);
    }
    for (const [name, record] of Object.entries(exe.functions)) {
      const parts = record.memory.buffer_devices ?? record.memory.buffers.map(() => 0);
      this.arenas.set(name, record.memory.buffers.map((/** @type {number} */ size, /** @type {number} */ b) => device.allocate(size, parts[b])));
      const bounds = upperBounds(record);
      for (const param of record.params.filter((/** @type {any} */ p) => p.state)) {
        const tensor = record.tensors[String(param.register)];
        if (tensor) this.stateBuffer(param.name, evalShape(tensor.bytes, bounds), partOf(tensor));
      }
    }
    for (const [name, record] of Object.entries(exe.functions)) {
      this.functions.set(name, isPlanned(record) ? new PlannedFunction(this, name, record) : new InterpretedFunction(this.interpreter, name));
    }
  }

  /** The place of weight ``name`` on device ``part``. @param {string} name @param {number} [part] */
  constant(name, part = 0) {
    const place = this.constants.get(name)?.[part];
    if (!place) throw new RuntimeCheckError(`the weight ${name} is not placed on ${this.partName(part)} (constant_devices)`);
    return place;
  }

  /** State is shared by name across functions: prefill and decode write one KV cache.
   * @param {string} name @param {number} nbytes @param {number} [part] */
  stateBuffer(name, nbytes, part = 0) {
    let state = this.state.get(name);
    if (!state) {
      state = { ...this.device.allocate(nbytes, part), nbytes };
      this.state.set(name, state);
    } else if (nbytes > state.nbytes) {
      throw new RuntimeCheckError(`the state tensor '${name}' is declared with different sizes by different functions`);
    }
    return state;
  }

  /** Zero every state tensor (a KV cache, for a new conversation). */
  resetState() {
    for (const { memory, offset, nbytes } of this.state.values()) this.device.fillZero(memory, offset, nbytes);
  }

  /** How people call device ``part`` of this executable. @param {number} part */
  partName(part) {
    return this.exe.devices ? deviceName(this.exe.devices[part]) : `the ${this.device.kind} device`;
  }

  /** @param {string} name */
  fn(name) {
    const fn = this.functions.get(name);
    if (!fn) throw new Error(`the executable has no function '${name}' (functions: ${[...this.functions.keys()].join(", ")})`);
    return fn;
  }

  /** Run a function and read its result(s) back. @param {string} name @param {...any} args */
  async run(name, ...args) {
    return this.fn(name).call(await this.argumentsOf(name, args), true);
  }

  /** Run a function and leave its result(s) on the device for the next one. @param {string} name @param {...any} args */
  async runOnDevice(name, ...args) {
    return this.fn(name).call(await this.argumentsOf(name, args), false);
  }

  /** ``args`` of function ``name``, each on its parameter's device. @param {string} name @param {any[]} args */
  async argumentsOf(name, args) {
    if (this.device.kind !== "split") return args;
    const inputs = this.exe.functions[name].params.filter((/** @type {any} */ p) => !p.state);
    return Promise.all(args.map((arg, i) => this.argumentOn(arg, partOf(inputs[i]))));
  }

  /** ``value`` as an argument on device ``part``: a result left on another device read back to the host.
   * @param {any} value @param {number} part */
  async argumentOn(value, part) {
    if (!(value instanceof DeviceTensor) || this.device.partOf(value.memory) === part) return value;
    value.checkCurrent();
    return fromDeviceBytes(await this.device.readBack(value), value.shape, value.dtype);
  }
}

/** A device that runs ``exe``: a composite of its devices for a split build, else one that runs its kernels' backend.
 * @param {any} device @param {any} exe */
function checkRunsOn(device, exe) {
  if (exe.devices) {
    const kinds = exe.devices.map((/** @type {any} */ d) => d.kind);
    if (device.kind !== "split" || device.parts.map((/** @type {any} */ p) => p.kind).join() !== kinds.join()) {
      throw new DeviceError(`this executable is split across ${exe.devices.map(deviceName).join(" and ")}; ` +
        `a ${device.kind} device runs one: open its devices together (openDevice)`);
    }
    return;
  }
  if (device.kind === "split") throw new DeviceError("this executable runs on one device, not on a split device");
  const backend = BACKENDS[device.kind];
  const other = exe.kernels.find((/** @type {any} */ k) => k.backend !== backend);
  if (other) throw new DeviceError(`kernel ${other.name} is for the ${other.backend} backend; the ${device.kind} device runs ${backend}`);
}

/** Bytes placed at load on each device, with room for alignment: weights, state, arenas, planned parameters.
 * @param {any} exe @param {Map<string, ArrayBufferView>} weights @returns {Map<number, number>} */
function staticBytes(exe, weights) {
  /** @type {Map<number, number>} */
  const bytes = new Map();
  const add = (/** @type {number} */ part, /** @type {number} */ n) => bytes.set(part, (bytes.get(part) ?? 0) + n + 16);
  for (const name of exe.constants) {
    for (const part of exe.constant_devices?.[name] ?? [0]) add(part, /** @type {ArrayBufferView} */ (weights.get(name)).byteLength);
  }
  const states = new Set();
  for (const record of Object.values(exe.functions)) {
    const bounds = upperBounds(record);
    const parts = record.memory.buffer_devices ?? record.memory.buffers.map(() => 0);
    record.memory.buffers.forEach((/** @type {number} */ size, /** @type {number} */ b) => add(parts[b], size));
    const planned = isPlanned(record);
    for (const param of record.params) {
      const tensor = record.tensors[String(param.register)];
      if (!tensor || !(planned || param.state) || (param.state && states.has(param.name))) continue;
      if (param.state) states.add(param.name);
      add(partOf(tensor), evalShape(tensor.bytes, bounds));
    }
  }
  return bytes;
}

/** Whether a function is planned at load: a straight line (program.js) once its copies between
 * devices are set aside, each copy between tensors with a place. @param {any} record */
export function isPlanned(record) {
  const known = (/** @type {number} */ reg) => record.tensors[String(reg)] !== undefined && record.locations[String(reg)] !== undefined;
  const copies = record.code.filter((/** @type {any} */ op) => op.op === "to_device");
  return copies.every((/** @type {any} */ op) => known(op.src) && known(op.dst)) &&
    isStraightLine({ ...record, code: record.code.filter((/** @type {any} */ op) => op.op !== "to_device") });
}

/** A step of a planned function: a launch bound at load, or a copy between two tensors' places.
 * @typedef {{op: any, kernel: any, bound: any} | {copy: any}} Step */

/** A function planned at load (the fast path): its parameters' buffers, its launches bound to their
 * tensors, and its copies between devices, run in program order. */
export class PlannedFunction {
  /** @param {VirtualMachine} vm @param {string} name @param {any} record */
  constructor(vm, name, record) {
    this.vm = vm;
    this.name = name;
    this.record = record;
    this.generation = 0;  // calls so far: a result left in place by an earlier one is stale
    this.bounds = upperBounds(record);
    const device = vm.device;
    /** @type {Map<number, {memory: any, offset: number}>} */
    this.params = new Map();
    for (const param of record.params) {
      const tensor = record.tensors[String(param.register)];
      if (!tensor) continue;
      const nbytes = evalShape(tensor.bytes, this.bounds);
      this.params.set(param.register, param.state ? vm.stateBuffer(param.name, nbytes, partOf(tensor)) : device.allocate(nbytes, partOf(tensor)));
    }
    this.tokens = new Map(record.memory.storages.map((/** @type {any} */ s) => [s.index, s]));
    this.results = resultRegisters(record);
    /** @type {Step[]} */
    this.steps = [];
    for (const op of record.code) {
      if (op.op === "launch") {
        const views = [...op.args, ...op.outs].map((/** @type {number} */ reg) => this.view(reg, this.bounds));
        this.steps.push({ op, kernel: vm.exe.kernels[op.kernel], bound: device.bind(vm.kernels[op.kernel], views, op) });
      } else if (op.op === "to_device") {
        this.steps.push({ copy: op });
      }
    }
  }

  /** The place of tensor register ``reg`` and its bytes at the sizes of ``heap``.
   * @param {number} reg @param {Record<string, number>} heap */
  view(reg, heap) {
    const loc = this.record.locations[String(reg)];
    const tensor = this.record.tensors[String(reg)];
    const nbytes = align4(evalShape(tensor.bytes, heap));
    if (loc.kind === "param") return { .../** @type {any} */ (this.params.get(reg)), nbytes };
    if (loc.kind === "constant") return { ...this.vm.constant(loc.name, partOf(tensor)), nbytes };
    const token = this.tokens.get(loc.token);
    const base = /** @type {{memory: any, offset: number}[]} */ (this.vm.arenas.get(this.name))[token.buffer];
    return { memory: base.memory, offset: base.offset + token.offset, nbytes };
  }

  /** @param {any[]} args @param {boolean} toHost */
  async call(args, toHost) {
    const { vm, record } = this;
    const device = vm.device;
    const { inputs, values, heap } = bindArguments(this.name, record, args, this.bounds);
    for (const param of inputs) {
      const place = this.params.get(param.register);
      const value = values.get(param.register);
      if (!place) continue;
      if (value instanceof DeviceTensor) {
        value.checkCurrent();
        await device.copy(value, { ...place, nbytes: value.nbytes });
      } else {
        device.upload(place.memory, place.offset, hostBytes(value));
      }
    }
    this.generation += 1;  // from here, results of the last call left in place are stale (one may have been an argument)
    for (const step of this.steps) {
      if ("copy" in step) {
        const [source, destination] = [step.copy.src, step.copy.dst].map((reg) => this.view(reg, heap));
        checkCopy(source.nbytes, destination.nbytes, this.name);
        vm.copies += 1;
        if (source.nbytes) await device.copy(source, destination);
        continue;
      }
      const { scalars, grid } = launchSizes(step.op, step.kernel, heap);
      if (Math.min(...grid) > 0) device.launch(step.bound, scalars, grid);
    }
    /** @type {Map<number, any>} */
    const results = new Map();
    for (const reg of this.results) {
      const tensor = record.tensors[String(reg)];
      const shape = tensor.shape.map((/** @type {string} */ d) => evalShape(d, heap));
      const view = this.view(reg, heap);
      results.set(reg, toHost ? fromDeviceBytes(await device.readBack(view), shape, tensor.dtype)
        : new DeviceTensor(this, this.generation, view.memory, view.offset, view.nbytes, shape, tensor.dtype));
    }
    device.flush();
    return assembleResult(record, results);
  }
}
