// The control block the WASM device's main thread and its pool's workers share (wasm-pool.js,
// wasm-thread.js): Int32 words of one SharedArrayBuffer, apart from the kernels' memory.
//
// A launch is cut into chunks of contiguous workgroups, which every thread (the main thread and the
// workers it wakes) claims one at a time from the NEXT word until none is left: a worker that wakes
// late, or is descheduled on a busy machine, leaves its chunks to the others instead of holding up the
// launch. NEXT holds the launch's chunk count (high half) and the next chunk to claim (low half), so one
// atomic add both claims a chunk and says whether it belongs to the launch: a claim at or past the
// count (a late worker's, after the last chunk) is no chunk, and the main thread starts a new launch
// only once every chunk of this one is done, so a valid claim's arguments are the current launch's.

/** Word indices: the chunks done, a failure flag, the launch's kernel, argument count, workgroups and
 * workgroups per chunk, the claim word, then the export's arguments and one word per worker that the
 * main thread bumps to wake it. */
export const CONTROL = Object.freeze({
  COMPLETED: 0, FAILED: 1, KERNEL: 2, ARGC: 3, TOTAL: 4, CHUNK: 5, NEXT: 6,
  ARGS: 8,  // the export's i32 arguments before its range: pointers, scalars, grid
  MAX_ARGS: 256,  // bindings + scalars + 3 (the grid): WasmDevice.launch refuses more, naming the kernel
  GO: 8 + 256,
});

/** Chunks per thread: enough that a thread that starts late still finds work, few enough that claiming
 * one (an atomic add) costs nothing beside running it. */
export const CHUNKS_PER_THREAD = 4;
/** The most chunks a launch has: the claim word's low half holds the next index, and every thread may
 * add one more past the end. */
export const MAX_CHUNKS = 4096;

/** The words of a control block for ``workers`` workers. @param {number} workers */
export const controlWords = (workers) => CONTROL.GO + workers;

/** The claim word of a launch of ``chunks`` chunks, none claimed yet. @param {number} chunks */
export const claimWord = (chunks) => chunks << 16;

/**
 * Call ``run`` with ``args`` on a thread whose instance's stack pointer is ``stackPointer``. A trap skips
 * the export's epilogue, which would leave the stack pointer lowered by the call's frame: trap after trap
 * a worker's stack would walk down into its neighbour's (or the module's data), so it is put back.
 * @param {WebAssembly.Global | null} stackPointer @param {Function} run @param {number[]} args
 */
export function callKeepingStack(stackPointer, run, args) {
  if (!stackPointer) {
    run(...args);
    return;
  }
  const top = stackPointer.value;
  try {
    run(...args);
  } catch (error) {
    stackPointer.value = top;
    throw error;
  }
}

/**
 * Claim and run chunks of the current launch until none is left. After a failure (a trap) on any thread
 * the chunks still claimed are counted without running, so that the launch ends; returns this thread's
 * error, or null.
 * @param {Int32Array} ctl @param {(kernel: number) => Function} exportOf each kernel's export on this thread
 * @param {WebAssembly.Global | null} stackPointer this thread's instance's, put back after a trap
 */
export function runChunks(ctl, exportOf, stackPointer) {
  let failure = null;
  for (;;) {
    const claim = Atomics.add(ctl, CONTROL.NEXT, 1);
    const index = claim & 0xffff;
    if (index >= claim >>> 16) return failure;
    if (!Atomics.load(ctl, CONTROL.FAILED)) {
      const total = ctl[CONTROL.TOTAL], chunk = ctl[CONTROL.CHUNK];
      try {
        callKeepingStack(stackPointer, exportOf(ctl[CONTROL.KERNEL]),
          [...ctl.subarray(CONTROL.ARGS, CONTROL.ARGS + ctl[CONTROL.ARGC]), index * chunk, Math.min(total, (index + 1) * chunk)]);
      } catch (error) {
        failure ??= error;
        Atomics.store(ctl, CONTROL.FAILED, 1);
      }
    }
    Atomics.add(ctl, CONTROL.COMPLETED, 1);
  }
}
