// The WebAssembly virtual machine: the same executable format, with c-wasm kernels in place of WGSL.
//
// Everything lives in one WebAssembly.Memory that the kernel module imports: above the module's own
// data and stack (its __heap_base) come the weights, the state (KV cache), and for each function its
// parameters at their upper bounds and the arena of its static memory plan. Pointers are byte
// offsets into that memory. A launch calls the kernel's export with the pointers of its tensors,
// its scalars and its grid; the C code loops over workgroups and threads (codegen/c).
//
// Straight-line functions over a static plan (the LLM's) have their parameters placed at load and
// run as a precomputed list of launches; every other function runs in the frame interpreter
// (interpreter.js) over WasmMachine below, whose pool takes blocks from above the static layout,
// growing the memory when it needs more.

import { libraryRegistry } from "./builtins.js";
import { DeviceError } from "./device.js";
import { fromDeviceBytes, toDeviceBytes } from "./host.js";
import { InterpretedFunction, Interpreter, TensorValue } from "./interpreter.js";
import { checkDeviceFit, WASM_FIT } from "./plan-checks.js";
import { BlockPool } from "./pool.js";
import { evalShape } from "./shape.js";
import {
  assembleResult, bindArguments, expectOneDevice, FunctionTable, isStraightLine, launchSizes, ResultInPlace, resultRegisters, RuntimeCheckError,
  upperBounds,
} from "./program.js";

const PAGE = 65536;
/** A module that imports env.memory and exports __heap_base = 0, for executables without kernels. */
const EMPTY_MODULE = Uint8Array.of(0, 0x61, 0x73, 0x6d, 1, 0, 0, 0,
  2, 0x0f, 1, 3, 0x65, 0x6e, 0x76, 6, 0x6d, 0x65, 0x6d, 0x6f, 0x72, 0x79, 2, 0, 0,  // import env.memory
  6, 6, 1, 0x7f, 0, 0x41, 0, 0x0b,  // global i32 const 0
  7, 0x0f, 1, 11, 0x5f, 0x5f, 0x68, 0x65, 0x61, 0x70, 0x5f, 0x62, 0x61, 0x73, 0x65, 3, 0);  // export __heap_base
const ALIGN = 16;
const alignUp = (/** @type {number} */ n) => Math.ceil(n / ALIGN) * ALIGN;

/** A function's result left in WASM memory (see ResultInPlace). */
export class WasmTensor extends ResultInPlace {
  /** @param {{name: string, generation: number}} fn @param {number} generation @param {number} pointer @param {number} nbytes
   *  @param {number[]} shape @param {string} dtype */
  constructor(fn, generation, pointer, nbytes, shape, dtype) {
    super(fn, generation, nbytes, shape, dtype);
    this.pointer = pointer;
  }
}

export class WasmVirtualMachine extends FunctionTable {
  /**
   * @param {any} exe the parsed executable.json (target kind "wasm")
   * @param {Map<string, ArrayBufferView>} weights
   * @param {Map<string, ArrayBuffer>} modules the kernel module files by path: one WASM module
   * @param {{libraries?: Record<string, Function>}} [options] host functions `call_builtin` may call, by name
   */
  static async create(exe, weights, modules, { libraries } = {}) {
    expectOneDevice(exe, "WasmVirtualMachine");
    checkDeviceFit(exe, [WASM_FIT], "executable.json", (message) => new DeviceError(message));
    const registry = libraryRegistry(exe, libraries);
    const paths = [...new Set(exe.kernels.map((/** @type {any} */ k) => k.module))];
    if (paths.length > 1) throw new Error(`the WASM runtime runs kernels of one module; this executable has ${paths.join(", ")}`);
    // A program of calls and library functions alone has no kernels: an empty module stands in.
    const wasmBytes = paths.length ? modules.get(paths[0]) : EMPTY_MODULE;
    if (!wasmBytes) throw new Error(`the kernel module ${paths[0]} was not loaded`);
    const module = await WebAssembly.compile(wasmBytes);
    const plan = layout(exe, weights);
    const memory = new WebAssembly.Memory({ initial: Math.ceil((plan.bytes + (1 << 20)) / PAGE) });
    const instance = await WebAssembly.instantiate(module, { env: { memory } });
    return new WasmVirtualMachine(exe, memory, instance, plan, weights, registry);
  }

