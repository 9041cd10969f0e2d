// The pool that run-time allocations come from (docs/format.md "Memory"): storages and tensors the
// memory plan could not place (sizes without upper bounds, data-dependent sizes, recursion, results
// that outlive their callee). Blocks are kept by size class once freed, so that a loop or a
// repeated call allocates nothing new after its first round.

/** @typedef {{memory: any, offset: number, size: number}} Block
 *  memory: the GPUBuffer holding it (WebGPU), or null (WASM: offset is the pointer) */

/** Size classes: powers of two from 256 bytes (a WebGPU binding offset's alignment) to 1 MiB, then
 * whole MiB, so that a block wastes at most half of itself when small and 1 MiB when large.
 * @param {number} nbytes */
export function sizeClass(nbytes) {
  const MIB = 1 << 20;
  if (nbytes > MIB) return Math.ceil(nbytes / MIB) * MIB;
  let size = 256;
  while (size < nbytes) size *= 2;
  return size;
}

export class BlockPool {
  /** @param {(size: number) => Block} create makes a new block of exactly ``size`` bytes */
  constructor(create) {
    this.create = create;
    /** @type {Map<number, Block[]>} */ this.free = new Map();
    this.created = 0;  // blocks made so far: a test can see that a repeated call reuses them
    this.live = 0;  // blocks handed out and not yet given back
  }

  /** @param {number} nbytes @returns {Block} */
  alloc(nbytes) {
    const size = sizeClass(Math.max(nbytes, 4));
    const list = this.free.get(size);
    this.live += 1;
    if (list && list.length) return /** @type {Block} */ (list.pop());
    this.created += 1;
    return this.create(size);
  }

  /** @param {Block} block */
  release(block) {
    this.live -= 1;
    let list = this.free.get(block.size);
    if (!list) this.free.set(block.size, list = []);
    list.push(block);
  }
}
