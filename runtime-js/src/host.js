// Tensors on the host, and how their elements are laid out on a device (docs/kernels.md storage):
// bool is one u32 word per element there and one byte here (numpy's bool); int8, uint8, int16 and
// uint16 are one i32 or u32 word there, sign- or zero-extended, and numpy's bytes here; int64 and
// uint64 are two words there (low, then high) and a BigInt64Array or BigUint64Array here, the same
// bytes; float16 is two bytes either way. Every device buffer is a whole
// number of words. Both VMs convert through these functions, so a dtype is spelled in one place.

import { DTYPE_BYTES } from "./facts.js";

/** @typedef {Float32Array|Int32Array|Uint32Array|BigInt64Array|BigUint64Array|Uint8Array|Int8Array|Int16Array|Uint16Array} HostArray */

/** The typed array that holds each dtype on the host. */
export const HOST_ARRAYS = {
  float32: Float32Array, int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array, bool: Uint8Array,
  float16: Uint16Array,  // raw IEEE half bits: JS has no half-precision numbers to convert to
  int8: Int8Array, uint8: Uint8Array, int16: Int16Array, uint16: Uint16Array, uint64: BigUint64Array,
};

/** The word array a dtype kept in one 32-bit word per element (widened) is computed in on a device: signed
 * values sign-extended into an Int32Array, unsigned zero-extended into a Uint32Array (bool: 0 or 1). */
const WORD_ARRAYS = /** @type {Record<string, Int32ArrayConstructor|Uint32ArrayConstructor>} */ ({
  bool: Uint32Array, int8: Int32Array, uint8: Uint32Array, int16: Int32Array, uint16: Uint32Array,
});

/** Whether a dtype takes a wider word on a device than on the host (bool, int8, uint8, int16, uint16).
 * @param {string} dtype */
export const isWidened = (dtype) => Object.hasOwn(WORD_ARRAYS, dtype);

/** @param {HostArray} data */
function dtypeOf(data) {
  if (data instanceof Float32Array) return "float32";
  if (data instanceof Int32Array) return "int32";
  if (data instanceof Uint32Array) return "uint32";
  if (data instanceof BigInt64Array) return "int64";
  if (data instanceof BigUint64Array) return "uint64";
  if (data instanceof Uint8Array) return "bool";  // uint8 is asked for by name, as float16 and uint16 are
  if (data instanceof Int8Array) return "int8";
  if (data instanceof Int16Array) return "int16";
  throw new TypeError(`HostTensor takes a Float32Array, Int32Array, Uint32Array, BigInt64Array (int64), BigUint64Array ` +
    `(uint64), Int8Array, Int16Array or Uint8Array (bool; uint8, uint16 and float16 name their dtype); ` +
    `got ${Object.prototype.toString.call(data)}`);
}

/** @param {number[]} shape */
export const elementCount = (shape) => shape.reduce((a, b) => a * b, 1);

/** A host tensor: a typed array and its shape (int64 as a BigInt64Array, bool as a Uint8Array of 0/1). */
export class HostTensor {
  /** @param {HostArray} data @param {number[]} shape @param {string} [dtype] needed only for float16 (a Uint16Array) */
  constructor(data, shape, dtype) {
    this.data = data;
    this.shape = shape;
    this.dtype = dtype ?? dtypeOf(data);
    const Typed = HOST_ARRAYS[/** @type {keyof typeof HOST_ARRAYS} */ (this.dtype)];
    if (!Typed || !(data instanceof Typed)) throw new TypeError(`a ${this.dtype} HostTensor needs a ${Typed?.name ?? "known dtype"}`);
    const count = elementCount(shape);
    if (count !== data.length) throw new RangeError(`shape [${shape}] holds ${count} elements, the data ${data.length}`);
  }
}

/** Bytes of ``count`` elements of ``dtype`` on a device, in whole words (at least one).
 * @param {number} count @param {string} dtype */
