// The WebGPU device (devices/index.js, Device): GPU buffers, WGSL kernels as compute pipelines, and
// launches recorded into one compute pass of one command encoder, submitted together. The encoder is
// submitted first whenever the queue must see the work before something else: a write from the host,
// a read back, or a second launch of one instruction before the first has run (its uniform buffer
// holds one set of sizes at a time).

import { adapterName, requestDeviceFor } from "../device.js";
import { webgpuFit } from "../plan-checks.js";
import { RuntimeCheckError } from "../program.js";

/* global GPUBufferUsage, GPUMapMode, GPUShaderStage */

const align4 = (/** @type {number} */ n) => Math.ceil(n / 4) * 4;

export class WebGPUDevice {
  kind = "webgpu";
  backend = "wgsl";  // the kernels it runs (docs/format.md)

  /** @param {GPUDevice} gpu @param {string} [name] the adapter, for people */
  constructor(gpu, name = "WebGPU") {
    this.gpu = gpu;
    this.name = name;
    this.storageUsage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
    /** @type {WeakSet<GPUBuffer>} */ this.buffers = new WeakSet();  // the storage buffers this device made
    /** @type {GPUCommandEncoder|null} */ this.encoder = null;
    /** @type {GPUComputePassEncoder|null} */ this.pass = null;
    /** @type {Set<GPUBuffer>} */ this.written = new Set();  // uniforms written since the last submit
    /** @type {WeakMap<object, GPUBuffer>} */ this.uniforms = new WeakMap();  // one per launch site
    /** @type {Map<number, GPUBuffer[]>} */ this.staging = new Map();  // MAP_READ buffers by size, for reuse
  }

  /** What the plan checks ask of this device (plan-checks.js). */
  fits() {
    return [webgpuFit(this.gpu.limits)];
  }

  /** @param {any} memory */
  owns(memory) {
    return this.buffers.has(memory);
  }

  partOf() {
    return 0;
  }

  reserve() {}

  /** @param {number} nbytes */
  allocate(nbytes) {
    const limit = this.gpu.limits?.maxBufferSize ?? Infinity;
    if (nbytes > limit) throw new RuntimeCheckError(`a tensor of ${nbytes} bytes is larger than this device's maxBufferSize ${limit}`);
    const buffer = this.gpu.createBuffer({ size: Math.max(align4(nbytes), 4), usage: this.storageUsage });
    this.buffers.add(buffer);
    return { memory: buffer, offset: 0 };
  }

  /** A buffer holding ``bytes``, written while it is mapped at creation (no staging copy).
   * @param {Uint8Array} bytes */
  allocateWith(bytes) {
    const buffer = this.gpu.createBuffer({ size: Math.max(align4(bytes.byteLength), 4), usage: this.storageUsage, mappedAtCreation: true });
    new Uint8Array(buffer.getMappedRange()).set(bytes);
    buffer.unmap();
    this.buffers.add(buffer);
    return { memory: buffer, offset: 0 };
  }

  /** @param {GPUBuffer} memory @param {number} offset @param {Uint8Array} bytes */
  upload(memory, offset, bytes) {
    this.flush();  // the work recorded so far runs before the write lands
    this.gpu.queue.writeBuffer(memory, offset, /** @type {Uint8Array<ArrayBuffer>} */ (bytes));
  }

  /** @param {GPUBuffer} memory @param {number} offset @param {number} nbytes */
  fillZero(memory, offset, nbytes) {
    this.upload(memory, offset, new Uint8Array(align4(nbytes)));
  }

  /** The bytes of a view once everything recorded before has run.
   * @param {{memory: GPUBuffer, offset: number, nbytes: number}} view */
  async readBack({ memory, offset, nbytes }) {
    this.flush();
    const size = Math.max(align4(nbytes), 4);
    const staging = this.staging.get(size)?.pop() ??
      this.gpu.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const encoder = this.gpu.createCommandEncoder();
    encoder.copyBufferToBuffer(memory, offset, staging, 0, size);
    this.gpu.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const bytes = new Uint8Array(staging.getMappedRange().slice(0, nbytes));
    staging.unmap();
    if (!this.staging.has(size)) this.staging.set(size, []);
    /** @type {GPUBuffer[]} */ (this.staging.get(size)).push(staging);
    return bytes;
  }

  /** Record a copy between two views, after the launches recorded so far.
   * @param {{memory: GPUBuffer, offset: number, nbytes: number}} source @param {{memory: GPUBuffer, offset: number}} destination */
  copy(source, destination) {
    this.endPass();
    /** @type {GPUCommandEncoder} */ (this.encoder).copyBufferToBuffer(source.memory, source.offset, destination.memory,
      destination.offset, align4(source.nbytes));
  }

  /** A compute pipeline per kernel record, from its WGSL module file.
   * @param {any[]} kernels @param {Map<string, ArrayBuffer>} modules */
  async loadKernels(kernels, modules) {
    const decoder = new TextDecoder();
    return Promise.all(kernels.map((kernel) => {
      const module = modules.get(kernel.module);
      if (!module) throw new Error(`the kernel module ${kernel.module} of kernel ${kernel.name} was not loaded`);
      return this.createPipeline(kernel, decoder.decode(module));
    }));
  }

