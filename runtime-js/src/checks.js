// The values a program holds besides tensors, and the `match` instruction's check of a value against
// struct info (docs/format.md): plain symbolic dims not yet bound are bound on the shape heap, the
// rest is evaluated and compared. A mismatch is one sentence that names the value, prints what was
// expected in the text format and says what differs, in the Python VM's words (tessera.ir.check):
//   argument 'y' of helper: expected R.Tensor((m, 4), dtype="float32"), got shape (3, 5): dimension 1 is 5, not 4

import { evalShape } from "./shape.js";

export class RuntimeCheckError extends Error {
  name = "RuntimeCheckError";
}

/** A shape at run time (the `shape` instruction), distinct from a tuple of prims. */
export class ShapeValue {
  /** @param {number[]} values */
  constructor(values) {
    this.values = values;
  }
}

/** A function of the executable as a value (the `func` instruction), called through a register. */
export class FunctionValue {
  /** @param {string} name */
  constructor(name) {
    this.name = name;
  }
}

const isName = (/** @type {string} */ s) => /^[A-Za-z_][A-Za-z_0-9]*$/.test(s);
const isTensor = (/** @type {any} */ v) => v !== null && typeof v === "object" && Array.isArray(v.shape) && typeof v.dtype === "string";
const isPrim = (/** @type {any} */ v) => (typeof v === "number" && Number.isInteger(v)) || typeof v === "bigint";

/** @param {string[]} dims */
const printDims = (dims) => `(${dims.join(", ")}${dims.length === 1 ? "," : ""})`;

/** A value as the text format prints struct info: R.Tensor((3, 5), dtype="float32"), R.Prim(value=3) ...
 * @param {any} value @returns {string} */
export function describeValue(value) {
  if (isTensor(value)) return `R.Tensor(${printDims(value.shape.map(String))}, dtype=${JSON.stringify(value.dtype)})`;
  if (isPrim(value)) return `R.Prim(value=${value})`;
  if (value instanceof ShapeValue) return `R.Shape([${value.values.join(", ")}])`;
  if (value instanceof FunctionValue) return `R.Callable (the function ${value.name})`;
  if (Array.isArray(value)) return `R.Tuple(${value.map(describeValue).join(", ")})`;
  if (typeof value === "number") return `the number ${value}`;
  return value === null || value === undefined ? String(value) : `a ${typeof value}`;
}

/** Struct info as the text format prints it, for executables whose `match` carries no `text`.
 * @param {any} sinfo @returns {string} */
export function printStructInfo(sinfo) {
  switch (sinfo.kind) {
    case "object": return "R.Object";
    case "prim": return sinfo.value !== null && sinfo.value !== undefined ? `R.Prim(value=${sinfo.value})` : `R.Prim(${JSON.stringify(sinfo.dtype)})`;
    case "shape": return sinfo.values ? `R.Shape([${sinfo.values.join(", ")}])` : `R.Shape(ndim=${sinfo.ndim})`;
    case "tuple": return `R.Tuple(${sinfo.fields.map(printStructInfo).join(", ")})`;
    case "tensor": {
      const parts = [];
      if (sinfo.shape) parts.push(printDims(sinfo.shape));
      if (sinfo.dtype) parts.push(`dtype=${JSON.stringify(sinfo.dtype)}`);
      if (!sinfo.shape) parts.push(`ndim=${sinfo.ndim ?? -1}`);
      return `R.Tensor(${parts.join(", ")})`;
    }
    default: return `R.Callable`;
  }
}

/** Bind the plain symbolic dims (and prim values) of ``sinfo`` not yet bound, from ``value``.
 * @param {any} sinfo @param {any} value @param {Record<string, number>} heap */