  /** @param {any} exe @param {WebAssembly.Memory} memory @param {WebAssembly.Instance} instance
   *  @param {{bytes: number, place: (base: number) => any}} plan @param {Map<string, ArrayBufferView>} weights
   *  @param {Map<string, Function>} libraries */
  constructor(exe, memory, instance, plan, weights, libraries) {
    super();
    this.exe = exe;
    this.memory = memory;
    this.exports = /** @type {any} */ (instance.exports);
    const base = alignUp(Number(this.exports.__heap_base.value));
    const need = Math.ceil((base + plan.bytes) / PAGE) - memory.buffer.byteLength / PAGE;
    if (need > 0) memory.grow(need);
    const places = plan.place(base);
    this.constants = places.constants;
    this.state = places.state;
    for (const [name, pointer] of this.constants) {
      const data = /** @type {ArrayBufferView} */ (weights.get(name));
      this.bytes().set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), pointer);
    }
    this.kernelExports = exe.kernels.map((/** @type {any} */ k) => {
      const fn = this.exports[k.entry_point];
      if (typeof fn !== "function") throw new Error(`${k.module} does not export ${k.entry_point} (kernel ${k.name})`);
      return fn;
    });
    this.places = places.functions;
    this.machine = new WasmMachine(this, base + plan.bytes);
    this.interpreter = new Interpreter(exe, this.machine, this.functions, libraries);
    for (const [name, record] of Object.entries(exe.functions)) {
      this.functions.set(name, isStraightLine(record) ? new WasmFunction(this, name, record, places.functions.get(name)) :
        new InterpretedFunction(this.interpreter, name));
    }
  }

  bytes() {
    return new Uint8Array(this.memory.buffer);
  }

  resetState() {
    for (const { pointer, nbytes } of this.state.values()) this.bytes().fill(0, pointer, pointer + nbytes);
  }
}

/** Where everything goes, as offsets from a base the module decides (its __heap_base).
 * @param {any} exe @param {Map<string, ArrayBufferView>} weights */
function layout(exe, weights) {
  let end = 0;
  const take = (/** @type {number} */ nbytes) => {
    const at = end;
    end = alignUp(end + Math.max(nbytes, 4));
    return at;
  };
  const constants = new Map();
  for (const name of exe.constants) {
    const data = weights.get(name);
    if (!data) throw new Error(`the weights have no tensor '${name}' that the executable uses`);
    constants.set(name, take(data.byteLength));
  }
  const state = new Map();
  const functions = new Map();
  for (const [name, record] of Object.entries(exe.functions)) {
    const bounds = upperBounds(record);
    const straight = isStraightLine(record);  // only these take their parameters at fixed places
    const params = new Map();
    for (const param of record.params) {
      const tensor = record.tensors[String(param.register)];
      if (!tensor || !(param.state || straight)) continue;
      const nbytes = evalShape(tensor.bytes, bounds);
      if (param.state) {
        if (!state.has(param.name)) state.set(param.name, { pointer: take(nbytes), nbytes });
        params.set(param.register, { state: param.name });
      } else {
        params.set(param.register, { pointer: take(nbytes) });
      }
    }
    const arena = record.memory.buffers.map((/** @type {number} */ size) => take(size));
    functions.set(name, { params, arena });
  }
  return {
    bytes: end,
    place: (/** @type {number} */ base) => {
      const shift = (/** @type {number} */ offset) => base + offset;
      const placedState = new Map([...state].map(([n, s]) => [n, { pointer: shift(s.pointer), nbytes: s.nbytes }]));
      const placedFunctions = new Map([...functions].map(([n, f]) => [n, {
        params: new Map([...f.params].map(([reg, p]) => [reg, p.state ? placedState.get(p.state).pointer : shift(p.pointer)])),
        arena: f.arena.map(shift),
      }]));
      return { constants: new Map([...constants].map(([n, p]) => [n, shift(p)])), state: placedState, functions: placedFunctions };
    },
  };
}

/** A straight-line function, prepared at load (the fast path). A split build's VM (split-vm.js) runs its
 * steps one by one: writeInputs, runLaunches (in parts, between copies), resultTensors. */
export class WasmFunction {
  /** @param {WasmVirtualMachine} vm @param {string} name @param {any} record @param {any} places */
  constructor(vm, name, record, places) {
    this.vm = vm;
    this.name = name;
    this.record = record;
    this.places = places;
    this.generation = 0;
    this.held = [];
    this.bounds = upperBounds(record);
    this.tokens = new Map(record.memory.storages.map((/** @type {any} */ s) => [s.index, s]));
    this.launches = record.code.filter((/** @type {any} */ op) => op.op === "launch").map((/** @type {any} */ op) => ({
      op, kernel: vm.exe.kernels[op.kernel], run: vm.kernelExports[op.kernel],
      pointers: [...op.args, ...op.outs].map((/** @type {number} */ reg) => this.pointer(reg)),
    }));
  }

  /** @param {number} reg */
  pointer(reg) {
    const loc = this.record.locations[String(reg)];
    if (loc.kind === "param") return this.places.params.get(reg);
    if (loc.kind === "constant") return this.vm.constants.get(loc.name);
    const token = this.tokens.get(loc.token);
    return this.places.arena[token.buffer] + token.offset;
  }

  /** @param {any[]} args @param {boolean} toHost */
  async call(args, toHost) {
    const { inputs, values, heap } = bindArguments(this.name, this.record, args, this.bounds);
    this.writeInputs(inputs, values);
    this.generation += 1;  // from here, results of the last call left in place are stale (one may have been an argument)
    this.runLaunches(heap);
    return assembleResult(this.record, this.resultTensors(heap, toHost));
  }

