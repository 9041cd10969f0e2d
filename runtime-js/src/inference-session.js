// Tensors in, tensors out, in the shape ONNX Runtime Web users know (docs/web.md, "InferenceSession"):
//
//   const session = await InferenceSession.create("./models/classifier/", { device: "auto" });
//   session.inputNames;                                     // ["image"]
//   const { output0 } = await session.run({ image: new Tensor("float32", pixels, [1, 3, 224, 224]) });
//
// It runs one function of an executable folder (`tessera compile`) on the VM (vm.js), mirroring the
// Python session (compiler/inference.py, docs/inference.md): inputs are the function's parameters by
// name (state parameters live on the device and are not fed), outputs its results with nested tuples
// flattened, named by the record's result_names where the compiler wrote them, else output0, output1 ...
// Every feed is checked before anything runs, and each error names the input; the VM checks again.

import { DeviceError } from "./device.js";
import { deviceKind, KIND_LABELS, openDevice } from "./devices/index.js";
import { HOST_ARRAYS } from "./host.js";
import { loadBuild, loadExecutable } from "./loader.js";
import { evaluateShape, parseShapeExpr } from "./shape.js";
import { HostTensor, VirtualMachine } from "./vm.js";

export class InferenceSessionError extends Error {
  name = "InferenceSessionError";

  /** @param {string} message @param {string} [input] the input at fault, when one is */
  constructor(message, input) {
    super(message);
    this.input = input;
  }
}

/** The typed array of each tensor type (ONNX Runtime Web's names), and of each type the IR spells otherwise. */
const ARRAYS = /** @type {Record<string, any>} */ ({
  float32: Float32Array, float64: Float64Array, int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array,
  uint64: BigUint64Array, int16: Int16Array, uint16: Uint16Array, int8: Int8Array, uint8: Uint8Array, bool: Uint8Array,
  float16: Uint16Array,  // raw IEEE half bits, as ONNX Runtime Web takes them where Float16Array is missing
});

/** onnxruntime's type strings (NodeArg.type in Python) for the IR's dtypes. */
const ORT_TYPES = /** @type {Record<string, string>} */ ({
  float32: "tensor(float)", float64: "tensor(double)", float16: "tensor(float16)", bfloat16: "tensor(bfloat16)",
  int64: "tensor(int64)", int32: "tensor(int32)", int16: "tensor(int16)", int8: "tensor(int8)", uint64: "tensor(uint64)",
  uint32: "tensor(uint32)", uint16: "tensor(uint16)", uint8: "tensor(uint8)", bool: "tensor(bool)",
});

const typeName = (/** @type {any} */ value) => value === null ? "null" : ArrayBuffer.isView(value)
  ? value.constructor.name : Array.isArray(value) ? "an array" : typeof value === "object" ? (value.constructor?.name ?? "object") : typeof value;

/** The tensor type a typed array holds by default (a Uint8Array: uint8). @param {any} data */
function typeOfArray(data) {
  for (const [type, Typed] of Object.entries(ARRAYS)) if (data instanceof Typed) return type;
  throw new TypeError(`a Tensor's data is a typed array or an array of numbers, not ${typeName(data)}`);
}

/** A tensor on the host: ``type`` ("float32", "int64" ...), ``data`` (its typed array), ``dims``. */
export class Tensor {
  /**
   * ``new Tensor(type, data, dims)`` or ``new Tensor(data, dims)`` (the type from the typed array), as in
   * ONNX Runtime Web. ``data`` is the type's typed array (int64: a BigInt64Array; bool: a Uint8Array of 0/1;
   * float16: a Uint16Array of half bits) or a plain array of numbers (of bigints or numbers for int64), copied
   * into one. ``dims`` defaults to [data.length].
   * @param {string | any} typeOrData @param {any} [dataOrDims] @param {readonly number[]} [maybeDims]
   */
  constructor(typeOrData, dataOrDims, maybeDims) {
    let type, data, dims;
    if (typeof typeOrData === "string") [type, data, dims] = [typeOrData, dataOrDims, maybeDims];
    else [type, data, dims] = [typeOfArray(typeOrData), typeOrData, dataOrDims];
    const Typed = ARRAYS[type];
    if (!Typed) throw new TypeError(`unknown tensor type ${JSON.stringify(type)}; the types are ${Object.keys(ARRAYS).join(", ")}`);
    if (Array.isArray(data)) {
      data = type === "int64" || type === "uint64" ? Typed.from(data, (/** @type {any} */ v) => BigInt(v))
        : type === "bool" ? Typed.from(data, (/** @type {any} */ v) => (v ? 1 : 0)) : Typed.from(data);
    } else if (!(data instanceof Typed)) {
      throw new TypeError(`a ${type} Tensor's data is a ${Typed.name} (or an array), not ${typeName(data)}`);
    }
    dims ??= [data.length];
    if (!Array.isArray(dims) || !dims.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new TypeError(`a Tensor's dims are whole numbers of 0 and up, not ${JSON.stringify(dims)}`);
    }
    const size = dims.reduce((a, b) => a * b, 1);
    if (size !== data.length) {
      throw new RangeError(`dims [${dims.join(", ")}] hold ${size} elements; the data has ${data.length}`);
    }
    this.type = type;
    this.data = data;
    this.dims = Object.freeze([...dims]);
    this.size = size;
  }
}

