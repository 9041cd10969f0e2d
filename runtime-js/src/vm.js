// The WebGPU virtual machine: runs the functions of an executable (docs/format.md) on a GPUDevice.
//
// A function that is one straight line of launches over a static memory plan (the LLM's prefill,
// decode and sample) is prepared once, when the VM is made: the arena buffers of its plan, a
// buffer per parameter sized at its upper bounds, a uniform buffer and a bind group per launch
// and a readback buffer per result. A call then writes its arguments and sizes, records the
// launches in one compute pass and, unless asked to leave them on the device, reads the results
// back: it creates nothing. Every other function runs in the frame interpreter (interpreter.js)
// over GpuMachine (webgpu-machine.js), with run-time tensors in pooled GPU buffers.

import { libraryRegistry } from "./builtins.js";
import { DeviceError } from "./device.js";
import { fromDeviceBytes, HostTensor, toDeviceBytes } from "./host.js";
import { InterpretedFunction, Interpreter } from "./interpreter.js";
import {
  assembleResult, bindArguments, expectOneDevice, FunctionTable, isStraightLine, launchSizes, resultRegisters, RuntimeCheckError, upperBounds,
} from "./program.js";
import { checkDeviceFit, webgpuFit } from "./plan-checks.js";
import { evalShape } from "./shape.js";
import { DeviceTensor, GpuMachine } from "./webgpu-machine.js";

export { DeviceTensor, HostTensor, RuntimeCheckError };

/* global GPUBufferUsage, GPUMapMode */

const align4 = (/** @type {number} */ n) => Math.ceil(n / 4) * 4;

export class VirtualMachine extends FunctionTable {
  /**
   * @param {GPUDevice} device
   * @param {any} exe the parsed executable.json
   * @param {Map<string, ArrayBufferView>} weights the constants by name (tensor-cache records)
   * @param {Map<string, ArrayBuffer>} modules the kernel module files by path (WGSL text)
   * @param {{libraries?: Record<string, Function>}} [options] host functions `call_builtin` may call, by name
   */
  static async create(device, exe, weights, modules, { libraries } = {}) {
    expectOneDevice(exe, "VirtualMachine");
    checkDeviceFit(exe, [webgpuFit(device.limits)], "executable.json", (message) => new DeviceError(message));
    const registry = libraryRegistry(exe, libraries);
    const vm = new VirtualMachine(device, exe);
    for (const name of exe.constants) {
      const data = weights.get(name);
      if (!data) throw new Error(`the weights have no tensor '${name}' that the executable uses`);
      vm.constants.set(name, vm.createWithData(data));
    }
    const decoder = new TextDecoder();
    vm.pipelines = await Promise.all(exe.kernels.map((/** @type {any} */ k) => {
      const module = modules.get(k.module);
      if (!module) throw new Error(`the kernel module ${k.module} of kernel ${k.name} was not loaded`);
      return vm.createPipeline(k, decoder.decode(module));
    }));
    for (const [name, record] of Object.entries(exe.functions)) {
      vm.arenas.set(name, record.memory.buffers.map((/** @type {number} */ size) => vm.createBuffer(size, vm.storageUsage)));
    }
    vm.machine = new GpuMachine(vm);
    vm.interpreter = new Interpreter(exe, vm.machine, vm.functions, registry);
    for (const [name, record] of Object.entries(exe.functions)) {
      vm.functions.set(name, isStraightLine(record) ? new VMFunction(vm, name, record) : new InterpretedFunction(vm.interpreter, name));
    }
    return vm;
  }

  /** @param {GPUDevice} device @param {any} exe */
  constructor(device, exe) {
    super();
    this.device = device;
    this.exe = exe;
    /** @type {Map<string, GPUBuffer>} */ this.constants = new Map();
    /** @type {Map<string, GPUBuffer>} */ this.state = new Map();
    /** @type {{pipeline: GPUComputePipeline, layout: GPUBindGroupLayout}[]} */ this.pipelines = [];
    /** @type {Map<string, GPUBuffer[]>} */ this.arenas = new Map();  // each function's static plan
    /** @type {GpuMachine} */ this.machine = null;
    /** @type {Interpreter} */ this.interpreter = null;
    this.storageUsage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
  }

  /** @param {number} size @param {number} usage */
  createBuffer(size, usage) {
    return this.device.createBuffer({ size: Math.max(align4(size), 4), usage });
  }