export function deviceBytes(count, dtype) {
  const size = Object.hasOwn(HOST_ARRAYS, dtype) ? DTYPE_BYTES[dtype].device : 0;  // the dtypes with a host form here
  if (!size) throw new Error(`the JS runtime has no host form for ${dtype} tensors`);
  return Math.max(4, Math.ceil((count * size) / 4) * 4);
}

/** The device bytes of a host array (padded to whole words). @param {HostArray} data @param {string} dtype */
export function toDeviceBytes(data, dtype) {
  const out = new Uint8Array(deviceBytes(data.length, dtype));
  if (dtype === "bool") {
    new Uint32Array(out.buffer).set(/** @type {Uint8Array} */ (data).map((v) => (v ? 1 : 0)));
  } else if (isWidened(dtype)) {
    new WORD_ARRAYS[dtype](out.buffer, 0, data.length).set(/** @type {ArrayLike<number>} */ (data));  // sign- or zero-extends
  } else {
    out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  }
  return out;
}

/** A host tensor from device bytes (at least its elements' worth).
 * @param {ArrayBuffer|Uint8Array} raw @param {number[]} shape @param {string} dtype */
export function fromDeviceBytes(raw, shape, dtype) {
  const Typed = HOST_ARRAYS[/** @type {keyof typeof HOST_ARRAYS} */ (dtype)];
  if (!Typed) throw new Error(`the JS runtime reads back ${Object.keys(HOST_ARRAYS).join(", ")} tensors; this one is ${dtype}`);
  const bytes = raw instanceof Uint8Array ? raw : new Uint8Array(raw);
  const count = elementCount(shape);
  if (dtype === "bool") {
    const words = new Uint32Array(bytes.slice(0, count * 4).buffer);
    return new HostTensor(Uint8Array.from(words, (w) => (w ? 1 : 0)), shape);
  }
  if (isWidened(dtype)) {  // the low 8 or 16 bits of each word, as numpy's astype keeps (kernels store wrapped values)
    return new HostTensor(/** @type {any} */ (Typed).from(new Uint32Array(bytes.slice(0, count * 4).buffer)), shape, dtype);
  }
  const copy = bytes.slice(0, count * Typed.BYTES_PER_ELEMENT);  // a copy: the source may be reused or detached
  return new HostTensor(new Typed(copy.buffer), shape, dtype);
}

/** The device bytes of a weight: its bytes in a shard (numpy's layout) as a ``dtype`` tensor takes them on
 * a device, widened where that dtype is (the shard's own bytes otherwise, not copied).
 * @param {Uint8Array} bytes @param {string} dtype */
export function weightDeviceBytes(bytes, dtype) {
  if (!isWidened(dtype)) return bytes;
  const Typed = /** @type {any} */ (HOST_ARRAYS)[dtype];
  const size = Typed.BYTES_PER_ELEMENT;
  // a copy first where the shard's offset is not a multiple of the element (the format checks it is)
  const aligned = bytes.byteOffset % size ? bytes.slice() : bytes;
  return toDeviceBytes(new Typed(aligned.buffer, aligned.byteOffset, aligned.byteLength / size), dtype);
}

/** A host array as a builtin or user library receives it: the typed array itself, carrying its shape
 * and dtype (so that ``out[i] = 2 * x[i]`` reads naturally and ``x.shape`` is there when needed).
 * @param {HostTensor} tensor @returns {HostArray & {shape: number[], dtype: string}} */
export function hostArray(tensor) {
  return Object.assign(tensor.data, { shape: tensor.shape, dtype: tensor.dtype });
}

/** A host array a library returned, back as a HostTensor (shape and dtype from its properties when it
 * has them: a plain typed array is one-dimensional). @param {any} array */
export function fromHostArray(array) {
  return new HostTensor(array, array.shape ?? [array.length], array.dtype);
}

/** Whether ``value`` is a typed array a library may return. @param {any} value */
export const isHostArray = (value) => ArrayBuffer.isView(value) && !(value instanceof DataView);