/**
 * An input or output as ONNX Runtime Web's metadata describes one: ``shape`` (also ``dims``) has a number for
 * each fixed dimension and the symbolic expression's text for the others ("batch", "n * 2"), or null where
 * only the rank is known; it is null altogether when not even that is.
 * @typedef {{name: string, isTensor: boolean, type: string, ortType: string, shape: (number|string|null)[] | null,
 *   dims: (number|string|null)[] | null}} ValueMetadata
 */

/** @param {string} name @param {any} sinfo @returns {ValueMetadata} */
function metadataOf(name, sinfo) {
  if (sinfo.kind === "prim") {
    return { name, isTensor: false, type: sinfo.dtype, ortType: ORT_TYPES[sinfo.dtype] ?? "tensor(int64)", shape: [], dims: [] };
  }
  const type = sinfo.dtype ?? "";
  const shape = sinfo.ndim < 0 ? null : sinfo.shape ? sinfo.shape.map(dimOf) : Array(sinfo.ndim).fill(null);
  return { name, isTensor: true, type, ortType: ORT_TYPES[type] ?? "tensor(unknown)", shape, dims: shape };
}

/** A recorded dimension: its number when fixed, else its text. @param {string} text */
function dimOf(text) {
  const node = parseShapeExpr(String(text));
  return node.kind === "num" ? node.value : String(text);
}

/** A result's struct info, nested tuples flattened in order. @param {any} sinfo @returns {any[]} */
const leaves = (sinfo) => sinfo?.kind === "tuple" ? sinfo.fields.flatMap(leaves) : [sinfo];

/** A result value (a HostTensor or nested arrays of them), flattened in order. @param {any} value @returns {any[]} */
const valueLeaves = (value) => Array.isArray(value) ? value.flatMap(valueLeaves) : [value];

/** A recorded shape as the text format prints one: (n, 4), (n + 1,). @param {string[]} shape */
const shown = (shape) => `(${shape.join(", ")}${shape.length === 1 ? "," : ""})`;

/** @param {readonly number[]} dims */
const shownDims = (dims) => `(${dims.join(", ")}${dims.length === 1 ? "," : ""})`;

/**
 * The session over an opened VM: what create() makes, and what the Worker's side runs.
 */
