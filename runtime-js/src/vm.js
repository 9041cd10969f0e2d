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
import { fromDeviceBytes, HostTensor, weightDeviceBytes } from "./host.js";
import { InterpretedFunction, Interpreter } from "./interpreter.js";
import { DeviceMachine, DeviceTensor } from "./machine.js";
import { isPlanned, partOf, PlannedFunction } from "./planned-function.js";
import { checkDeviceFit } from "./plan-checks.js";
import { RuntimeCheckError, upperBounds } from "./program.js";
import { evalShape } from "./shape.js";

export { DeviceTensor, HostTensor, RuntimeCheckError };

export class VirtualMachine {
  /**
   * @param {any} device the device to run on (devices/index.js: openDevice, or new WebGPUDevice(gpuDevice), new WasmDevice())
   * @param {any} exe the parsed executable.json
   * @param {Map<string, ArrayBufferView>} weights the constants by name (tensor-cache records: numpy's bytes,
   *   each with the record's ``dtype`` as a property where the loader knows it, else the dtype the executable's tensors give it)
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
    // Each weight as a device holds it: bool, int8, uint8, int16 and uint16 widened to a word per element.
    const dtypes = constantDtypes(exe);
    /** @type {Map<string, Uint8Array>} */
    const placed = new Map();
    for (const name of exe.constants) {
      const data = /** @type {ArrayBufferView & {dtype?: string}} */ (weights.get(name));
      const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      placed.set(name, weightDeviceBytes(bytes, data.dtype ?? dtypes.get(name) ?? ""));
    }
    // Room for everything placed now, asked for at once (a WebAssembly memory grows once, not per weight).
    for (const [part, nbytes] of staticBytes(exe, placed)) device.reserve(nbytes, part);
    this.kernels = await device.loadKernels(exe.kernels, modules);
    for (const name of exe.constants) {
      const bytes = /** @type {Uint8Array} */ (placed.get(name));
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
  const other = exe.kernels.find((/** @type {any} */ k) => k.backend !== device.backend);
  if (other) throw new DeviceError(`kernel ${other.name} is for the ${other.backend} backend; the ${device.kind} device runs ${device.backend}`);
}

/** The dtype of each weight, as the executable's tensors that are constants say (for weights given without one).
 * @param {any} exe @returns {Map<string, string>} */
function constantDtypes(exe) {
  /** @type {Map<string, string>} */
  const dtypes = new Map();
  for (const record of Object.values(exe.functions)) {
    for (const [reg, loc] of Object.entries(record.locations ?? {})) {
      const dtype = record.tensors?.[reg]?.dtype;
      if (/** @type {any} */ (loc)?.kind === "constant" && typeof dtype === "string") dtypes.set(/** @type {any} */ (loc).name, dtype);
    }
  }
  return dtypes;
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
