// The WASM device's pool of threads: Web Workers in a browser (worker_threads in Node), each with an
// instance of the threaded kernel module (kernels-threads.wasm, codegen/c/backend.py) over the
// device's one shared WebAssembly.Memory. A launch cuts the grid's flattened workgroups into chunks
// that the main thread and the workers it wakes claim one by one through a shared control block
// (wasm-control.js); the main thread then waits, spinning, for the chunks others still run. The wait
// spins because a launch is synchronous (the VM calls the next kernel right after) and a page's main
// thread may not block in Atomics.wait; a chunk is short, so the spin is too.

import { callKeepingStack, CHUNKS_PER_THREAD, claimWord, CONTROL, controlWords, MAX_CHUNKS, runChunks } from "./wasm-control.js";

/** Why this context cannot run the pool, or null when it can (cross-origin isolated, or Node). */
export function threadsUnavailable() {
  if (typeof SharedArrayBuffer === "undefined" || /** @type {any} */ (globalThis).crossOriginIsolated === false) {
    return "the page is not cross-origin isolated (it is served without the headers Cross-Origin-Opener-Policy: " +
      "same-origin and Cross-Origin-Embedder-Policy: require-corp; docs/web.md), so WebAssembly runs on one thread";
  }
  if (typeof Worker === "undefined" && !inNode()) return "this context cannot start Web Workers, so WebAssembly runs on one thread";
  return null;
}

/** The threads to use when no number is asked for: one per core the browser reports. */
export function defaultThreads() {
  return Math.max(1, Number(/** @type {any} */ (globalThis).navigator?.hardwareConcurrency) || 1);
}

/** Whether this is Node (its workers are worker_threads'). */
const inNode = () => !!(/** @type {any} */ (globalThis).process?.versions?.node);
/** Node's module of workers, named through a variable: a browser never resolves it, nor does the type checker. */
const NODE_WORKERS = "node:worker_threads";

/** How long a pool waits for its workers to say "ready" before it gives up (a worker that never answers:
 * a blocked script, a browser that starts no more workers) and the device runs on one thread. */
export const START_TIMEOUT_MS = 30000;

/** A worker by a uniform handle: post, listen (messages, errors, messages that could not be read, and an
 * exit, the last three as {type: "error"}), stop. @param {URL} url */
async function spawn(url) {
  if (typeof Worker !== "undefined") {
    const worker = new Worker(url, { type: "module" });
    return {
      post: (/** @type {any} */ message) => worker.postMessage(message),
      listen: (/** @type {(data: any) => void} */ listener) => {
        worker.onmessage = (event) => listener(event.data);
        worker.onerror = (event) => listener({ type: "error", message: event.message });
        worker.onmessageerror = () => listener({ type: "error", message: "a message of the worker could not be read" });
      },
      stop: () => worker.terminate(),
    };
  }
  const { Worker: NodeWorker } = await import(NODE_WORKERS);
  const worker = new NodeWorker(url);
  worker.unref();  // an idle pool does not keep Node running
  return {
    post: (/** @type {any} */ message) => worker.postMessage(message),
    listen: (/** @type {(data: any) => void} */ listener) => {
      worker.on("message", listener);
      worker.on("error", (/** @type {Error} */ error) => listener({ type: "error", message: error.message }));
      worker.on("messageerror", () => listener({ type: "error", message: "a message of the worker could not be read" }));
      worker.on("exit", (/** @type {number} */ code) => listener({ type: "error", message: `the worker exited (code ${code})` }));
    },
    stop: () => { worker.terminate(); },
  };
}

