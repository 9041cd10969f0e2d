// One worker of the WASM device's thread pool (wasm-pool.js), in a browser's Web Worker or Node's
// worker_threads. It instantiates the threaded kernel module (kernels-threads.wasm) over the device's
// shared memory with a stack of its own, says "ready", and from then on only waits on its slot of the
// control block: each time the main thread bumps it, the worker claims and runs chunks of that launch's
// workgroups until none is left (wasm-control.js). It never answers another message (its event loop is blocked in
// Atomics.wait), so the page's side talks to it through shared memory alone.

import { CONTROL, runChunks } from "./wasm-control.js";

/** Node's module of workers, named through a variable: a browser never resolves it. */
const NODE_WORKERS = "node:worker_threads";

/** @type {{postMessage: (message: any) => void, onMessage: (listener: (data: any) => void) => void}} */
const port = typeof globalThis.WorkerGlobalScope !== "undefined"
  ? { postMessage: (message) => self.postMessage(message), onMessage: (listener) => { self.onmessage = (event) => listener(event.data); } }
  : await nodePort();

async function nodePort() {
  const { parentPort } = await import(NODE_WORKERS);
  if (!parentPort) throw new Error("wasm-thread.js runs as a worker of the WASM device's pool");
  return { postMessage: (/** @type {any} */ message) => parentPort.postMessage(message),
    onMessage: (/** @type {(data: any) => void} */ listener) => { parentPort.once("message", listener); } };
}

/** How many times a worker looks at its slot before it sleeps (some tens of microseconds): back-to-back
 * launches (a decode step's hundreds) then start without a futex wake-up, and an idle worker soon stops
 * taking a core. */
const SPINS = 20000;

port.onMessage(async (/** @type {any} */ data) => {
  const { module, memory, control, worker, stackTop, entries } = data;
  let functions, stackPointer;
  try {
    const instance = /** @type {WebAssembly.Instance} */ (/** @type {unknown} */ (await WebAssembly.instantiate(module, { env: { memory } })));
    const exports = /** @type {any} */ (instance.exports);
    // Every instance's stack pointer starts where the module's own stack ends: this worker gets its own.
    stackPointer = exports.__stack_pointer;
    stackPointer.value = stackTop;
    functions = entries.map((/** @type {string} */ name) => exports[name]);
  } catch (error) {
    port.postMessage({ type: "error", message: /** @type {Error} */ (error).message ?? String(error) });
    return;
  }
  port.postMessage({ type: "ready" });
  serve(new Int32Array(control), worker, functions, stackPointer);
});

/** Run chunks of each launch posted to this worker's slot, forever.
 * @param {Int32Array} ctl @param {number} worker @param {Function[]} functions
 * @param {WebAssembly.Global} stackPointer this worker's, kept at its stack top between launches */
function serve(ctl, worker, functions, stackPointer) {
  const slot = CONTROL.GO + worker;
  const exportOf = (/** @type {number} */ kernel) => functions[kernel];
  let seen = 0;
  for (;;) {
    let go = Atomics.load(ctl, slot);
    for (let i = 0; go === seen && i < SPINS; i++) go = Atomics.load(ctl, slot);
    if (go === seen) {
      Atomics.wait(ctl, slot, seen);
      continue;
    }
    seen = go;
    runChunks(ctl, exportOf, stackPointer);  // a failure is flagged in the control block: the main thread throws
  }
}
