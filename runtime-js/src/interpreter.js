// The frame interpreter: runs any function of an executable (docs/format.md "Instructions") on a
// machine, the device-specific half (machine.js, over the VM's device; for a build split across
// devices, its composite device, which also makes the `to_device` copies).
// Functions that are one straight line over a static plan take the VM's precomputed fast path
// instead; this is for calls, branches, loops, tuples, coarse parameters, run-time allocation and
// host library functions.
//
// A call gets a frame: its registers, its shape heap and the pool blocks it allocated. A register
// either holds what the last instruction that wrote it put there, or, when it has a location
// (arena, constant, state, storage), the tensor there at the shapes the heap gives. When a frame
// returns, the blocks its result reaches go to the caller's frame and the rest back to the pool.

import { FunctionValue, matchValue, RuntimeCheckError, ShapeValue, describeValue } from "./checks.js";
import { deviceBytes, elementCount, fromDeviceBytes, fromHostArray, HostTensor, hostArray, HOST_ARRAYS, isHostArray,
  toDeviceBytes } from "./host.js";
import { checkBounds, launchSizes, upperBounds } from "./program.js";
import { evalShape } from "./shape.js";

/** @typedef {import("./pool.js").Block} Block */

/** A tensor in device memory during a call: where (a GPUBuffer and offset, or a WASM pointer as
 * offset with memory null), its device bytes, and the pool block it lies in (null: static memory). */
export class TensorValue {
  /** @param {any} memory @param {number} offset @param {number} nbytes @param {number[]} shape @param {string} dtype
   *  @param {Block|null} block */
  constructor(memory, offset, nbytes, shape, dtype, block = null) {
    this.memory = memory;
    this.offset = offset;
    this.nbytes = nbytes;
    this.shape = shape;
    this.dtype = dtype;
    this.block = block;
  }
}

/** A storage from `alloc_storage`: a pool block tensors are placed in. */
class StorageValue {
  /** @param {Block} block */
  constructor(block) {
    this.block = block;
  }
}

/**
 * What the interpreter needs of a device. ``device`` is an index into a split build's devices
 * (docs/format.md, "Devices"): one device ignores it; a split build's composite device places the
 * request on that part, and `copy` is the `to_device` instruction.
 * @typedef {{
 *   pool: {alloc: (nbytes: number, device?: number) => Block, release: (block: Block) => void},
 *   constant: (name: string, device?: number) => {memory: any, offset: number},
 *   state: (name: string, nbytes: number, device?: number) => {memory: any, offset: number},
 *   arena: (fn: string, buffer: number) => {memory: any, offset: number},
 *   write: (tensor: TensorValue, bytes: Uint8Array) => void,
 *   read: (tensor: TensorValue) => Uint8Array | Promise<Uint8Array>,
 *   launch: (op: any, tensors: TensorValue[], scalars: number[], grid: number[]) => void,
 *   inPlace: (value: any) => TensorValue | null,
 *   leaveInPlace: (fn: any, generation: number, tensor: TensorValue) => any,
 *   flush: () => void,
 *   copy?: (source: TensorValue, destination: TensorValue) => Promise<void>,
 * }} Machine
 */

/** How deep calls may nest before a runaway recursion is an error rather than a crash. */
const MAX_DEPTH = 2000;

class Frame {
  /** @param {CompiledFunction} fn @param {Frame|null} caller */
  constructor(fn, caller) {
    this.fn = fn;
    this.caller = caller;
    /** @type {any[]} */ this.regs = new Array(fn.record.registers ?? 0);
    /** @type {Record<string, number>} */ this.heap = {};
    /** @type {Set<Block>} */ this.owned = new Set();
  }
}

/** A function record with what the interpreter looks up on every call, computed once. */
class CompiledFunction {
  /** @param {string} name @param {any} record */
  constructor(name, record) {
    this.name = name;
    this.record = record;
    this.inputs = record.params.filter((/** @type {any} */ p) => !p.state);
    /** @type {Map<number, string>} */
    this.stateParams = new Map(record.params.filter((/** @type {any} */ p) => p.state).map((/** @type {any} */ p) => [p.register, p.name]));
    this.bounds = upperBounds(record);
    this.tokens = new Map(record.memory.storages.map((/** @type {any} */ s) => [s.index, s]));
  }
}

