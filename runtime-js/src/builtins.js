// The library registry of `call_builtin` (docs/format.md "Libraries"): the `tessera.builtin.*`
// functions every runtime supplies, on host arrays, plus what the user registers. A function is
// called in destination-passing style, fn(...inputs, ...outs, ...scalars): tensors arrive as typed
// arrays carrying `shape` and `dtype` (host.js), prims as numbers; it fills `outs` and may return a
// number (a prim) or a typed array (a new tensor).
//
// Data-dependent operators come in pairs: `*_size` computes the output's length, the program
// allocates a tensor of that length, and the operator fills it.

/** @param {any} x */
const isNonzero = (x) => x !== 0 && x !== 0n;  // NaN is nonzero, as in numpy

/** Values ordered as numpy sorts them: NaN last. @param {any} a @param {any} b */
function ascending(a, b) {
  if (typeof a === "bigint") return a < b ? -1 : a > b ? 1 : 0;
  if (Number.isNaN(a)) return Number.isNaN(b) ? 0 : 1;
  if (Number.isNaN(b)) return -1;
  return a - b;
}

/** Distinct values in order of first occurrence (a Set treats NaNs as one and -0 as 0, like numpy). @param {ArrayLike<any>} x */
const distinct = (x) => [...new Set(Array.from(x))];

/** @param {string} name @param {ArrayLike<any>} out @param {number} length */
function expectLength(name, out, length) {
  if (out.length !== length) throw new RangeError(`${name}: the output holds ${out.length} elements, the result ${length}`);
}

/** A prim or a one-element tensor, as a number. @param {string} name @param {any} value */
function scalar(name, value) {
  if (typeof value === "number" || typeof value === "bigint") return Number(value);
  if (ArrayBuffer.isView(value) && /** @type {any} */ (value).length === 1) return Number(/** @type {any} */ (value)[0]);
  throw new TypeError(`${name}: expected an integer or a one-element tensor, got ${value}`);
}

/** @param {string} name @param {any} start @param {any} end @param {any} step */
function arangeLength(name, start, end, step) {
  const [a, b, s] = [scalar(name, start), scalar(name, end), scalar(name, step)];
  if (s === 0) throw new RangeError(`${name}: the step is 0`);
  return Math.max(0, Math.ceil((b - a) / s));
}

/** The flat indices of ``x`` where ``mask``, broadcast to x's shape as numpy does, is true.
 * @param {any} x @param {any} mask @returns {number[]} */
function selected(x, mask) {
  const shape = x.shape ?? [x.length];
  const maskShape = mask.shape ?? [mask.length];
  // Right-aligned broadcasting: each mask axis is x's size or 1.
  const offset = shape.length - maskShape.length;
  if (offset < 0 || maskShape.some((d, i) => d !== 1 && d !== shape[i + offset])) {
    throw new RangeError(`mask_select: a mask of shape [${maskShape}] does not broadcast to x's shape [${shape}]`);
  }
  /** @type {number[]} */
  const picked = [];
  for (let flat = 0; flat < x.length; flat++) {
    let rest = flat;
    let at = 0;
    let stride = 1;
    for (let axis = shape.length - 1; axis >= 0; axis--) {
      const position = rest % shape[axis];
      rest = (rest - position) / shape[axis];
      const maskAxis = axis - offset;
      if (maskAxis >= 0) {
        if (maskShape[maskAxis] !== 1) at += position * stride;
        stride *= maskShape[maskAxis];
      }
    }
    if (isNonzero(mask[at])) picked.push(flat);
  }
  return picked;
}

/** @type {Record<string, (...args: any[]) => any>} */
export const BUILTINS = {
  "tessera.builtin.unique_size": (x) => distinct(x).length,
  "tessera.builtin.unique_unsorted_size": (x) => distinct(x).length,
  "tessera.builtin.unique": (x, out) => {
    const values = distinct(x).sort(ascending);
    expectLength("unique", out, values.length);
    out.set(values);
  },
  "tessera.builtin.unique_unsorted": (x, out) => {
    const values = distinct(x);
    expectLength("unique_unsorted", out, values.length);
    out.set(values);
  },
  "tessera.builtin.nonzero_size": (x) => Array.prototype.filter.call(x, isNonzero).length,
  "tessera.builtin.nonzero": (x, out) => {
    const shape = x.shape ?? [x.length];
    /** @type {number[]} */
    const flat = [];
    for (let i = 0; i < x.length; i++) if (isNonzero(x[i])) flat.push(i);
    expectLength("nonzero", out, shape.length * flat.length);
    // Row-major multi-indices: the last axis varies fastest. Row d of out holds axis d's indices.
    flat.forEach((index, k) => {
      for (let axis = shape.length - 1; axis >= 0; axis--) {
        const size = shape[axis];
        const position = index % size;
        index = (index - position) / size;
        out[axis * flat.length + k] = out instanceof BigInt64Array ? BigInt(position) : position;
      }
    });
  },
  "tessera.builtin.mask_select_size": (x, mask) => selected(x, mask).length,
  "tessera.builtin.mask_select": (x, mask, out) => {
    const picked = selected(x, mask);
    expectLength("mask_select", out, picked.length);
    picked.forEach((i, k) => { out[k] = x[i]; });
  },
  "tessera.builtin.arange_size": (start, end, step) => arangeLength("arange_size", start, end, step),
  "tessera.builtin.arange": (start, end, step, out) => {
    const length = arangeLength("arange", start, end, step);
    expectLength("arange", out, length);
    const [a, s] = [scalar("arange", start), scalar("arange", step)];
    for (let i = 0; i < length; i++) out[i] = out instanceof BigInt64Array ? BigInt(a + i * s) : a + i * s;
  },
};

/**
 * The registry a VM calls: the builtins, then the user's libraries (which may not replace one),
 * checked against the names the executable lists, so that a missing one fails the load, not a call.
 * @param {any} exe @param {Record<string, Function>} [libraries]
 * @returns {Map<string, Function>}
 */
export function libraryRegistry(exe, libraries = {}) {
  /** @type {Map<string, Function>} */
  const registry = new Map(Object.entries(BUILTINS));
  for (const [name, fn] of Object.entries(libraries ?? {})) {
    if (typeof fn !== "function") throw new TypeError(`the library '${name}' is not a function`);
    if (registry.has(name)) throw new Error(`the library '${name}' is a builtin of the runtime and cannot be replaced`);
    registry.set(name, fn);
  }
  checkLibraries(exe, registry);
  return registry;
}

/** @param {any} exe @param {Map<string, Function>|Record<string, Function>} available */
export function checkLibraries(exe, available) {
  const has = (/** @type {string} */ name) => (available instanceof Map ? available.has(name) : name in available || name in BUILTINS);
  for (const name of exe.libraries ?? []) {
    if (!has(name)) {
      throw new Error(`the executable calls the library function '${name}', which is not registered: ` +
        `pass it as libraries: {"${name}": fn} when loading`);
    }
  }
}
