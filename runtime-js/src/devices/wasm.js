// The WebAssembly device (devices/index.js, Device): everything lives in one WebAssembly.Memory that
// the kernel module imports. Above the module's own data and stack (its __heap_base) buffers are
// taken in order, never given back (the VM's pool reuses them), the memory growing when it needs
// more; a view's memory is that WebAssembly.Memory and its offset a pointer into it. A launch calls
// the kernel's export with the pointers of its tensors, its scalars and its grid; the C code loops
// over workgroups and threads (codegen/c).
//
// With threads (a cross-origin isolated page, or Node), the memory is shared and the build's
// threaded module (kernels-threads.wasm beside kernels.wasm) runs instead: a pool of workers
// (wasm-pool.js) each runs a share of every launch's workgroups. ``threads`` and ``threading`` say
// how many threads run and why no more.

import { DeviceError } from "../device.js";
import { WASM_FIT } from "../plan-checks.js";
import { RuntimeCheckError } from "../program.js";
import { callKeepingStack, CONTROL } from "./wasm-control.js";
import { defaultThreads, threadsUnavailable, WasmPool } from "./wasm-pool.js";

const PAGE = 65536;
/** Room for the module's data and stack below the buffers, when the memory is first made. */
const MODULE_ROOM = 1 << 20;
/** The threaded module's room: its stack alone is 1 MiB (codegen/c/wasm_build.py, THREAD_STACK_BYTES). */
const THREADED_MODULE_ROOM = 2 * MODULE_ROOM;
/** A module that imports env.memory and exports __heap_base = 0, for executables without kernels. */
const EMPTY_MODULE = Uint8Array.of(0, 0x61, 0x73, 0x6d, 1, 0, 0, 0,
  2, 0x0f, 1, 3, 0x65, 0x6e, 0x76, 6, 0x6d, 0x65, 0x6d, 0x6f, 0x72, 0x79, 2, 0, 0,  // import env.memory
  6, 6, 1, 0x7f, 0, 0x41, 0, 0x0b,  // global i32 const 0
  7, 0x0f, 1, 11, 0x5f, 0x5f, 0x68, 0x65, 0x61, 0x70, 0x5f, 0x62, 0x61, 0x73, 0x65, 3, 0);  // export __heap_base
const ALIGN = 16;
const alignUp = (/** @type {number} */ n) => Math.ceil(n / ALIGN) * ALIGN;
/** A shared memory's maximum: the whole of wasm32's 4 GiB, as the threaded module declares
 * (codegen/c/wasm_build.py, THREADS_MAX_MEMORY); a shared memory cannot grow past its maximum. */
const SHARED_MAX_PAGES = 65536;

/** The threaded variant of a kernel module's path: kernels.wasm -> kernels-threads.wasm. @param {string} path */
export const threadsModulePath = (path) => path.replace(/\.wasm$/, "-threads.wasm");

export class WasmDevice {
  kind = "wasm";
  backend = "c-wasm";  // the kernels it runs (docs/format.md)
  name = "WebAssembly SIMD on the CPU";

  /** @param {{threads?: number, memoryLimit?: number}} [options] threads: how many to run on at most (default: the
   * cores the browser reports); memoryLimit: the most WebAssembly memory this page may use (default 4 GiB) */
  constructor({ threads, memoryLimit = SHARED_MAX_PAGES * PAGE } = {}) {
    if (threads !== undefined && !(Number.isInteger(threads) && threads >= 1)) {
      throw new RangeError(`the WASM device's threads must be a whole number from 1, not ${threads}`);
    }
    /** @type {WebAssembly.Memory|null} */ this.memory = null;  // made by loadKernels, with the module
    this.reserved = 0;  // bytes asked for before the memory was made: it starts that large
    this.end = 0;  // the first free byte
    this.asked = threads;
    this.memoryLimit = memoryLimit;
    /** @type {WasmPool|null} */ this.pool = null;
    /** @type {WebAssembly.Global|null} */ this.stackPointer = null;  // the module's, put back after a trap
    /** @type {number[]} */ this.stackTops = [];  // each worker's stack top (its stack lies below)
    this.threads = 1;  // how many threads run a launch, once the kernels are loaded
    this.threading = "";  // why that many, for people
  }


  fits() {
    return [WASM_FIT];
  }

  /** @param {any} memory */
  owns(memory) {
    return memory !== null && memory === this.memory;
  }

  partOf() {
    return 0;
  }

  /** Make room for ``nbytes`` more, in one step (growing a large memory little by little copies it each time).
   * @param {number} nbytes */
  reserve(nbytes) {
    if (this.memory) this.grow(this.end + nbytes);
    else this.reserved += nbytes;
  }