export class InferenceSession {
  /**
   * Open ``url`` (an executable folder, ending in "/"; or a list of them, builds of one model for different
   * devices, tried in order) and load one function of it.
   * @param {string | string[]} url
   * @param {{device?: "auto"|"webgpu"|"wasm", function?: string, worker?: boolean | Worker,
   *          fetchFn?: (url: string) => Promise<Response>, cache?: any, libraries?: Record<string, Function>,
   *          adapter?: any, gpuDevice?: GPUDevice, onProgress?: (p: any) => void}} [options]
   *   device: "auto" runs a build on the device its kernels are for (a WebGPU build where WebGPU opens, else the
   *   next build); "webgpu"/"wasm" only that kind. worker: run the session in a Web Worker (inference-worker.js).
   * @returns {Promise<InferenceSession>}
   */
  static async create(url, options = {}) {
    if (options.worker) {
      const { createWorkerSession } = await import("./inference-worker-session.js");
      return /** @type {any} */ (createWorkerSession(url, options));
    }
    const { device = "auto", function: fn = "main", fetchFn = fetch, cache, libraries, adapter, gpuDevice, onProgress } = options;
    if (!["auto", "webgpu", "wasm"].includes(device)) {
      throw new InferenceSessionError(`unknown device ${JSON.stringify(device)}; the devices are auto, webgpu, wasm`);
    }
    const urls = (Array.isArray(url) ? url : [url]).map((u) => (u.endsWith("/") ? u : u + "/"));
    /** @type {string[]} */
    const passed = [];
    for (const [index, buildUrl] of urls.entries()) {
      const exe = await loadExecutable(buildUrl, { fetchFn, libraries });
      const kind = deviceKind(exe);
      if (device !== "auto" && kind !== device) {
        passed.push(`${buildUrl} runs on ${KIND_LABELS[kind] ?? kind}, not ${KIND_LABELS[device]}` +
          (urls.length === 1 ? ` (compile it with --target ${device})` : ""));
        continue;
      }
      const describe = new SessionDescription(exe, fn);  // before any weight is fetched
      let opened;
      try {
        opened = await openDevice(exe, { kind, adapter, gpuDevice });
      } catch (error) {
        if (!(error instanceof DeviceError) || index === urls.length - 1) throw error;
        passed.push(`${buildUrl}: ${error.message}`);
        continue;
      }
      try {
        const { weights, modules } = await loadBuild(buildUrl, { fetchFn, cache, executable: exe, libraries, onProgress });
        const vm = await VirtualMachine.create(opened, exe, weights, modules, { libraries });
        return new InferenceSession(vm, describe, buildUrl, passed);
      } catch (error) {
        opened.destroy?.();
        throw error;
      }
    }
    throw new DeviceError(`no build of this model runs here: ${passed.join("; ")}`);
  }

  /** @param {any} vm @param {SessionDescription} description @param {string} url @param {string[]} passed */
  constructor(vm, description, url, passed = []) {
    this.vm = vm;
    this.description = description;
    this.function = description.function;
    this.url = url;
    /** Why the builds before this one were passed over. */
    this.passedOver = passed;
    /** @type {Promise<any>} */
    this.queue = Promise.resolve();  // runs one at a time: the VM's arena is shared by calls
    this.released = false;
  }

  get inputNames() { return this.description.inputs.map((m) => m.name); }
  get outputNames() { return this.description.outputs.map((m) => m.name); }
  get inputMetadata() { return this.description.inputs; }
  get outputMetadata() { return this.description.outputs; }
  /** Each symbolic size's upper bound (memory is planned for it), null when unbounded. */
  get symbolBounds() { return { ...this.description.bounds }; }
  /** The device kind the session runs on ("webgpu", "wasm") and its name. */
  get device() { return { kind: this.vm.device.kind, name: this.vm.device.name }; }

  /**
   * One call: ``feeds`` {name: Tensor} (an integer input takes a number, a bigint or a one-element integer
   * Tensor); ``fetches`` the output names wanted (default all). Resolves to {name: Tensor}.
   * @param {Record<string, any>} feeds @param {string[] | {fetches?: string[]}} [fetches]
   * @returns {Promise<Record<string, Tensor>>}
   */
  run(feeds, fetches) {
    const call = this.queue.then(() => this.runNow(feeds, fetches));
    this.queue = call.catch(() => undefined);
    return call;
  }

  /** @param {Record<string, any>} feeds @param {any} fetches */
  async runNow(feeds, fetches) {
    if (this.released) throw new InferenceSessionError("this session was released");
    const wanted = this.description.wanted(Array.isArray(fetches) ? fetches : fetches?.fetches);
    const args = this.description.checkFeeds(feeds);
    const result = await this.vm.run(this.function, ...args);
    const values = valueLeaves(result);
    /** @type {Record<string, Tensor>} */
    const outputs = {};
    for (const index of wanted) {
      const value = values[index];
      const name = this.description.outputs[index].name;
      outputs[name] = value instanceof HostTensor ? new Tensor(value.dtype, value.data, value.shape)
        : new Tensor("int64", BigInt64Array.of(BigInt(value)), []);
    }
    return outputs;
  }

  /** Free the device and everything on it; the session runs no more. */
  async release() {
    await this.queue;
    if (this.released) return;
    this.released = true;
    this.vm.device.destroy?.();
  }
}