/** A function the interpreter runs, as the VMs' function tables hold it. */
export class InterpretedFunction {
  /** @param {Interpreter} interpreter @param {string} name */
  constructor(interpreter, name) {
    this.interpreter = interpreter;
    this.name = name;
    this.generation = 0;  // activations so far: a result left in place by an earlier one is stale
    /** @type {Block[]} */ this.held = [];  // the blocks of its last results left in place
  }

  /** @param {any[]} args @param {boolean} toHost */
  call(args, toHost) {
    return this.interpreter.callFromHost(this.name, args, toHost, this);
  }
}

export class Interpreter {
  /**
   * @param {any} exe the executable
   * @param {Machine} machine
   * @param {Map<string, {generation: number}>} handles each function's object in the VM's table,
   *   whose generation marks its results in place stale once it runs again
   * @param {Map<string, Function>} libraries
   */
  constructor(exe, machine, handles, libraries) {
    this.exe = exe;
    this.machine = machine;
    this.handles = handles;
    this.libraries = libraries;
    /** @type {Map<string, CompiledFunction>} */
    this.functions = new Map(Object.entries(exe.functions).map(([name, record]) => [name, new CompiledFunction(name, record)]));
  }

  /**
   * A call from the host: arguments are HostTensors, results of earlier calls left in place,
   * numbers and arrays (tuples). The result comes back read to the host, or left in place.
   * @param {string} name @param {any[]} args @param {boolean} toHost
   * @param {{generation: number, held: Block[]}} handle the function's entry in the VM's table
   */
  async callFromHost(name, args, toHost, handle) {
    const { machine } = this;
    const fn = /** @type {CompiledFunction} */ (this.functions.get(name));
    const entry = new Frame(fn, null);
    const previous = handle.held;  // the last call's results: valid until this call is done
    handle.held = [];
    /** @type {Set<Block>} */
    let kept = new Set();
    let done = false;
    try {
      const values = args.map((arg, i) => this.upload(arg, entry, fn.inputs[i]?.device ?? 0));
      const result = await this.invoke(name, values, entry, 0);
      machine.flush();
      kept = reachable(result);
      const value = toHost ? await this.toHost(result) : this.leaveInPlace(result, handle);
      done = true;
      return value;
    } finally {
      machine.flush();
      for (const block of entry.owned) {
        if (done && !toHost && kept.has(block)) handle.held.push(block);
        else machine.pool.release(block);
      }
      // A failed call leaves the last results' blocks alone: one may still be current.
      if (!done) handle.held.push(...previous);
      else for (const block of previous) {
        if (!toHost && kept.has(block)) handle.held.push(block);
        else machine.pool.release(block);
      }
    }
  }

  /** A host argument as a value in device memory (owned by the entry frame), on device ``device`` of a split build.
   * @param {any} arg @param {Frame} frame @param {number} device @returns {any} */
  upload(arg, frame, device) {
    if (Array.isArray(arg)) return arg.map((item) => this.upload(item, frame, device));
    if (typeof arg === "bigint") return Number(arg);
    const inPlace = this.machine.inPlace(arg);
    if (inPlace) return inPlace;
    if (arg instanceof HostTensor) {
      const tensor = this.allocate(arg.shape, arg.dtype, frame, device);
      this.machine.write(tensor, toDeviceBytes(arg.data, arg.dtype));
      return tensor;
    }
    return arg;  // a number, a FunctionValue ...: the parameter's match says whether it fits
  }

  /** A tensor from the pool (of device ``device``), owned by ``frame``.
   * @param {number[]} shape @param {string} dtype @param {Frame} frame @param {number} [device] */
  allocate(shape, dtype, frame, device = 0) {
    const nbytes = deviceBytes(elementCount(shape), dtype);
    const block = this.machine.pool.alloc(nbytes, device);
    frame.owned.add(block);
    return new TensorValue(block.memory, block.offset, nbytes, shape, dtype, block);
  }