export class WasmPool {
  /**
   * Start ``stackTops.length`` workers over ``memory`` and wait until each has its instance; if one
   * cannot start (it fails, exits, or says nothing for ``timeoutMs``), stop those started and throw.
   * @param {WebAssembly.Module} module the threaded kernel module @param {WebAssembly.Memory} memory shared
   * @param {number[]} stackTops each worker's stack top (its stack lies below, in ``memory``)
   * @param {string[]} entries each kernel's export, by the index a launch names
   * @param {{timeoutMs?: number, script?: URL}} [options] script: the workers' module (wasm-thread.js)
   */
  static async start(module, memory, stackTops, entries, { timeoutMs = START_TIMEOUT_MS,
    script = new URL("./wasm-thread.js", import.meta.url) } = {}) {
    const control = new SharedArrayBuffer(controlWords(stackTops.length) * 4);
    /** @type {{post: (message: any) => void, listen: (listener: (data: any) => void) => void, stop: () => void}[]} */
    const workers = [];
    let timer;
    try {
      for (const _ of stackTops) workers.push(await spawn(script));
      const ready = Promise.all(workers.map((worker, index) => new Promise((resolve, reject) => {
        worker.listen((data) => {
          if (data.type === "ready") resolve(undefined);
          else reject(new Error(`a worker of the WASM thread pool could not start: ${data.message}`));
        });
        worker.post({ module, memory, control, worker: index, stackTop: stackTops[index], entries });
      })));
      const late = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`the workers of the WASM thread pool were not ready within ${timeoutMs} ms`)),
          timeoutMs);
      });
      await Promise.race([ready, late]);
    } catch (error) {
      for (const worker of workers) worker.stop();
      throw error;
    } finally {
      clearTimeout(timer);
    }
    return new WasmPool(workers, new Int32Array(control));
  }

  /** A pool of no workers: every launch on the calling thread (the threaded module without threads). */
  static alone() {
    return new WasmPool([], new Int32Array(new SharedArrayBuffer(controlWords(0) * 4)));
  }

  /** @param {{stop: () => void}[]} workers @param {Int32Array} control */
  constructor(workers, control) {
    this.workers = workers;
    this.control = control;
  }

  /** How many threads run a launch at most: the workers and the main thread. */
  get threads() {
    return this.workers.length + 1;
  }

  /**
   * Run ``total`` workgroups of kernel ``kernel`` (``run`` is the main thread's export of it) across
   * the pool, and return once all are done.
   * @param {number} kernel @param {Function} run @param {number[]} args the export's arguments before its range
   * @param {number} total @param {WebAssembly.Global | null} [stackPointer] the main thread's instance's, put
   * back after a trap (wasm-control.js, callKeepingStack)
   */
  launch(kernel, run, args, total, stackPointer = null) {
    if (args.length > CONTROL.MAX_ARGS) {  // more would overwrite the workers' wake-up words
      throw new RangeError(`kernel ${kernel} takes ${args.length} arguments before its range, more than the WASM thread pool passes (${CONTROL.MAX_ARGS})`);
    }
    const chunks = Math.min(total, this.threads * CHUNKS_PER_THREAD, MAX_CHUNKS);
    if (chunks <= 1) {
      callKeepingStack(stackPointer, run, [...args, 0, total]);
      return;
    }
    const ctl = this.control;
    const chunk = Math.ceil(total / chunks);
    const count = Math.ceil(total / chunk);
    ctl[CONTROL.KERNEL] = kernel;
    ctl[CONTROL.ARGC] = args.length;
    ctl.set(args, CONTROL.ARGS);
    ctl[CONTROL.TOTAL] = total;
    ctl[CONTROL.CHUNK] = chunk;
    Atomics.store(ctl, CONTROL.COMPLETED, 0);
    Atomics.store(ctl, CONTROL.NEXT, claimWord(count));  // seq-cst: the writes above are visible to a claim
    const woken = Math.min(this.workers.length, count - 1);
    for (let worker = 0; worker < woken; worker++) {
      Atomics.add(ctl, CONTROL.GO + worker, 1);
      Atomics.notify(ctl, CONTROL.GO + worker, 1);
    }
    const failure = runChunks(ctl, () => run, stackPointer);  // thrown once the workers are done with this launch's arguments
    while (Atomics.load(ctl, CONTROL.COMPLETED) < count);  // eslint-disable-line no-empty
    const flagged = Atomics.exchange(ctl, CONTROL.FAILED, 0);  // cleared for the next launch
    if (failure) throw failure;
    if (flagged) {
      throw new Error(`kernel ${kernel} failed (a WebAssembly trap) on a worker of the WASM thread pool`);
    }
  }

  destroy() {
    for (const worker of this.workers) worker.stop();
    this.workers = [];
  }
}

export { CONTROL };