/** What a function takes and gives, and the checks of a feed against it (compiler/inference.py's). */
export class SessionDescription {
  /** @param {any} exe @param {string} fn */
  constructor(exe, fn) {
    const record = exe.functions[fn];
    if (!record || !Object.hasOwn(exe.functions, fn)) {
      throw new InferenceSessionError(`the executable has no function ${JSON.stringify(fn)} (functions: ` +
        `${Object.keys(exe.functions).sort().join(", ") || "none"}); pass {function: NAME}`);
    }
    this.function = fn;
    /** @type {any[]} */
    this.params = record.params.filter((/** @type {any} */ p) => !p.state);
    for (const param of this.params) {
      const { kind, dtype } = param.sinfo;
      if (kind !== "tensor" && kind !== "prim") {
        throw new InferenceSessionError(`${fn}'s parameter '${param.name}' is a ${kind}, not a tensor: call it through the VirtualMachine`, param.name);
      }
      if (kind === "tensor" && dtype && !Object.hasOwn(HOST_ARRAYS, dtype)) {
        throw new InferenceSessionError(`${fn}'s input '${param.name}' is a ${dtype} tensor, which this runtime does not ` +
          `move (it moves ${Object.keys(HOST_ARRAYS).join(", ")})`, param.name);
      }
    }
    /** @type {Record<string, number|null>} */
    this.bounds = Object.fromEntries(Object.entries(record.symbols ?? {}).map(([name, s]) => [name, /** @type {any} */ (s).upper_bound ?? null]));
    this.inputs = this.params.map((p) => metadataOf(p.name, p.sinfo));
    const results = leaves(record.result);
    const names = Array.isArray(record.result_names) && record.result_names.length === results.length ? record.result_names : null;
    this.outputs = results.map((sinfo, i) => metadataOf(names ? String(names[i]) : `output${i}`, sinfo));
  }

  /** The output positions ``names`` asks for (all, in order, when undefined). @param {string[] | undefined} names */
  wanted(names) {
    if (names === undefined || names === null) return this.outputs.map((_, i) => i);
    if (!Array.isArray(names)) throw new InferenceSessionError(`fetches is a list of output names, not ${typeName(names)}`);
    const positions = new Map(this.outputs.map((m, i) => [m.name, i]));
    const unknown = names.filter((n) => !positions.has(n));
    if (unknown.length) {
      throw new InferenceSessionError(`unknown output ${unknown.map((n) => `'${n}'`).join(", ")}; the outputs are ${[...positions.keys()].join(", ")}`);
    }
    return names.map((n) => /** @type {number} */ (positions.get(n)));
  }

  /** The VM's arguments in parameter order, once every feed fits its input (sizes agreeing and bounded).
   * @param {any} feeds @returns {any[]} */
  checkFeeds(feeds) {
    if (feeds === null || typeof feeds !== "object" || Array.isArray(feeds) || feeds instanceof Tensor) {
      throw new InferenceSessionError(`feeds is an object of input name to Tensor, not ${typeName(feeds)}`);
    }
    const names = this.params.map((p) => p.name);
    const unknown = Object.keys(feeds).find((n) => !names.includes(n));
    if (unknown !== undefined) throw new InferenceSessionError(`unknown input '${unknown}'; the inputs are ${names.join(", ")}`, unknown);
    const missing = names.find((n) => !Object.hasOwn(feeds, n) || feeds[n] === undefined);
    if (missing !== undefined) throw new InferenceSessionError(`input '${missing}' is missing (the inputs are ${names.join(", ")})`, missing);
    /** @type {Map<string, [number, string]>} */
    const sizes = new Map();  // variable -> [value, the input that set it]
    const args = this.params.map((param) => {
      const { name, sinfo } = param;
      return sinfo.kind === "prim" ? this.checkPrim(name, sinfo, feeds[name], sizes) : this.checkTensor(name, sinfo, feeds[name], sizes);
    });
    for (const param of this.params) this.checkExpressions(param.name, param.sinfo, feeds[param.name], sizes);
    return args;
  }