export function bindShapes(sinfo, value, heap) {
  /** @type {string[]} */ let dims = [];
  /** @type {number[]} */ let actual = [];
  if (sinfo.kind === "tensor" && sinfo.shape && isTensor(value)) [dims, actual] = [sinfo.shape, value.shape];
  else if (sinfo.kind === "shape" && sinfo.values && value instanceof ShapeValue) [dims, actual] = [sinfo.values, value.values];
  else if (sinfo.kind === "prim" && sinfo.value !== null && sinfo.value !== undefined && isPrim(value)) [dims, actual] = [[sinfo.value], [Number(value)]];
  else if (sinfo.kind === "tuple" && Array.isArray(value)) {
    sinfo.fields.forEach((/** @type {any} */ field, /** @type {number} */ i) => { if (i < value.length) bindShapes(field, value[i], heap); });
  }
  if (dims.length !== actual.length) return;
  dims.forEach((dim, i) => {
    if (isName(dim) && heap[dim] === undefined) heap[dim] = actual[i];
  });
}

/** What a value is, for "got a ...". @param {any} value */
function kindOf(value) {
  if (isTensor(value)) return "tensor";
  if (isPrim(value)) return "integer";
  if (value instanceof ShapeValue) return "shape";
  if (value instanceof FunctionValue) return "function";
  if (Array.isArray(value)) return "tuple";
  return value === null || value === undefined ? String(value) : typeof value;
}

/** Why ``value`` does not match ``sinfo``, in the words of the Python VM (tessera.ir.check), or null.
 * @param {any} sinfo @param {any} value @param {Record<string, number>} heap @returns {string|null} */
export function mismatch(sinfo, value, heap) {
  switch (sinfo.kind) {
    case "object": return null;
    case "prim":
      if (!isPrim(value)) return `got a ${kindOf(value)}`;
      return sinfo.value === null || sinfo.value === undefined ? null : dimsMismatch([sinfo.value], [Number(value)], heap);
    case "shape":
      if (!(value instanceof ShapeValue)) return `got a ${kindOf(value)}`;
      if (sinfo.ndim >= 0 && value.values.length !== sinfo.ndim) return `got a shape of rank ${value.values.length}`;
      return sinfo.values ? dimsMismatch(sinfo.values, value.values, heap) : null;
    case "tuple": {
      if (!Array.isArray(value)) return `got a ${kindOf(value)}`;
      if (value.length !== sinfo.fields.length) return `got a tuple of ${value.length} fields`;
      for (const [i, field] of sinfo.fields.entries()) {
        const reason = mismatch(field, value[i], heap);
        if (reason) return `field ${i}: ${reason}`;
      }
      return null;
    }
    case "tensor": {
      if (!isTensor(value)) return `got a ${kindOf(value)}`;
      if (sinfo.dtype && value.dtype !== sinfo.dtype) return `got dtype ${value.dtype}`;
      const ndim = sinfo.shape ? sinfo.shape.length : sinfo.ndim ?? -1;
      if (ndim >= 0 && value.shape.length !== ndim) return `got rank ${value.shape.length} (shape ${printDims(value.shape.map(String))})`;
      return sinfo.shape ? dimsMismatch(sinfo.shape, value.shape, heap) : null;
    }
    case "callable": case "func":
      return value instanceof FunctionValue ? null : `got a ${kindOf(value)}`;
    default:
      throw new Error(`unknown struct info kind ${JSON.stringify(sinfo.kind)} in executable.json`);
  }
}

/** @param {string[]} dims @param {number[]} actual @param {Record<string, number>} heap */
function dimsMismatch(dims, actual, heap) {
  for (const [axis, dim] of dims.entries()) {
    let expected;
    try {
      expected = evalShape(dim, heap);
    } catch {
      return `symbolic variable in ${dim} is not bound when checking`;
    }
    if (expected !== actual[axis]) {
      const shown = /^-?\d+$/.test(dim) ? String(expected) : `${dim} = ${expected}`;
      return `got shape ${printDims(actual.map(String))}: dimension ${axis} is ${actual[axis]}, not ${shown}`;
    }
  }
  return null;
}

/**
 * The `match` instruction: bind, then check; a mismatch is a RuntimeCheckError naming ``what``.
 * @param {{sinfo: any, what: string, text?: string}} op @param {any} value @param {Record<string, number>} heap
 */
export function matchValue(op, value, heap) {
  bindShapes(op.sinfo, value, heap);
  const reason = mismatch(op.sinfo, value, heap);
  if (reason) {
    throw new RuntimeCheckError(`${op.what}: expected ${op.text ?? printStructInfo(op.sinfo)}, ${reason}`);
  }
}
