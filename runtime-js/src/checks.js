// The values a program holds besides tensors, and the `match` instruction's check of a value against
// struct info (docs/format.md): plain symbolic dims not yet bound are bound on the shape heap, the
// rest is evaluated and compared. A mismatch is one sentence that names the value and prints both
// sides in the text format:
//   argument 'y' of helper: expected R.Tensor((m, 4), dtype="float32"), got R.Tensor((3, 5), dtype="float32")
//   (dimension 1 is 5, not 4)
// The Python VM writes the same sentence (tessera.ir.check).

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

/** Why ``value`` does not match ``sinfo`` (a phrase), or null when it does.
 * @param {any} sinfo @param {any} value @param {Record<string, number>} heap @returns {string|null} */
export function mismatch(sinfo, value, heap) {
  switch (sinfo.kind) {
    case "object": return null;
    case "prim":
      if (!isPrim(value)) return "not an integer";
      return sinfo.value === null || sinfo.value === undefined ? null : dimsMismatch([sinfo.value], [Number(value)], heap, "value");
    case "shape":
      if (!(value instanceof ShapeValue)) return "not a shape";
      if (sinfo.values) return dimsMismatch(sinfo.values, value.values, heap, "dimension");
      return sinfo.ndim >= 0 && value.values.length !== sinfo.ndim ? `rank is ${value.values.length}, not ${sinfo.ndim}` : null;
    case "tuple": {
      if (!Array.isArray(value)) return "not a tuple";
      if (value.length !== sinfo.fields.length) return `a tuple of ${value.length} fields, not ${sinfo.fields.length}`;
      for (const [i, field] of sinfo.fields.entries()) {
        const reason = mismatch(field, value[i], heap);
        if (reason) return `field ${i}: ${reason}`;
      }
      return null;
    }
    case "tensor": {
      if (!isTensor(value)) return "not a tensor";
      if (sinfo.dtype && value.dtype !== sinfo.dtype) return `dtype is ${value.dtype}, not ${sinfo.dtype}`;
      const ndim = sinfo.shape ? sinfo.shape.length : sinfo.ndim ?? -1;
      if (ndim >= 0 && value.shape.length !== ndim) return `rank is ${value.shape.length}, not ${ndim}`;
      return sinfo.shape ? dimsMismatch(sinfo.shape, value.shape, heap, "dimension") : null;
    }
    case "callable": case "func":
      return value instanceof FunctionValue ? null : "not a function";
    default:
      throw new Error(`unknown struct info kind ${JSON.stringify(sinfo.kind)} in executable.json`);
  }
}

/** @param {string[]} dims @param {number[]} actual @param {Record<string, number>} heap @param {string} noun */
function dimsMismatch(dims, actual, heap, noun) {
  for (const [axis, dim] of dims.entries()) {
    const expected = evalShape(dim, heap);
    if (expected !== actual[axis]) {
      const where = noun === "dimension" ? `dimension ${axis}` : noun;
      return `${where} is ${actual[axis]}, not ${/^-?\d+$/.test(dim) ? dim : `${dim} = ${expected}`}`;
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
    throw new RuntimeCheckError(`${op.what}: expected ${op.text ?? printStructInfo(op.sinfo)}, got ${describeValue(value)} (${reason})`);
  }
}