  /** @param {any} value @returns {Promise<any>} */
  async toHost(value) {
    if (value instanceof TensorValue) return fromDeviceBytes(await this.machine.read(value), value.shape, value.dtype);
    if (Array.isArray(value)) return Promise.all(value.map((v) => this.toHost(v)));
    return value;
  }

  /** @param {any} value @param {{generation: number}} handle @returns {any} */
  leaveInPlace(value, handle) {
    if (value instanceof TensorValue) return this.machine.leaveInPlace(handle, handle.generation, value);
    if (Array.isArray(value)) return value.map((v) => this.leaveInPlace(v, handle));
    return value;
  }

  /**
   * Run function ``name`` in a new frame on ``args`` (values in device memory).
   * @param {string} name @param {any[]} args @param {Frame} caller @param {number} depth @returns {Promise<any>}
   */
  async invoke(name, args, caller, depth) {
    const fn = this.functions.get(name);
    if (!fn) throw new RuntimeCheckError(`the executable has no function '${name}'`);
    if (args.length !== fn.inputs.length) {
      throw new RuntimeCheckError(`${name} takes ${fn.inputs.length} arguments (${fn.inputs.map((p) => p.name).join(", ")}), got ${args.length}`);
    }
    if (depth > MAX_DEPTH) throw new RuntimeCheckError(`${name}: calls nest more than ${MAX_DEPTH} deep (runaway recursion?)`);
    const handle = this.handles.get(name);
    if (handle) handle.generation += 1;  // its arena is about to be rewritten: results left there are stale
    const frame = new Frame(fn, caller);
    fn.inputs.forEach((param, i) => { frame.regs[param.register] = args[i]; });
    try {
      const result = await this.execute(frame, depth);
      // The result's blocks move to the caller; everything else this frame allocated is free again.
      const kept = reachable(result);
      for (const block of frame.owned) {
        if (kept.has(block)) caller.owned.add(block);
        else this.machine.pool.release(block);
      }
      return result;
    } catch (error) {
      for (const block of frame.owned) this.machine.pool.release(block);
      throw error;
    }
  }