  /** @param {string} name @param {any} sinfo @param {any} value @param {Map<string, [number, string]>} sizes */
  checkTensor(name, sinfo, value, sizes) {
    if (!(value instanceof Tensor)) throw new InferenceSessionError(`input '${name}': expected a Tensor, got ${typeName(value)}`, name);
    if (sinfo.dtype && value.type !== sinfo.dtype) {
      throw new InferenceSessionError(`input '${name}': expected type ${sinfo.dtype} (${ORT_TYPES[sinfo.dtype] ?? "?"}), got ` +
        `${value.type} (no implicit casts)`, name);
    }
    const dims = value.dims;
    if (sinfo.ndim >= 0 && dims.length !== sinfo.ndim) {
      const shape = sinfo.shape ? ` (shape ${shown(sinfo.shape)})` : "";
      throw new InferenceSessionError(`input '${name}': expected rank ${sinfo.ndim}${shape}, got rank ${dims.length} (shape ${shownDims(dims)})`, name);
    }
    (sinfo.shape ?? []).forEach((/** @type {string} */ dim, /** @type {number} */ axis) => {
      this.checkDim(name, `dimension ${axis}`, dim, dims[axis], sizes, () => `expected shape ${shown(sinfo.shape)}, got ${shownDims(dims)}: `);
    });
    return new HostTensor(value.data, [...dims], value.type);
  }

  /** @param {string} name @param {any} sinfo @param {any} value @param {Map<string, [number, string]>} sizes */
  checkPrim(name, sinfo, value, sizes) {
    if (value instanceof Tensor && value.size === 1 && value.type.includes("int")) value = value.data[0];
    if (typeof value === "bigint") {
      if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) {
        throw new InferenceSessionError(`input '${name}': ${value} is beyond 2**53, which this runtime holds exactly`, name);
      }
      value = Number(value);
    }
    if (!Number.isSafeInteger(value)) throw new InferenceSessionError(`input '${name}': expected an integer, got ${typeName(value)}`, name);
    if (sinfo.value !== null && sinfo.value !== undefined) this.checkDim(name, "its value", String(sinfo.value), value, sizes, () => "");
    return value;
  }

  /** @param {string} name @param {string} where @param {string} dim @param {number} size
   *  @param {Map<string, [number, string]>} sizes @param {() => string} prefix */
  checkDim(name, where, dim, size, sizes, prefix) {
    const node = parseShapeExpr(String(dim));
    if (node.kind === "num") {
      if (size !== node.value) throw new InferenceSessionError(`input '${name}': ${prefix()}${where} is ${size}, not ${node.value}`, name);
      return;
    }
    if (node.kind !== "var") return;  // an expression: checked once its variables are known
    const known = sizes.get(node.name);
    if (known && known[0] !== size) {
      throw new InferenceSessionError(`input '${name}': ${where} is ${size}, but ${node.name} = ${known[0]} from input '${known[1]}'`, name);
    }
    if (size < 0) throw new InferenceSessionError(`input '${name}': ${where} (${node.name}) is ${size}, not a size`, name);
    const bound = this.bounds[node.name];
    if (bound !== null && bound !== undefined && size > bound) {
      throw new InferenceSessionError(`input '${name}': ${where} (${node.name}) is ${size}, above its upper bound ${bound} ` +
        "(the most the executable's memory was planned for)", name);
    }
    if (!known) sizes.set(node.name, [size, name]);
  }

  /** @param {string} name @param {any} sinfo @param {any} value @param {Map<string, [number, string]>} sizes */
  checkExpressions(name, sinfo, value, sizes) {
    if (sinfo.kind !== "tensor" || !sinfo.shape) return;
    /** @type {Record<string, number>} */
    const env = Object.fromEntries([...sizes].map(([v, [size]]) => [v, size]));
    sinfo.shape.forEach((/** @type {string} */ dim, /** @type {number} */ axis) => {
      const node = parseShapeExpr(String(dim));
      if (node.kind === "num" || node.kind === "var") return;
      let expected;
      try {
        expected = evaluateShape(node, env);
      } catch {
        return;  // a variable no input fixes on its own: the VM's match checks it
      }
      if (expected !== value.dims[axis]) {
        throw new InferenceSessionError(`input '${name}': expected shape ${shown(sinfo.shape)}, got ${shownDims(value.dims)}: ` +
          `dimension ${axis} is ${value.dims[axis]}, not ${dim} = ${expected}`, name);
      }
    });
  }
}