  /** @param {ArrayBufferView} data */
  createWithData(data) {
    const buffer = this.device.createBuffer({ size: Math.max(align4(data.byteLength), 4), usage: this.storageUsage,
      mappedAtCreation: true });
    new Uint8Array(buffer.getMappedRange()).set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    buffer.unmap();
    return buffer;
  }

  /** @param {any} kernel @param {string} code its WGSL */
  async createPipeline(kernel, code) {
    const module = this.device.createShaderModule({ code, label: kernel.name });
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
    const layout = this.device.createBindGroupLayout({ label: kernel.name, entries });
    const pipeline = await this.device.createComputePipelineAsync({
      label: kernel.name, layout: this.device.createPipelineLayout({ bindGroupLayouts: [layout] }),
      compute: { module, entryPoint: kernel.entry_point },
    });
    return { pipeline, layout };
  }

  /** State is shared by name across functions: prefill and decode write one KV cache.
   * @param {string} name @param {number} size */
  stateBuffer(name, size) {
    let buffer = this.state.get(name);
    if (!buffer) {
      buffer = this.createBuffer(size, this.storageUsage);
      this.state.set(name, buffer);
    }
    return buffer;
  }

  /** Zero every state tensor (a KV cache, for a new conversation). */
  resetState() {
    for (const buffer of this.state.values()) this.device.queue.writeBuffer(buffer, 0, new Uint8Array(buffer.size));
  }
}

/** A straight-line function, prepared at load (the fast path). A split build's VM (split-vm.js) runs its
 * steps one by one: writeInputs, encodeLaunches (in parts, between copies), resultTensors. */
export class VMFunction {
  /** @param {VirtualMachine} vm @param {string} name @param {any} record */
  constructor(vm, name, record) {
    this.vm = vm;
    this.name = name;
    this.record = record;
    this.generation = 0;
    this.held = [];
    this.bounds = upperBounds(record);
    const device = vm.device;
    this.params = new Map();
    for (const param of record.params) {
      const tensor = record.tensors[String(param.register)];
      if (!tensor) continue;
      const bytes = evalShape(tensor.bytes, this.bounds);
      this.params.set(param.register, param.state ? vm.stateBuffer(param.name, bytes) : vm.createBuffer(bytes, vm.storageUsage));
    }
    this.arena = vm.arenas.get(name);
    this.tokens = new Map(record.memory.storages.map((/** @type {any} */ s) => [s.index, s]));
    this.results = resultRegisters(record);
    this.readback = new Map(this.results.map((reg) => [reg, vm.createBuffer(
      evalShape(record.tensors[String(reg)].bytes, this.bounds), GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST)]));
    /** @type {{index: number, op: any, kernel: any, uniform: GPUBuffer|null, group: GPUBindGroup}[]} */
    this.launches = [];
    record.code.forEach((/** @type {any} */ op, /** @type {number} */ index) => {
      if (op.op !== "launch") return;
      const kernel = vm.exe.kernels[op.kernel];
      const uniform = kernel.abi.scalars.length ?
        vm.createBuffer(16 * Math.ceil(kernel.abi.scalars.length / 4), GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST) : null;
      const entries = [...op.args, ...op.outs].map((/** @type {number} */ reg, /** @type {number} */ binding) => {
        const { buffer, offset, size } = this.location(reg);
        return { binding, resource: { buffer, offset, size } };
      });
      if (uniform) entries.push({ binding: entries.length, resource: { buffer: uniform, offset: 0, size: uniform.size } });
      const group = device.createBindGroup({ label: kernel.name, layout: vm.pipelines[op.kernel].layout, entries });
      this.launches.push({ index, op, kernel, uniform, group });
    });
  }

  /** (buffer, offset, bytes at the upper bounds) of a tensor register. @param {number} reg */
  location(reg) {
    const loc = this.record.locations[String(reg)];
    const tensor = this.record.tensors[String(reg)];
    if (loc.kind === "param") return { buffer: this.params.get(reg), offset: 0, size: align4(evalShape(tensor.bytes, this.bounds)) };
    if (loc.kind === "constant") {
      const buffer = this.vm.constants.get(loc.name);
      return { buffer, offset: 0, size: buffer.size };
    }
    const token = this.tokens.get(loc.token);
    return { buffer: this.arena[token.buffer], offset: token.offset, size: align4(evalShape(tensor.bytes, this.bounds)) };
  }

