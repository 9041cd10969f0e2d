// The WebGPU side of the frame interpreter (interpreter.js, its Machine) and the results a
// function leaves in GPU buffers.

import { TensorValue } from "./interpreter.js";
import { BlockPool } from "./pool.js";
import { ResultInPlace, RuntimeCheckError } from "./program.js";

/* global GPUBufferUsage, GPUMapMode */

/** A function's result left in a GPU buffer (see ResultInPlace). */
export class DeviceTensor extends ResultInPlace {
  /** @param {{name: string, generation: number}} fn @param {number} generation @param {GPUBuffer} buffer @param {number} offset
   *  @param {number} nbytes @param {number[]} shape @param {string} dtype */
  constructor(fn, generation, buffer, offset, nbytes, shape, dtype) {
    super(fn, generation, nbytes, shape, dtype);
    this.buffer = buffer;
    this.offset = offset;
  }
}

/**
 * The interpreter's WebGPU side (interpreter.js, Machine). Launches are recorded into one command
 * encoder and submitted together; the encoder is submitted first whenever the queue must see the
 * work before something else: a write from the host, a read back, or a second launch of one
 * instruction (in a loop), whose uniform buffer holds one set of sizes at a time.
 */
export class GpuMachine {
  /** @param {import("./vm.js").VirtualMachine} vm */
  constructor(vm) {
    this.vm = vm;
    this.device = vm.device;
    const limit = vm.device.limits?.maxBufferSize ?? Infinity;
    this.pool = new BlockPool((size) => {
      if (size > limit) throw new RuntimeCheckError(`a tensor of ${size} bytes is larger than this device's maxBufferSize ${limit}`);
      return { memory: vm.createBuffer(size, vm.storageUsage), offset: 0, size };
    });
    /** @type {GPUCommandEncoder|null} */ this.encoder = null;
    /** @type {Set<GPUBuffer>} */ this.written = new Set();  // uniforms written since the last submit
    /** @type {WeakMap<any, GPUBuffer>} */ this.uniforms = new WeakMap();  // per launch instruction
  }

  /** @param {string} name */
  constant(name) {
    return { memory: this.vm.constants.get(name), offset: 0 };
  }

  /** @param {string} name @param {number} nbytes */
  state(name, nbytes) {
    return { memory: this.vm.stateBuffer(name, nbytes), offset: 0 };
  }

  /** @param {string} fn @param {number} buffer */
  arena(fn, buffer) {
    return { memory: /** @type {GPUBuffer[]} */ (this.vm.arenas.get(fn))[buffer], offset: 0 };
  }

  /** @param {TensorValue} tensor @param {Uint8Array<ArrayBuffer>} bytes */
  write(tensor, bytes) {
    this.flush();
    this.device.queue.writeBuffer(tensor.memory, tensor.offset, bytes);
  }

  /** @param {TensorValue} tensor */
  async read(tensor) {
    this.flush();
    const staging = this.vm.createBuffer(tensor.nbytes, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
    const encoder = this.device.createCommandEncoder();
    encoder.copyBufferToBuffer(tensor.memory, tensor.offset, staging, 0, staging.size);
    this.device.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const bytes = new Uint8Array(staging.getMappedRange().slice(0));
    staging.unmap();
    staging.destroy();
    return bytes;
  }

  /** @param {any} op @param {TensorValue[]} tensors @param {number[]} scalars @param {number[]} grid */
  launch(op, tensors, scalars, grid) {
    const { device, vm } = this;
    const kernel = vm.exe.kernels[op.kernel];
    /** @type {GPUBindGroupEntry[]} */
    // An empty tensor still needs a binding of at least one word (WebGPU refuses size 0); its
    // kernel reads none of it.
    const entries = tensors.map((t, binding) => ({ binding, resource: { buffer: t.memory, offset: t.offset,
      size: Math.min(Math.max(t.nbytes, 4), t.memory.size - t.offset) } }));
    // Every storage binding is read_write, and WebGPU refuses two writable bindings of overlapping
    // bytes (the dispatch would be dropped and its outputs left as they were): say so here instead.
    tensors.forEach((a, i) => tensors.slice(0, i).forEach((b, j) => {
      if (a.memory === b.memory && a.offset < b.offset + b.nbytes && b.offset < a.offset + a.nbytes) {
        throw new RuntimeCheckError(`kernel ${kernel.name}: bindings ${j} and ${i} overlap in one buffer, which WebGPU refuses`);
      }
    }));
    if (kernel.abi.scalars.length) {
      let uniform = this.uniforms.get(op);
      if (!uniform) {
        uniform = vm.createBuffer(16 * Math.ceil(kernel.abi.scalars.length / 4), GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
        this.uniforms.set(op, uniform);
      }
      if (this.written.has(uniform)) this.flush();
      const words = new Int32Array(uniform.size / 4);
      words.set(scalars);
      device.queue.writeBuffer(uniform, 0, words);
      this.written.add(uniform);
      entries.push({ binding: entries.length, resource: { buffer: uniform, offset: 0, size: uniform.size } });
    }
    const group = device.createBindGroup({ label: kernel.name, layout: vm.pipelines[op.kernel].layout, entries });
    this.encoder ??= device.createCommandEncoder();
    const pass = this.encoder.beginComputePass();
    pass.setPipeline(vm.pipelines[op.kernel].pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(grid[0], grid[1], grid[2]);
    pass.end();
  }

  flush() {
    if (!this.encoder) return;
    this.device.queue.submit([this.encoder.finish()]);
    this.encoder = null;
    this.written.clear();
  }

  /** @param {any} value */
  inPlace(value) {
    if (!(value instanceof DeviceTensor)) return null;
    value.checkCurrent();
    return new TensorValue(value.buffer, value.offset, value.nbytes, value.shape, value.dtype, null);
  }

  /** @param {{name: string, generation: number}} fn @param {number} generation @param {TensorValue} t */
  leaveInPlace(fn, generation, t) {
    return new DeviceTensor(fn, generation, t.memory, t.offset, t.nbytes, t.shape, t.dtype);
  }
}
