// The interpreter's machine (interpreter.js, Machine) over the VM's device: run-time tensors in pooled
// device buffers, a pool per part of a split build, and the results a function leaves on the device.

import { TensorValue } from "./interpreter.js";
import { BlockPool } from "./pool.js";
import { ResultInPlace, RuntimeCheckError } from "./program.js";

/** A function's result left on the device (see ResultInPlace): a view of device memory. */
export class DeviceTensor extends ResultInPlace {
  /** @param {{name: string, generation: number}} fn @param {number} generation @param {any} memory @param {number} offset
   *  @param {number} nbytes @param {number[]} shape @param {string} dtype */
  constructor(fn, generation, memory, offset, nbytes, shape, dtype) {
    super(fn, generation, nbytes, shape, dtype);
    this.memory = memory;
    this.offset = offset;
  }
}

/** A `to_device` copies a tensor into one of the same bytes (as the Python VM's storage.check_copy).
 * @param {number} from @param {number} into @param {string} fn */
export function checkCopy(from, into, fn) {
  if (from !== into) throw new RuntimeCheckError(`${fn}: to_device copies ${from} bytes into a tensor of ${into}`);
}

export class DeviceMachine {
  /** @param {import("./vm.js").VirtualMachine} vm */
  constructor(vm) {
    this.vm = vm;
    const device = vm.device;
    const parts = device.parts?.length ?? 1;
    this.pools = Array.from({ length: parts }, (_, part) => new BlockPool((size) => ({ ...device.allocate(size, part), size })));
    const pools = this.pools;
    this.pool = {
      alloc: (/** @type {number} */ nbytes, part = 0) => pools[part].alloc(nbytes),
      release: (/** @type {any} */ block) => pools[device.partOf(block.memory)].release(block),
      get created() { return pools.reduce((sum, p) => sum + p.created, 0); },  // blocks made so far (for tests)
      get live() { return pools.reduce((sum, p) => sum + p.live, 0); },  // blocks handed out and not given back
    };
  }

  /** @param {string} name @param {number} [part] */
  constant(name, part = 0) {
    return this.vm.constant(name, part);
  }

  /** @param {string} name @param {number} nbytes @param {number} [part] */
  state(name, nbytes, part = 0) {
    return this.vm.stateBuffer(name, nbytes, part);
  }

  /** @param {string} fn @param {number} buffer */
  arena(fn, buffer) {
    return /** @type {{memory: any, offset: number}[]} */ (this.vm.arenas.get(fn))[buffer];
  }

  /** @param {TensorValue} tensor @param {Uint8Array} bytes */
  write(tensor, bytes) {
    this.vm.device.upload(tensor.memory, tensor.offset, bytes);
  }

  /** @param {TensorValue} tensor */
  read(tensor) {
    return this.vm.device.readBack(tensor);
  }

  /** @param {any} op @param {TensorValue[]} tensors @param {number[]} scalars @param {number[]} grid */
  launch(op, tensors, scalars, grid) {
    const { device, kernels } = this.vm;
    device.launch(device.bind(kernels[op.kernel], tensors, op), scalars, grid);
  }

  /** `to_device`: the source's bytes, once what came before has run, into the destination.
   * @param {TensorValue} source @param {TensorValue} destination */
  async copy(source, destination) {
    checkCopy(source.nbytes, destination.nbytes, "the program");
    await this.vm.device.copy(source, destination);
    this.vm.copies += 1;
  }

  flush() {
    this.vm.device.flush();
  }

  /** @param {any} value */
  inPlace(value) {
    if (!(value instanceof DeviceTensor)) return null;
    value.checkCurrent();
    return new TensorValue(value.memory, value.offset, value.nbytes, value.shape, value.dtype, null);
  }

  /** @param {{name: string, generation: number}} fn @param {number} generation @param {TensorValue} t */
  leaveInPlace(fn, generation, t) {
    return new DeviceTensor(fn, generation, t.memory, t.offset, t.nbytes, t.shape, t.dtype);
  }
}
