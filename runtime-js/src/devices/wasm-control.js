// The control block the WASM device's main thread and its pool's workers share (wasm-pool.js,
// wasm-thread.js): Int32 words of one SharedArrayBuffer, apart from the kernels' memory.

/** Word indices: the launch's kernel and arguments, how many threads share it, the count of workers
 * done with it, a failure flag, then one word per worker that the main thread bumps to start it. */
export const CONTROL = Object.freeze({
  DONE: 0, FAILED: 1, KERNEL: 2, ARGC: 3, PARTICIPANTS: 4, TOTAL: 5,
  ARGS: 8,  // the export's i32 arguments before its range: pointers, scalars, grid
  MAX_ARGS: 256,  // bindings (at most maxStorageBuffersPerShaderStage, 64) + scalars + 3
  GO: 8 + 256,
});

/** The words of a control block for ``workers`` workers. @param {number} workers */
export const controlWords = (workers) => CONTROL.GO + workers;

/** The flattened workgroups ``[begin, end)`` that participant ``part`` of ``parts`` runs of ``total``
 * (the main thread is participant 0): contiguous shares differing by at most one workgroup.
 * @param {number} total @param {number} part @param {number} parts */
export function rangeOf(total, part, parts) {
  return [Math.floor((total * part) / parts), Math.floor((total * (part + 1)) / parts)];
}
