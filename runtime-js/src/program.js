// What the VM (vm.js) does with a function of the executable (docs/format.md) on its fast path, a
// function that is one straight line of launches over a static memory plan: check the arguments and bind the shape heap as the `match` instructions say,
// enforce the upper bounds memory was planned for, and follow `tuple`/`get` to the result.
// Everything else runs in the frame interpreter (interpreter.js).

import { matchValue, RuntimeCheckError } from "./checks.js";
import { evalShape } from "./shape.js";

export { RuntimeCheckError };

/** Instructions of a straight line: no calls, branches, run-time allocation or host functions. */
const STRAIGHT_LINE = new Set(["match", "launch", "tuple", "get", "ret"]);

/**
 * Whether a function can run as a precomputed straight line: its code has no control flow, every
 * tensor lives where the static plan put it, and every parameter and result has a known shape
 * (so that all launches can be bound once, at load). @param {any} record
 */
export function isStraightLine(record) {
  if (!record.memory.static || !record.code.every((/** @type {any} */ op) => STRAIGHT_LINE.has(op.op))) return false;
  const known = (/** @type {number} */ reg) => record.tensors[String(reg)] !== undefined && record.locations[String(reg)] !== undefined;
  for (const param of record.params) {
    const { sinfo } = param;
    if (sinfo.kind === "prim") continue;
    if (sinfo.kind !== "tensor" || !sinfo.shape || !sinfo.dtype || !known(param.register)) return false;
  }
  for (const op of record.code) {
    if (op.op === "launch" && ![...op.args, ...op.outs].every(known)) return false;
  }
  /** @param {number} reg @returns {boolean} */
  const tensorsOnly = (reg) => {
    const tuple = record.code.find((/** @type {any} */ op) => op.op === "tuple" && op.dst === reg);
    return tuple ? tuple.fields.every(tensorsOnly) : known(reg);
  };
  return tensorsOnly(record.code[record.code.length - 1].src);
}

/** A function's result left where it was computed (a GPU buffer, WASM memory) for the next
 * function to read: valid until that function runs again, an error after. */
export class ResultInPlace {
  /** @param {{name: string, generation: number}} fn @param {number} generation @param {number} nbytes
   *  @param {number[]} shape @param {string} dtype */
  constructor(fn, generation, nbytes, shape, dtype) {
    this.fn = fn;
    this.generation = generation;
    this.nbytes = nbytes;
    this.shape = shape;
    this.dtype = dtype;
  }

  checkCurrent() {
    if (this.fn.generation !== this.generation) {
      throw new RuntimeCheckError(`this result of ${this.fn.name} was overwritten by a later call of ${this.fn.name}`);
    }
  }
}

/** @param {any} record a function of executable.json */
export function upperBounds(record) {
  /** @type {Record<string, number>} */
  const bounds = {};
  for (const [symbol, info] of Object.entries(record.symbols)) bounds[symbol] = /** @type {any} */ (info).upper_bound;
  return bounds;
}

/**
 * The arguments by register and the shape heap of one call, after every check.
 * @param {string} name @param {any} record @param {any[]} args @param {Record<string, number>} bounds
 */
export function bindArguments(name, record, args, bounds) {
  const inputs = record.params.filter((/** @type {any} */ p) => !p.state);
  if (args.length !== inputs.length) {
    throw new RuntimeCheckError(`${name} takes ${inputs.length} arguments (${inputs.map((/** @type {any} */ p) => p.name).join(", ")}), got ${args.length}`);
  }
  /** @type {Map<number, any>} */
  const values = new Map(inputs.map((/** @type {any} */ p, /** @type {number} */ i) => [p.register, args[i]]));
  /** @type {Record<string, number>} */
  const heap = {};
  for (const op of record.code) {
    if (op.op !== "match") continue;
    let value = values.get(op.reg);
    if (value === undefined) {  // a tensor the program or the state holds: its shape is known symbolically
      const tensor = record.tensors[String(op.reg)];
      if (!tensor) continue;  // a tuple of them (a result): its fields are known tensors too
      value = { shape: tensor.shape.map((/** @type {string} */ d) => evalShape(d, heap)), dtype: tensor.dtype };
    }
    matchValue(op, value, heap);
  }
  checkBounds(name, bounds, heap);
  return { inputs, values, heap };
}

/** Sizes past the upper bounds memory was planned for are an error, not an overrun.
 * @param {string} name @param {Record<string, number>} bounds @param {Record<string, number>} heap */
export function checkBounds(name, bounds, heap) {
  for (const [symbol, bound] of Object.entries(bounds)) {
    if (bound !== null && bound !== undefined && heap[symbol] !== undefined && heap[symbol] > bound) {
      throw new RuntimeCheckError(`${name}: ${symbol} = ${heap[symbol]} exceeds its upper bound ${bound}, for which memory was planned`);
    }
  }
}

/** The tensor registers a function's result is made of. @param {any} record @param {number} [reg] @returns {number[]} */
export function resultRegisters(record, reg = record.code[record.code.length - 1].src) {
  const tuple = record.code.find((/** @type {any} */ op) => op.op === "tuple" && op.dst === reg);
  if (tuple) return tuple.fields.flatMap((/** @type {number} */ f) => resultRegisters(record, f));
  const get = record.code.find((/** @type {any} */ op) => op.op === "get" && op.dst === reg);
  if (get) {
    const source = record.code.find((/** @type {any} */ op) => op.op === "tuple" && op.dst === get.src);
    return resultRegisters(record, source.fields[get.index]);
  }
  return record.tensors[String(reg)] ? [reg] : [];
}

/** The result (a tensor or nested arrays of them) from the tensors by register.
 * @param {any} record @param {Map<number, any>} tensors @param {number} [reg] @returns {any} */
export function assembleResult(record, tensors, reg = record.code[record.code.length - 1].src) {
  if (tensors.has(reg)) return tensors.get(reg);
  const tuple = record.code.find((/** @type {any} */ op) => op.op === "tuple" && op.dst === reg);
  if (tuple) return tuple.fields.map((/** @type {number} */ f) => assembleResult(record, tensors, f));
  const get = record.code.find((/** @type {any} */ op) => op.op === "get" && op.dst === reg);
  if (get) {
    const source = record.code.find((/** @type {any} */ op) => op.op === "tuple" && op.dst === get.src);
    return assembleResult(record, tensors, source.fields[get.index]);
  }
  throw new Error(`cannot assemble result register ${reg}`);
}

/** The launch's workgroup counts and uniform scalars for this call's shape heap.
 * @param {any} op a launch instruction @param {any} kernel its kernel record @param {Record<string, number>} heap */
export function launchSizes(op, kernel, heap) {
  const scalars = op.scalars.map((/** @type {string} */ s) => evalShape(s, heap));
  /** @type {Record<string, number>} */
  const env = {};
  kernel.abi.scalars.forEach((/** @type {any} */ scalar, /** @type {number} */ i) => { env[scalar.name] = scalars[i]; });
  return { scalars, grid: kernel.grid.map((/** @type {string} */ g) => evalShape(g, env)) };
}

