// Several devices behind the one Device interface (devices/index.js): how the VM runs a build split
// across devices (docs/format.md, "Devices (version 4)"; `tessera compile --gpu-layers N`), as the
// Python VM's vm/devices/split.py does. Each part is the device of one entry of the executable's
// devices, with its own memory; a view's memory tells the part it belongs to (each part owns the
// memories it made), a kernel handle and a binding remember theirs. The VM says where to allocate
// (the part); everything else follows the handle.
//
// A copy between parts is the `to_device` instruction: the source read back from its part once what
// was recorded before has run, then written into the destination's, after what was recorded there
// before (WebGPU -> WASM: a MAP_READ staging buffer mapped and its bytes set into the WebAssembly memory;
// WASM -> WebGPU: the GPU work recorded so far submitted, then queue.writeBuffer).

import { RuntimeCheckError } from "../program.js";

/** How people call a device of a split build: its first vdevice, "webgpu:0". @param {any} device */
export const deviceName = (device) => device.vdevices?.[0] ?? `${device.kind}:${device.id}`;

export class SplitDevice {
  kind = "split";

  /** @param {any[]} parts a Device per entry of the executable's devices @param {string[]} names how people call them */
  constructor(parts, names) {
    this.parts = parts;
    this.names = names;
    this.name = parts.map((part, i) => `${part.name} (${names[i]})`).join(" + ");
  }

  fits() {
    return this.parts.map((part, i) => ({ ...part.fits()[0], name: `device ${this.names[i]}` }));
  }

  /** The part holding ``memory``. @param {any} memory */
  partOf(memory) {
    const part = this.parts.findIndex((p) => p.owns(memory));
    if (part < 0) throw new Error("a buffer none of this split build's devices made");
    return part;
  }

  /** @param {any} memory */
  owns(memory) {
    return this.parts.some((p) => p.owns(memory));
  }

  /** @param {number} nbytes @param {number} part */
  reserve(nbytes, part) {
    this.parts[part].reserve(nbytes);
  }

  /** @param {number} nbytes @param {number} part */
  allocate(nbytes, part) {
    return this.parts[part].allocate(nbytes);
  }

  /** @param {Uint8Array} bytes @param {number} part */
  allocateWith(bytes, part) {
    return this.parts[part].allocateWith(bytes);
  }

  /** @param {any} memory @param {number} offset @param {Uint8Array} bytes */
  upload(memory, offset, bytes) {
    this.parts[this.partOf(memory)].upload(memory, offset, bytes);
  }

  /** @param {any} memory @param {number} offset @param {number} nbytes */
  fillZero(memory, offset, nbytes) {
    this.parts[this.partOf(memory)].fillZero(memory, offset, nbytes);
  }

  /** @param {{memory: any, offset: number, nbytes: number}} view */
  readBack(view) {
    return this.parts[this.partOf(view.memory)].readBack(view);
  }

  /** @param {{memory: any, offset: number, nbytes: number}} source @param {{memory: any, offset: number, nbytes: number}} destination */
  async copy(source, destination) {
    const [from, to] = [this.partOf(source.memory), this.partOf(destination.memory)];
    if (from === to) return this.parts[from].copy(source, destination);
    const bytes = await this.parts[from].readBack(source);
    this.parts[to].upload(destination.memory, destination.offset, bytes.subarray(0, destination.nbytes));
  }

  /** Each part loads the kernels placed on it. @param {any[]} kernels @param {Map<string, ArrayBuffer>} modules */
  async loadKernels(kernels, modules) {
    /** @type {{part: number, name: string, handle: any}[]} */
    const handles = new Array(kernels.length);
    await Promise.all(this.parts.map(async (device, part) => {
      const mine = kernels.flatMap((kernel, index) => ((kernel.device ?? 0) === part ? [index] : []));
      const loaded = await device.loadKernels(mine.map((index) => kernels[index]), modules);
      mine.forEach((index, i) => { handles[index] = { part, name: kernels[index].name, handle: loaded[i] }; });
    }));
    return handles;
  }

  /** @param {{part: number, name: string, handle: any}} kernel @param {{memory: any, offset: number, nbytes: number}[]} views
   *  @param {object} site */
  bind(kernel, views, site) {
    views.forEach((view, i) => {
      if (!this.parts[kernel.part].owns(view.memory)) {
        throw new RuntimeCheckError(`kernel ${kernel.name} runs on ${this.names[kernel.part]}, and its binding ${i} is a tensor of another device`);
      }
    });
    return { part: kernel.part, bound: this.parts[kernel.part].bind(kernel.handle, views, site) };
  }

  /** @param {{part: number, bound: any}} bound @param {number[]} scalars @param {number[]} grid */
  launch(bound, scalars, grid) {
    this.parts[bound.part].launch(bound.bound, scalars, grid);
  }

  flush() {
    for (const part of this.parts) part.flush();
  }

  destroy() {
    for (const part of this.parts) part.destroy();
  }
}