  /** @param {Frame} frame @param {number} depth */
  async execute(frame, depth) {
    const { code } = frame.fn.record;
    const { machine } = this;
    let pc = 0;
    for (;;) {
      const op = code[pc];
      if (op === undefined) throw new Error(`${frame.fn.name}: the code runs past its end (instruction ${pc})`);
      pc += 1;
      switch (op.op) {
        case "match": {
          const before = Object.keys(frame.heap).length;
          matchValue(op, this.read(frame, op.reg), frame.heap);
          if (Object.keys(frame.heap).length !== before) checkBounds(frame.fn.name, frame.fn.bounds, frame.heap);
          break;
        }
        case "launch": {
          const kernel = this.exe.kernels[op.kernel];
          const { scalars, grid } = launchSizes(op, kernel, frame.heap);
          const tensors = [...op.args, ...op.outs].map((/** @type {number} */ reg) => this.readTensor(frame, reg, `kernel ${kernel.name}`));
          if (Math.min(...grid) > 0) machine.launch(op, tensors, scalars, grid);
          break;
        }
        case "to_device": {
          if (!machine.copy) throw new RuntimeCheckError(`${frame.fn.name}: to_device copies between the devices of a split build, and this executable has one`);
          await machine.copy(this.readTensor(frame, op.src, "to_device"), this.readTensor(frame, op.dst, "to_device"));
          break;
        }
        case "alloc_storage": {
          const block = machine.pool.alloc(evalShape(op.size, frame.heap), op.device ?? 0);
          frame.owned.add(block);
          frame.regs[op.dst] = new StorageValue(block);
          break;
        }
        case "alloc_tensor":
          frame.regs[op.dst] = this.allocate(op.shape.map((/** @type {string} */ d) => evalShape(d, frame.heap)), op.dtype, frame, op.device ?? 0);
          break;
        case "call": {
          let callee = op.func;
          if (callee === undefined || callee === null) {
            const value = this.read(frame, op.callee);
            if (!(value instanceof FunctionValue)) {
              throw new RuntimeCheckError(`${frame.fn.name}: register ${op.callee} holds ${describeValue(value)}, not a function to call`);
            }
            callee = value.name;
          }
          const args = op.args.map((/** @type {number} */ reg) => this.read(frame, reg));
          frame.regs[op.dst] = await this.invoke(callee, args, frame, depth + 1);
          break;
        }
        case "call_builtin":
          await this.callBuiltin(frame, op);
          break;
        case "func":
          if (!this.functions.has(op.name)) throw new RuntimeCheckError(`${frame.fn.name}: the executable has no function '${op.name}'`);
          frame.regs[op.dst] = new FunctionValue(op.name);
          break;
        case "if":
          if (!(await this.condition(frame, op.cond))) pc = op.else;
          break;
        case "goto":
          pc = op.target;
          break;
        case "prim":
          frame.regs[op.dst] = evalShape(op.value, frame.heap);
          break;
        case "move":
          frame.regs[op.dst] = this.read(frame, op.src);
          break;
        case "tuple":
          frame.regs[op.dst] = op.fields.map((/** @type {number} */ reg) => this.read(frame, reg));
          break;
        case "get": {
          const tuple = this.read(frame, op.src);
          if (!Array.isArray(tuple) || op.index >= tuple.length) {
            throw new RuntimeCheckError(`${frame.fn.name}: field ${op.index} of ${describeValue(tuple)}, which has no such field`);
          }
          frame.regs[op.dst] = tuple[op.index];
          break;
        }
        case "shape":
          frame.regs[op.dst] = new ShapeValue(op.values.map((/** @type {string} */ v) => evalShape(v, frame.heap)));
          break;
        case "ret":
          return this.read(frame, op.src);
        default:
          throw new Error(`${frame.fn.name}: unknown instruction ${JSON.stringify(op.op)} at ${pc - 1}`);
      }
    }
  }

  /** The value of a register: what an instruction wrote there, else the tensor at its location.
   * @param {Frame} frame @param {number} reg @returns {any} */
  read(frame, reg) {
    const value = frame.regs[reg];
    if (value !== undefined) return value;
    const { record, name } = frame.fn;
    const loc = record.locations[String(reg)];
    const tensor = record.tensors[String(reg)];
    if (!loc || !tensor) throw new Error(`${name}: register ${reg} is read before anything is written to it`);
    const shape = tensor.shape.map((/** @type {string} */ d) => evalShape(d, frame.heap));
    const nbytes = evalShape(tensor.bytes, frame.heap);
    /** @type {{memory: any, offset: number}} */
    let place;
    if (loc.kind === "constant") place = this.machine.constant(loc.name, tensor.device ?? 0);
    else if (loc.kind === "param") {
      const state = frame.fn.stateParams.get(reg);
      if (state === undefined) throw new Error(`${name}: parameter register ${reg} has no value`);
      place = this.machine.state(state, evalShape(tensor.bytes, frame.fn.bounds), tensor.device ?? 0);
    } else if (loc.kind === "arena") {
      const token = frame.fn.tokens.get(loc.token);
      const base = this.machine.arena(name, token.buffer);
      place = { memory: base.memory, offset: base.offset + token.offset };
    } else if (loc.kind === "storage") {
      const storage = frame.regs[loc.register];
      if (!(storage instanceof StorageValue)) throw new Error(`${name}: register ${reg} lies in storage register ${loc.register}, which holds no storage`);
      if (nbytes > storage.block.size) throw new Error(`${name}: a tensor of ${nbytes} bytes does not fit its storage of ${storage.block.size}`);
      return new TensorValue(storage.block.memory, storage.block.offset, nbytes, shape, tensor.dtype, storage.block);
    } else throw new Error(`${name}: register ${reg} has an unknown location kind ${loc.kind}`);
    return new TensorValue(place.memory, place.offset, nbytes, shape, tensor.dtype, null);
  }