  /** @param {any[]} args @param {boolean} toHost */
  async call(args, toHost) {
    const { inputs, values, heap } = bindArguments(this.name, this.record, args, this.bounds);
    const encoder = this.vm.device.createCommandEncoder();
    this.writeInputs(encoder, inputs, values);
    this.generation += 1;  // from here, results of the last call left in place are stale (one may have been an argument)
    this.encodeLaunches(encoder, heap);
    return assembleResult(this.record, await this.resultTensors(encoder, heap, toHost));
  }

  /** Write the arguments into the parameter buffers: host values through the queue, results left in
   * place by copies recorded in ``encoder``. Parameters this function has no buffer for are skipped.
   * @param {GPUCommandEncoder} encoder @param {any[]} inputs the parameter records @param {Map<number, any>} values by register */
  writeInputs(encoder, inputs, values) {
    const device = this.vm.device;
    for (const param of inputs) {
      const buffer = this.params.get(param.register);
      const value = values.get(param.register);
      if (!buffer) continue;
      if (value instanceof DeviceTensor) {
        value.checkCurrent();
        encoder.copyBufferToBuffer(value.buffer, value.offset, buffer, 0, value.nbytes);
      } else {
        // Most dtypes are laid out on the device as on the host: written as they are, without a copy.
        const direct = value.dtype !== "bool" && value.data.byteLength % 4 === 0;
        device.queue.writeBuffer(buffer, 0, direct ? value.data : toDeviceBytes(value.data, value.dtype));
      }
    }
  }

  /** Record launches ``from`` to ``to`` (of this function's, in program order) in one compute pass of
   * ``encoder``, with this call's sizes. @param {GPUCommandEncoder} encoder @param {Record<string, number>} heap
   * @param {number} [from] @param {number} [to] */
  encodeLaunches(encoder, heap, from = 0, to = this.launches.length) {
    const device = this.vm.device;
    const pass = encoder.beginComputePass();
    for (const { op, kernel, uniform, group } of this.launches.slice(from, to)) {
      const { scalars, grid } = launchSizes(op, kernel, heap);
      if (uniform) {
        const words = new Int32Array(uniform.size / 4);
        words.set(scalars);
        device.queue.writeBuffer(uniform, 0, words);
      }
      if (Math.min(...grid) > 0) {
        pass.setPipeline(this.vm.pipelines[op.kernel].pipeline);
        pass.setBindGroup(0, group);
        pass.dispatchWorkgroups(grid[0], grid[1], grid[2]);
      }
    }
    pass.end();
  }

  /** Submit ``encoder`` and give the result tensors by register: read back, or left in place as results
   * of ``owner`` (this function, or the split function it is a share of).
   * @param {GPUCommandEncoder} encoder @param {Record<string, number>} heap @param {boolean} toHost
   * @param {{name: string, generation: number}} [owner] @returns {Promise<Map<number, any>>} */
  async resultTensors(encoder, heap, toHost, owner = this) {
    const { vm, record } = this;
    const device = vm.device;
    /** @type {Map<number, any>} */
    const results = new Map();
    const shapes = new Map(this.results.map((reg) => [reg, record.tensors[String(reg)].shape.map((/** @type {string} */ d) => evalShape(d, heap))]));
    const sizes = new Map(this.results.map((reg) => [reg, align4(evalShape(record.tensors[String(reg)].bytes, heap))]));
    if (!toHost) {
      device.queue.submit([encoder.finish()]);
      for (const reg of this.results) {
        const { buffer, offset } = this.location(reg);
        results.set(reg, new DeviceTensor(owner, owner.generation, buffer, offset, sizes.get(reg), shapes.get(reg), record.tensors[String(reg)].dtype));
      }
      return results;
    }
    for (const reg of this.results) {
      const { buffer, offset } = this.location(reg);
      encoder.copyBufferToBuffer(buffer, offset, this.readback.get(reg), 0, sizes.get(reg));
    }
    device.queue.submit([encoder.finish()]);
    for (const reg of this.results) {
      const readback = this.readback.get(reg);
      await readback.mapAsync(GPUMapMode.READ, 0, sizes.get(reg));
      const raw = new Uint8Array(readback.getMappedRange(0, sizes.get(reg)));
      results.set(reg, fromDeviceBytes(raw, shapes.get(reg), record.tensors[String(reg)].dtype));
      readback.unmap();
    }
    return results;
  }
}
