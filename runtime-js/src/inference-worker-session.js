// The page's side of an InferenceSession running in a Web Worker (inference-worker.js): the same API.
//
//   const session = await InferenceSession.create(url, { worker: true });
//   const { output0 } = await session.run({ image: tensor });
//
// Inputs are copied once into buffers of their own, which are transferred (the caller keeps its tensors);
// outputs come back transferred. Feeds are checked here too, so an error names the input before anything
// is posted.
import { InferenceSessionError, SessionDescription, Tensor } from "./inference-session.js";

let nextId = 0;

/** @param {any} error */
const failure = (error) => error.name === "InferenceSessionError" ? new InferenceSessionError(error.message, error.input)
  : Object.assign(new Error(error.message), { name: error.name });

/** @param {string | string[]} url @param {any} options */
export async function createWorkerSession(url, { worker, onProgress = () => {}, fetchFn, cache, gpuDevice, adapter, ...options }) {
  if (fetchFn || cache || gpuDevice || adapter || options.libraries) {
    throw new InferenceSessionError("a session in a Worker fetches, caches and opens its device itself: fetchFn, cache, " +
      "gpuDevice, adapter and libraries are options of a session on the page's thread");
  }
  if (typeof Worker === "undefined") {
    throw new InferenceSessionError("this environment has no Web Workers (Node has worker_threads, which this API does not " +
      "use): create the session without {worker: true}");
  }
  const thread = worker instanceof Worker ? worker : new Worker(new URL("./inference-worker.js", import.meta.url), { type: "module" });
  /** @type {Map<number, (message: any) => void>} */
  const listeners = new Map();
  thread.onmessage = (event) => listeners.get(event.data.id)?.(event.data);
  thread.onerror = (event) => {
    for (const listener of listeners.values()) listener({ type: "error", error: { name: "Error", message: event.message } });
  };
  /** One request and its answer. @param {any} message @param {Transferable[]} [transfer] @returns {Promise<any>} */
  const ask = (message, transfer = []) => new Promise((resolve, reject) => {
    const id = nextId++;
    listeners.set(id, (answer) => {
      if (answer.type === "progress") return onProgress(answer.progress);
      listeners.delete(id);
      if (answer.type === "error") reject(failure(answer.error)); else resolve(answer);
    });
    thread.postMessage({ ...message, id }, transfer);
  });
  const base = globalThis.location?.href;
  const absolute = (Array.isArray(url) ? url : [url]).map((u) => new URL(u, base).href);
  const { description } = await ask({ type: "create", url: Array.isArray(url) ? absolute : absolute[0], options });
  return new WorkerInferenceSession(thread, ask, description);
}

export class WorkerInferenceSession {
  /** @param {Worker} worker @param {(message: any, transfer?: Transferable[]) => Promise<any>} ask @param {any} description */
  constructor(worker, ask, description) {
    this.worker = worker;
    this.ask = ask;
    this.inputMetadata = description.inputs;
    this.outputMetadata = description.outputs;
    this.symbolBounds = description.bounds;
    this.device = description.device;
    this.function = description.function;
    this.url = description.url;
    this.passedOver = description.passedOver ?? [];
    this.released = false;
    // The same checks as the worker's, from the same metadata: a bad feed fails before it is posted.
    this.checks = Object.assign(Object.create(SessionDescription.prototype), {
      function: description.function, bounds: description.bounds, outputs: description.outputs,
      params: description.inputs.map((/** @type {any} */ m) => ({ name: m.name, sinfo: sinfoOf(m) })),
    });
  }

  get inputNames() { return this.inputMetadata.map((/** @type {any} */ m) => m.name); }
  get outputNames() { return this.outputMetadata.map((/** @type {any} */ m) => m.name); }

  /** @param {Record<string, any>} feeds @param {string[] | {fetches?: string[]}} [fetches] @returns {Promise<Record<string, Tensor>>} */
  async run(feeds, fetches) {
    if (this.released) throw new InferenceSessionError("this session was released");
    const names = Array.isArray(fetches) ? fetches : fetches?.fetches;
    this.checks.wanted(names);
    this.checks.checkFeeds(feeds);
    /** @type {Record<string, any>} */
    const plain = {};
    /** @type {Transferable[]} */
    const transfer = [];
    for (const [name, value] of Object.entries(feeds)) {
      if (value instanceof Tensor) {
        const data = value.data.slice();  // a copy of its own, transferred: the caller keeps its tensor
        plain[name] = { type: value.type, data, dims: [...value.dims] };
        transfer.push(data.buffer);
      } else {
        plain[name] = value;
      }
    }
    const { outputs } = await this.ask({ type: "run", feeds: plain, fetches: names }, transfer);
    /** @type {Record<string, Tensor>} */
    const result = {};
    for (const [name, t] of Object.entries(outputs)) result[name] = new Tensor(t.type, t.data, t.dims);
    return result;
  }

  async release() {
    if (this.released) return;
    this.released = true;
    await this.ask({ type: "release" });
    this.worker.terminate();
  }
}

/** The struct info the checks read, back from an input's metadata. @param {any} m */
function sinfoOf(m) {
  if (!m.isTensor) return { kind: "prim", dtype: m.type, value: null };
  return { kind: "tensor", dtype: m.type || null, ndim: m.shape ? m.shape.length : -1, shape: m.shape && m.shape.every((/** @type {any} */ d) => d !== null) ? m.shape.map(String) : null };
}