  /** @param {number} end the bytes the memory must hold */
  grow(end) {
    const memory = /** @type {WebAssembly.Memory} */ (this.memory);
    const need = Math.ceil(end / PAGE) - memory.buffer.byteLength / PAGE;
    if (need <= 0) return;
    try {
      memory.grow(need);
    } catch {
      throw new RuntimeCheckError(`WebAssembly memory cannot grow to ${end} bytes`);
    }
  }

  /** @param {number} nbytes */
  allocate(nbytes) {
    if (!this.memory) throw new Error("the WASM device allocates once its kernels are loaded (its module places the memory)");
    const pointer = this.end;
    this.grow(pointer + nbytes);
    this.end = alignUp(pointer + Math.max(nbytes, 4));
    return { memory: this.memory, offset: pointer };
  }

  /** @param {Uint8Array} bytes */
  allocateWith(bytes) {
    const place = this.allocate(bytes.byteLength);
    this.upload(place.memory, place.offset, bytes);
    return place;
  }

  bytes() {
    return new Uint8Array(/** @type {WebAssembly.Memory} */ (this.memory).buffer);
  }

  /** @param {any} _memory @param {number} offset @param {Uint8Array} bytes */
  upload(_memory, offset, bytes) {
    this.bytes().set(bytes, offset);
  }

  /** @param {any} _memory @param {number} offset @param {number} nbytes */
  fillZero(_memory, offset, nbytes) {
    this.bytes().fill(0, offset, offset + nbytes);
  }

  /** @param {{offset: number, nbytes: number}} view */
  readBack({ offset, nbytes }) {
    return this.bytes().slice(offset, offset + nbytes);
  }

  /** @param {{offset: number, nbytes: number}} source @param {{offset: number}} destination */
  copy(source, destination) {
    this.bytes().copyWithin(destination.offset, source.offset, source.offset + source.nbytes);
  }

  /** Compile and instantiate the kernels' module (one for all of them) over a new memory; an export per kernel.
   * @param {any[]} kernels @param {Map<string, ArrayBuffer>} modules */
  async loadKernels(kernels, modules) {
    const paths = [...new Set(kernels.map((k) => k.module))];
    if (paths.length > 1) throw new DeviceError(`the WASM device runs kernels of one module; this executable has ${paths.join(", ")}`);
    // A program of calls and library functions alone has no kernels: an empty module stands in.
    const wasmBytes = paths.length ? modules.get(paths[0]) : EMPTY_MODULE;
    if (!wasmBytes) throw new Error(`the kernel module ${paths[0]} was not loaded`);
    const threaded = paths.length ? await this.startThreads(kernels, modules.get(threadsModulePath(paths[0]))) : null;
    if (threaded) return threaded;
    const module = await WebAssembly.compile(wasmBytes);
    this.memory = new WebAssembly.Memory({ initial: Math.ceil((this.reserved + MODULE_ROOM) / PAGE) });
    const instance = await WebAssembly.instantiate(module, { env: { memory: this.memory } });
    const exports = /** @type {any} */ (instance.exports);
    this.end = alignUp(Number(exports.__heap_base.value));
    this.grow(this.end + this.reserved);
    this.stackPointer = exports.__stack_pointer ?? null;  // a build before it was exported has none to put back
    return kernelExports(kernels, exports);
  }