  /** @param {Frame} frame @param {number} reg @param {string} user */
  readTensor(frame, reg, user) {
    const value = this.read(frame, reg);
    if (!(value instanceof TensorValue)) throw new RuntimeCheckError(`${frame.fn.name}: ${user} needs a tensor in register ${reg}, got ${describeValue(value)}`);
    return value;
  }

  /** Whether an `if` goes on at the next instruction: a prim is true unless 0; a one-element tensor
   * is read back (bool: a u32 word, int64: two words, int32, uint32, float32).
   * @param {Frame} frame @param {number} reg */
  async condition(frame, reg) {
    const value = this.read(frame, reg);
    if (typeof value === "number" || typeof value === "bigint" || typeof value === "boolean") return Number(value) !== 0;
    if (!(value instanceof TensorValue) || elementCount(value.shape) !== 1) {
      throw new RuntimeCheckError(`${frame.fn.name}: an if needs a prim or a one-element tensor, got ${describeValue(value)}`);
    }
    if (!(value.dtype in HOST_ARRAYS) || value.dtype === "float16") {
      throw new RuntimeCheckError(`${frame.fn.name}: an if cannot test a ${value.dtype} tensor`);
    }
    const element = fromDeviceBytes(await this.machine.read(value), [1], value.dtype).data[0];
    return Number(element) !== 0;
  }

  /** `call_builtin`: tensors to host arrays, the function, outs back, and its result to `dst`.
   * @param {Frame} frame @param {any} op */
  async callBuiltin(frame, op) {
    const fn = this.libraries.get(op.name);
    if (!fn) throw new Error(`${frame.fn.name}: the library function '${op.name}' is not registered`);
    const inputs = await Promise.all(op.args.map(async (/** @type {number} */ reg) => {
      const value = this.read(frame, reg);
      if (value instanceof TensorValue) return hostArray(fromDeviceBytes(await this.machine.read(value), value.shape, value.dtype));
      if (typeof value === "number") return value;
      throw new RuntimeCheckError(`${op.name}: arguments are tensors or integers, got ${describeValue(value)}`);
    }));
    const outs = op.outs.map((/** @type {number} */ reg) => this.readTensor(frame, reg, op.name));
    const outArrays = outs.map((/** @type {TensorValue} */ t) => {
      const Typed = /** @type {any} */ (HOST_ARRAYS)[t.dtype];
      if (!Typed) throw new Error(`${op.name}: the JS runtime has no host form for its ${t.dtype} output`);
      return hostArray(new HostTensor(new Typed(elementCount(t.shape)), t.shape, t.dtype));
    });
    const scalars = (op.scalars ?? []).map((/** @type {string} */ s) => evalShape(s, frame.heap));
    let result;
    try {
      result = await fn(...inputs, ...outArrays, ...scalars);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      throw new Error(`${frame.fn.name}: the library function ${op.name} failed: ${message}`, { cause: error });
    }
    outs.forEach((/** @type {TensorValue} */ t, /** @type {number} */ i) => this.machine.write(t, toDeviceBytes(outArrays[i], t.dtype)));
    if (op.dst === null || op.dst === undefined) return;
    if (typeof result === "number" || typeof result === "bigint") {
      frame.regs[op.dst] = Number(result);
    } else if (isHostArray(result)) {
      const host = fromHostArray(result);
      const tensor = this.allocate(host.shape, host.dtype, frame);
      this.machine.write(tensor, toDeviceBytes(host.data, host.dtype));
      frame.regs[op.dst] = tensor;
    } else {
      throw new Error(`${frame.fn.name}: the library function ${op.name} returned ${describeValue(result)}; ` +
        "a result is an integer or a typed array");
    }
  }
}

/** The pool blocks a value reaches. @param {any} value @param {Set<Block>} [into] @returns {Set<Block>} */
function reachable(value, into = new Set()) {
  if (value instanceof TensorValue && value.block) into.add(value.block);
  else if (Array.isArray(value)) for (const item of value) reachable(item, into);
  return into;
}
