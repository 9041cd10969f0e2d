// A function planned at load (the VM's fast path, vm.js): one straight line of launches, and of copies
// between the devices of a split build, over a static memory plan (the LLM's prefill, decode and
// samplers). Its parameters get buffers at their upper bounds and every launch is bound to its tensors
// once; a call writes its arguments, launches and copies in program order with this call's sizes, and
// reads the results back or leaves them on the device. It creates nothing.

import { fromDeviceBytes, isWidened, toDeviceBytes } from "./host.js";
import { checkCopy, DeviceTensor } from "./machine.js";
import { assembleResult, bindArguments, isStraightLine, launchSizes, resultRegisters, upperBounds } from "./program.js";
import { evalShape } from "./shape.js";

const align4 = (/** @type {number} */ n) => Math.ceil(n / 4) * 4;

/** The device of a tensor or parameter record of a split build (0 for one device). @param {any} record */
export const partOf = (record) => record?.device ?? 0;

/** The device bytes of a host argument: most dtypes are laid out on a device as on the host, written as they
 * are; bool, int8, uint8, int16 and uint16 are widened to a word each. @param {import("./host.js").HostTensor} value */
function hostBytes(value) {
  const { data, dtype } = value;
  return !isWidened(dtype) && data.byteLength % 4 === 0 ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
    : toDeviceBytes(data, dtype);
}

/** Whether a function is planned at load: a straight line (program.js) once its copies between
 * devices are set aside, each copy between tensors with a place. @param {any} record */
export function isPlanned(record) {
  const known = (/** @type {number} */ reg) => record.tensors[String(reg)] !== undefined && record.locations[String(reg)] !== undefined;
  const copies = record.code.filter((/** @type {any} */ op) => op.op === "to_device");
  return copies.every((/** @type {any} */ op) => known(op.src) && known(op.dst)) &&
    isStraightLine({ ...record, code: record.code.filter((/** @type {any} */ op) => op.op !== "to_device") });
}

/** A step of a planned function: a launch bound at load, or a copy between two tensors' places.
 * @typedef {{op: any, kernel: any, bound: any} | {copy: any}} Step */

/** A function planned at load: its parameters' buffers, its launches bound to their tensors, and its
 * copies between devices, run in program order. */
export class PlannedFunction {
  /** @param {import("./vm.js").VirtualMachine} vm @param {string} name @param {any} record */
  constructor(vm, name, record) {
    this.vm = vm;
    this.name = name;
    this.record = record;
    this.generation = 0;  // calls so far: a result left in place by an earlier one is stale
    this.bounds = upperBounds(record);
    const device = vm.device;
    /** @type {Map<number, {memory: any, offset: number}>} */
    this.params = new Map();
    for (const param of record.params) {
      const tensor = record.tensors[String(param.register)];
      if (!tensor) continue;
      const nbytes = evalShape(tensor.bytes, this.bounds);
      this.params.set(param.register, param.state ? vm.stateBuffer(param.name, nbytes, partOf(tensor)) : device.allocate(nbytes, partOf(tensor)));
    }
    this.tokens = new Map(record.memory.storages.map((/** @type {any} */ s) => [s.index, s]));
    this.results = resultRegisters(record);
    /** @type {Step[]} */
    this.steps = [];
    for (const op of record.code) {
      if (op.op === "launch") {
        const views = [...op.args, ...op.outs].map((/** @type {number} */ reg) => this.view(reg, this.bounds));
        this.steps.push({ op, kernel: vm.exe.kernels[op.kernel], bound: device.bind(vm.kernels[op.kernel], views, op) });
      } else if (op.op === "to_device") {
        this.steps.push({ copy: op });
      }
    }
  }

  /** The place of tensor register ``reg`` and its bytes at the sizes of ``heap``.
   * @param {number} reg @param {Record<string, number>} heap */
  view(reg, heap) {
    const loc = this.record.locations[String(reg)];
    const tensor = this.record.tensors[String(reg)];
    const nbytes = align4(evalShape(tensor.bytes, heap));
    if (loc.kind === "param") return { .../** @type {any} */ (this.params.get(reg)), nbytes };
    if (loc.kind === "constant") return { ...this.vm.constant(loc.name, partOf(tensor)), nbytes };
    const token = this.tokens.get(loc.token);
    const base = /** @type {{memory: any, offset: number}[]} */ (this.vm.arenas.get(this.name))[token.buffer];
    return { memory: base.memory, offset: base.offset + token.offset, nbytes };
  }

  /** @param {any[]} args @param {boolean} toHost */
  async call(args, toHost) {
    const { vm, record } = this;
    const device = vm.device;
    const { inputs, values, heap } = bindArguments(this.name, record, args, this.bounds);
    for (const param of inputs) {
      const place = this.params.get(param.register);
      const value = values.get(param.register);
      if (!place) continue;
      if (value instanceof DeviceTensor) {
        value.checkCurrent();
        await device.copy(value, { ...place, nbytes: value.nbytes });
      } else {
        device.upload(place.memory, place.offset, hostBytes(value));
      }
    }
    this.generation += 1;  // from here, results of the last call left in place are stale (one may have been an argument)
    for (const step of this.steps) {
      if ("copy" in step) {
        const [source, destination] = [step.copy.src, step.copy.dst].map((reg) => this.view(reg, heap));
        checkCopy(source.nbytes, destination.nbytes, this.name);
        vm.copies += 1;
        if (source.nbytes) await device.copy(source, destination);
        continue;
      }
      const { scalars, grid } = launchSizes(step.op, step.kernel, heap);
      if (Math.min(...grid) > 0) device.launch(step.bound, scalars, grid);
    }
    /** @type {Map<number, any>} */
    const results = new Map();
    for (const reg of this.results) {
      const tensor = record.tensors[String(reg)];
      const shape = tensor.shape.map((/** @type {string} */ d) => evalShape(d, heap));
      const view = this.view(reg, heap);
      results.set(reg, toHost ? fromDeviceBytes(await device.readBack(view), shape, tensor.dtype)
        : new DeviceTensor(this, this.generation, view.memory, view.offset, view.nbytes, shape, tensor.dtype));
    }
    device.flush();
    return assembleResult(record, results);
  }
}