  /**
   * The kernels of the threaded module over a shared memory and a pool of workers, or null (with the
   * reason in ``threading``) when this context, the build or the options give one thread.
   * @param {any[]} kernels @param {ArrayBuffer|undefined} threadsBytes
   */
  async startThreads(kernels, threadsBytes) {
    const wanted = this.asked ?? defaultThreads();
    const unavailable = threadsUnavailable();
    this.threading = wanted <= 1 ? (this.asked ? "one thread was asked for" : "the browser reports one core")
      : unavailable ?? (threadsBytes ? "" : "this build has no threaded kernels (kernels-threads.wasm): rebuild it to run on threads");
    if (this.threading) return null;
    let memory;
    try {
      memory = new WebAssembly.Memory({ initial: Math.ceil((this.reserved + THREADED_MODULE_ROOM) / PAGE), maximum: SHARED_MAX_PAGES,
        shared: true });
    } catch (error) {
      this.threading = `no shared WebAssembly memory of 4 GiB here (${/** @type {Error} */ (error).message}), so WebAssembly runs on one thread`;
      return null;
    }
    const module = await WebAssembly.compile(/** @type {ArrayBuffer} */ (threadsBytes));
    this.memory = memory;
    const instance = await WebAssembly.instantiate(module, { env: { memory } });  // it writes the module's data, once
    const exports = /** @type {any} */ (instance.exports);
    this.end = alignUp(Number(exports.__heap_base.value));
    // The module's own stack (below its data) is the main thread's; each worker's is as large, above the heap
    // base. The build's memory figures (bundle.json, which wasmMisfit checks before anything is fetched) cannot
    // know the threads, so the worker stacks come out of what the model leaves below the memory limit: as
    // many workers as fit, and ``threading`` says when that is fewer than asked.
    const stackBytes = alignUp(Number(exports.__stack_pointer.value));
    const stacksStart = this.end;
    const room = Math.floor((this.memoryLimit - stacksStart - this.reserved) / stackBytes);
    const workers = Math.max(0, Math.min(wanted - 1, room));
    const cramped = workers < wanted - 1 ? `: the model leaves room in WebAssembly's memory for ${workers} more ` +
      `thread stacks of ${stackBytes >> 20} MiB, not ${wanted - 1}` : "";
    this.stackTops = Array.from({ length: workers }, () => this.allocate(stackBytes).offset + stackBytes);
    this.grow(this.end + this.reserved);
    this.stackPointer = exports.__stack_pointer;
    const runs = kernelExports(kernels, exports);
    try {
      if (!workers) throw new Error(`no room for a second thread's stack${cramped}`);
      this.pool = await WasmPool.start(module, memory, this.stackTops, kernels.map((k) => k.entry_point));
      this.threading = `${this.pool.threads} threads (Web Workers over one shared memory)${cramped}`;
    } catch (error) {
      // Workers refused (a Content-Security-Policy, say): the threaded module runs on this thread alone, and
      // the workers' stacks are given back to the tensors.
      this.pool = WasmPool.alone();
      this.end = stacksStart;
      this.stackTops = [];
      this.threading = `the thread pool could not start (${/** @type {Error} */ (error).message}), so WebAssembly runs on one thread`;
    }
    this.threads = this.pool.threads;
    return runs.map((run, index) => ({ run, index, name: kernels[index].name }));
  }

  /** @param {Function | {run: Function, index: number, name: string}} kernel a loadKernels handle @param {{offset: number}[]} views */
  bind(kernel, views) {
    const pointers = views.map((v) => v.offset);
    if (typeof kernel === "function") return { run: kernel, pointers };
    if (pointers.length + 3 > CONTROL.MAX_ARGS) throw tooManyArguments(kernel.name, pointers.length + 3);
    return { ...kernel, pointers };
  }

  /** @param {{run: Function, pointers: number[], index?: number, name?: string}} bound @param {number[]} scalars @param {number[]} grid */
  launch({ run, pointers, index, name }, scalars, grid) {
    // The pool passes a launch's arguments through its control block, which has room for MAX_ARGS.
    if (index !== undefined && pointers.length + scalars.length + 3 > CONTROL.MAX_ARGS) {
      throw tooManyArguments(/** @type {string} */ (name), pointers.length + scalars.length + 3);
    }
    if (!this.pool) {
      callKeepingStack(this.stackPointer, run, [...pointers, ...scalars, ...grid]);
      return;
    }
    this.pool.launch(/** @type {number} */ (index), run, [...pointers, ...scalars, ...grid], grid[0] * grid[1] * grid[2],
      this.stackPointer);
  }

  flush() {}

  /** Stop the pool's workers and let the memory go (the workers hold it too while they run). */
  destroy() {
    this.pool?.destroy();
    this.pool = null;
    this.memory = null;
    this.stackPointer = null;
  }
}

/** The error of a launch with more arguments than the thread pool passes. @param {string} name @param {number} count */
const tooManyArguments = (name, count) => new DeviceError(`kernel ${name} takes ${count} arguments (its tensors, ` +
  `scalars and grid), more than the WASM thread pool passes (${CONTROL.MAX_ARGS})`);

/** Each kernel's export of ``exports``. @param {any[]} kernels @param {any} exports */
function kernelExports(kernels, exports) {
  return kernels.map((kernel) => {
    const run = exports[kernel.entry_point];
    if (typeof run !== "function") throw new Error(`${kernel.module} does not export ${kernel.entry_point} (kernel ${kernel.name})`);
    return run;
  });
}

/** Open the WebAssembly device, or a DeviceError when this browser has no WebAssembly.
 * @param {any} [_exe] @param {{threads?: number, memoryLimit?: number}} [options] */
export async function openWasm(_exe, { threads, memoryLimit } = {}) {
  if (typeof WebAssembly === "undefined") throw new DeviceError("this browser has no WebAssembly");
  return new WasmDevice({ threads, memoryLimit });
}