  /** @param {any} kernel @param {string} code its WGSL */
  async createPipeline(kernel, code) {
    const module = this.gpu.createShaderModule({ code, label: kernel.name });
    const info = await module.getCompilationInfo();
    const errors = info.messages.filter((m) => m.type === "error");
    if (errors.length) {
      throw new Error(`kernel ${kernel.name} does not compile on this device: ${errors[0].message} (line ${errors[0].lineNum})`);
    }
    // The ABI (docs/format.md): storage buffers in binding order, then one uniform of i32 scalars.
    /** @type {GPUBindGroupLayoutEntry[]} */
    const entries = kernel.abi.bindings.map((/** @type {any} */ b) => ({
      binding: b.index, visibility: GPUShaderStage.COMPUTE, buffer: { type: "storage" } }));
    if (kernel.abi.scalars.length) {
      entries.push({ binding: kernel.abi.scalars[0].binding, visibility: GPUShaderStage.COMPUTE, buffer: { type: "uniform" } });
    }
    const layout = this.gpu.createBindGroupLayout({ label: kernel.name, entries });
    const pipeline = await this.gpu.createComputePipelineAsync({
      label: kernel.name, layout: this.gpu.createPipelineLayout({ bindGroupLayouts: [layout] }),
      compute: { module, entryPoint: kernel.entry_point },
    });
    return { kernel, pipeline, layout };
  }

  /**
   * ``loaded`` (a loadKernels handle) bound to its tensors' views, in ABI order; ``site``, the launch
   * instruction, keeps one uniform buffer across its launches.
   * @param {{kernel: any, pipeline: GPUComputePipeline, layout: GPUBindGroupLayout}} loaded
   * @param {{memory: GPUBuffer, offset: number, nbytes: number}[]} views @param {object} site
   */
  bind(loaded, views, site) {
    const { kernel } = loaded;
    // Every storage binding is read_write, and WebGPU refuses two writable bindings of overlapping
    // bytes (the dispatch would be dropped and its outputs left as they were): say so here instead.
    views.forEach((a, i) => views.slice(0, i).forEach((b, j) => {
      if (a.memory === b.memory && a.offset < b.offset + b.nbytes && b.offset < a.offset + a.nbytes) {
        throw new RuntimeCheckError(`kernel ${kernel.name}: bindings ${j} and ${i} overlap in one buffer, which WebGPU refuses`);
      }
    }));
    // An empty tensor still needs a binding of at least one word (WebGPU refuses size 0); its kernel reads none of it.
    /** @type {GPUBindGroupEntry[]} */
    const entries = views.map((v, binding) => ({ binding, resource: { buffer: v.memory, offset: v.offset,
      size: Math.min(Math.max(align4(v.nbytes), 4), v.memory.size - v.offset) } }));
    let uniform = null;
    if (kernel.abi.scalars.length) {
      uniform = this.uniforms.get(site) ?? null;
      if (!uniform) {
        uniform = this.gpu.createBuffer({ size: 16 * Math.ceil(kernel.abi.scalars.length / 4),
          usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
        this.uniforms.set(site, uniform);
      }
      entries.push({ binding: entries.length, resource: { buffer: uniform, offset: 0, size: uniform.size } });
    }
    const group = this.gpu.createBindGroup({ label: kernel.name, layout: loaded.layout, entries });
    return { pipeline: loaded.pipeline, group, uniform };
  }

  /** @param {{pipeline: GPUComputePipeline, group: GPUBindGroup, uniform: GPUBuffer|null}} bound
   *  @param {number[]} scalars @param {number[]} grid */
  launch({ pipeline, group, uniform }, scalars, grid) {
    if (uniform) {
      if (this.written.has(uniform)) this.flush();
      const words = new Int32Array(uniform.size / 4);
      words.set(scalars);
      this.gpu.queue.writeBuffer(uniform, 0, words);
      this.written.add(uniform);
    }
    this.encoder ??= this.gpu.createCommandEncoder();
    this.pass ??= this.encoder.beginComputePass();
    this.pass.setPipeline(pipeline);
    this.pass.setBindGroup(0, group);
    this.pass.dispatchWorkgroups(grid[0], grid[1], grid[2]);
  }

  /** End the open compute pass (a copy is recorded outside one), leaving an encoder to record into. */
  endPass() {
    this.pass?.end();
    this.pass = null;
    this.encoder ??= this.gpu.createCommandEncoder();
  }

  /** Submit what is recorded. */
  flush() {
    if (!this.encoder) return;
    this.pass?.end();
    this.pass = null;
    this.gpu.queue.submit([this.encoder.finish()]);
    this.encoder = null;
    this.written.clear();
  }

  destroy() {
    this.gpu.destroy();
  }
}

/**
 * Open a WebGPU device for ``exe`` (its required features and limits): ``gpuDevice`` when the caller
 * has one, else one asked of ``adapter`` (or of the browser's).
 * @param {any} exe an executable, or a split build's entry in its devices
 * @param {{adapter?: any, gpuDevice?: GPUDevice}} [options]
 */
export async function openWebGPU(exe, { adapter, gpuDevice } = {}) {
  if (gpuDevice) return new WebGPUDevice(gpuDevice, adapter ? adapterName(adapter) : "WebGPU");
  const { device, adapterName: name } = await requestDeviceFor(exe, adapter);
  return new WebGPUDevice(device, name);
}