  /** Write the arguments into their places in memory; parameters without one here are skipped.
   * @param {any[]} inputs the parameter records @param {Map<number, any>} values by register */
  writeInputs(inputs, values) {
    const bytes = this.vm.bytes();
    for (const param of inputs) {
      const pointer = this.places.params.get(param.register);
      const value = values.get(param.register);
      if (pointer === undefined) continue;
      if (value instanceof WasmTensor) {
        value.checkCurrent();
        bytes.copyWithin(pointer, value.pointer, value.pointer + value.nbytes);
      } else {
        const direct = value.dtype !== "bool";  // the other dtypes are laid out in memory as on the host
        bytes.set(direct ? new Uint8Array(value.data.buffer, value.data.byteOffset, value.data.byteLength) :
          toDeviceBytes(value.data, value.dtype), pointer);
      }
    }
  }

  /** Run launches ``from`` to ``to`` (of this function's, in program order) with this call's sizes.
   * @param {Record<string, number>} heap @param {number} [from] @param {number} [to] */
  runLaunches(heap, from = 0, to = this.launches.length) {
    for (const { op, kernel, run, pointers } of this.launches.slice(from, to)) {
      const { scalars, grid } = launchSizes(op, kernel, heap);
      if (Math.min(...grid) > 0) run(...pointers, ...scalars, ...grid);
    }
  }

  /** The result tensors by register: read to the host, or left in place as results of ``owner`` (this
   * function, or the split function it is a share of).
   * @param {Record<string, number>} heap @param {boolean} toHost @param {{name: string, generation: number}} [owner]
   * @returns {Map<number, any>} */
  resultTensors(heap, toHost, owner = this) {
    const { vm, record } = this;
    /** @type {Map<number, any>} */
    const results = new Map();
    for (const reg of resultRegisters(record)) {
      const tensor = record.tensors[String(reg)];
      const shape = tensor.shape.map((/** @type {string} */ d) => evalShape(d, heap));
      const nbytes = evalShape(tensor.bytes, heap);
      const pointer = this.pointer(reg);
      if (!toHost) {
        results.set(reg, new WasmTensor(owner, owner.generation, pointer, nbytes, shape, tensor.dtype));
        continue;
      }
      results.set(reg, fromDeviceBytes(new Uint8Array(vm.memory.buffer, pointer, nbytes), shape, tensor.dtype));
    }
    return results;
  }
}

/** The interpreter's WebAssembly side (interpreter.js, Machine): pointers into the one memory. */
class WasmMachine {
  /** @param {WasmVirtualMachine} vm @param {number} start the first byte above the static layout */
  constructor(vm, start) {
    this.vm = vm;
    this.end = alignUp(start);
    this.pool = new BlockPool((size) => {
      const pointer = this.end;
      this.end = alignUp(pointer + size);
      const need = Math.ceil(this.end / PAGE) - vm.memory.buffer.byteLength / PAGE;
      if (need > 0) {
        try {
          vm.memory.grow(need);
        } catch {
          throw new RuntimeCheckError(`WebAssembly memory cannot grow to ${this.end} bytes for a tensor of ${size}`);
        }
      }
      return { memory: null, offset: pointer, size };
    });
  }

  /** @param {string} name */
  constant(name) {
    return { memory: null, offset: this.vm.constants.get(name) };
  }

  /** @param {string} name */
  state(name) {
    const state = this.vm.state.get(name);
    if (!state) throw new Error(`the state tensor '${name}' has no place in memory`);
    return { memory: null, offset: state.pointer };
  }

  /** @param {string} fn @param {number} buffer */
  arena(fn, buffer) {
    return { memory: null, offset: this.vm.places.get(fn).arena[buffer] };
  }

  /** @param {TensorValue} tensor @param {Uint8Array} bytes */
  write(tensor, bytes) {
    this.vm.bytes().set(bytes, tensor.offset);
  }

  /** @param {TensorValue} tensor */
  read(tensor) {
    return this.vm.bytes().slice(tensor.offset, tensor.offset + tensor.nbytes);
  }

  /** @param {any} op @param {TensorValue[]} tensors @param {number[]} scalars @param {number[]} grid */
  launch(op, tensors, scalars, grid) {
    this.vm.kernelExports[op.kernel](...tensors.map((t) => t.offset), ...scalars, ...grid);
  }

  flush() {}

  /** @param {any} value */
  inPlace(value) {
    if (!(value instanceof WasmTensor)) return null;
    value.checkCurrent();
    return new TensorValue(null, value.pointer, value.nbytes, value.shape, value.dtype, null);
  }

  /** @param {{name: string, generation: number}} fn @param {number} generation @param {TensorValue} t */
  leaveInPlace(fn, generation, t) {
    return new WasmTensor(fn, generation, t.offset, t.nbytes, t.shape, t.dtype);
  }
}
