// What runtime-js's interpreter must do with the programs of tests/fixtures/js_programs.py: calls,
// recursion, branches on prims and on tensors of each dtype, tuples, coarse parameters, pooled
// allocation, builtins and user libraries, and the error at each boundary. Shared by the WASM VM
// in Node (interpreter.test.mjs) and the WebGPU VM in Chromium (tests/browser/interpreter.test.mjs):
// no node: imports, the runtime by a relative URL.
import { HostTensor } from "../../runtime-js/src/tessera.js";

/** The user libraries the programs call. */
export const TEST_LIBRARIES = {
  "tessera.test.double": (x, out) => { for (let i = 0; i < x.length; i++) out[i] = 2 * x[i]; },
  "tessera.test.iota": (n) => Float32Array.from({ length: n }, (_, i) => i),
};

const f32 = (values, shape = [values.length]) => new HostTensor(Float32Array.from(values), shape);

function same(got, want, what) {
  const text = (v) => JSON.stringify(v, (_, x) => (typeof x === "bigint" ? `${x}n` : ArrayBuffer.isView(x) ? Array.from(x) : x));
  if (text(got) !== text(want)) throw new Error(`${what}: got ${text(got)}, expected ${text(want)}`);
}

/** @param {() => Promise<any>} run @param {RegExp} pattern */
async function rejects(run, pattern, what) {
  try {
    await run();
  } catch (error) {
    if (!pattern.test(error.message)) throw new Error(`${what}: the error "${error.message}" does not match ${pattern}`);
    return;
  }
  throw new Error(`${what}: no error, expected one matching ${pattern}`);
}

const tensor = (t) => ({ shape: t.shape, dtype: t.dtype, data: t.data });

/** Each check: (vm) => Promise<void>, throwing on a failure; the VM of its program's folder. */
export const CHECKS = {
  async branch(vm) {
    same(tensor(await vm.run("main", f32([1, 2, 3]), 1)), tensor(f32([2, 4, 6])), "flag 1: x + x");
    same(tensor(await vm.run("main", f32([1, 2, 3]), 0)), tensor(f32([1, 4, 9])), "flag 0: x * x");
    const created = vm.machine.pool.created;
    await vm.run("main", f32([1, 2, 3]), 1);
    same(vm.machine.pool.created, created, "blocks created by a repeated call (the pool reuses them)");
    same(vm.machine.pool.live, 0, "blocks still out after calls read back to the host");
    // A result left in place is passed on, then goes stale when its function runs again.
    const kept = await vm.runOnDevice("main", f32([1, 2, 3]), 1);
    same(tensor(await vm.run("main", kept, 0)), tensor(f32([4, 16, 36])), "a result in place as an argument");
    await rejects(() => vm.run("main", kept, 0), /this result of main was overwritten by a later call of main/, "a stale result");
    await rejects(() => vm.run("main", f32([1])), /main takes 2 arguments \(x, flag\), got 1/, "too few arguments");
  },

  async recursion(vm) {
    const x = [1, -2, 0.5];
    same(tensor(await vm.run("repeat", f32(x), 3)), tensor(f32(x.map((v) => v * 8))), "repeat(x, 3)");
    same(tensor(await vm.run("repeat", f32(x), 0)), tensor(f32(x)), "repeat(x, 0) returns its argument");
    const created = vm.machine.pool.created;
    same(tensor(await vm.run("repeat", f32(x), 3)), tensor(f32(x.map((v) => v * 8))), "repeat(x, 3) again");
    same(vm.machine.pool.created, created, "blocks created by a repeated recursion");
    same(tensor(await vm.run("repeat", f32([1]), 40)), tensor(f32([2 ** 40])), "forty levels deep");
  },

  async "func-value"(vm) {
    same(tensor(await vm.run("main", f32([1, 2]), f32([3, 4]))), tensor(f32([4, 6])), "helper(x, y) through a register");
    await rejects(() => vm.run("main", f32([1, 2, 3]), f32([1, 2])),
      /^argument 'b' of helper: expected R\.Tensor\(\(m,\), dtype="float32"\), got shape \(2,\): dimension 0 is 2, not m = 3$/,
      "an inner call's argument");
  },

  async tuple(vm) {
    const [squares, product] = await vm.run("main", [f32([1, 2, 3]), 4]);
    same([tensor(squares), product], [tensor(f32([1, 4, 9])), 12], "a tuple in, a tuple out");
    await rejects(() => vm.run("main", [new HostTensor(Int32Array.of(1, 2, 3), [3]), 4]),
      /match_cast of a: expected R\.Tensor\(\(n,\), dtype="float32"\), got dtype int32/,
      "a coarse field cast");
    await rejects(() => vm.run("main", f32([1, 2])),
      /argument 't' of main: expected R\.Tuple\(R\.Tensor\(ndim=1\), R\.Object\), got a tensor/,
      "a tensor for a tuple");
    await rejects(() => vm.run("main", [f32([1, 2, 3, 4], [2, 2]), 1]), /argument 't' of main: .*, field 0: got rank 2 \(shape \(2, 2\)\)/,
      "a tuple field of the wrong rank");
  },

  async storage(vm) {
    same(tensor(await vm.run("main", f32([1, 2]))), tensor(f32([2, 4])), "a tensor in a pooled storage");
    same(tensor(await vm.run("main", f32([1, 2, 3, 4, 5]))), tensor(f32([2, 4, 6, 8, 10])), "a larger one");
  },

  async unique(vm) {
    same(tensor(await vm.run("main", f32([3, 1, 3, 2, 1]))), tensor(f32([1, 2, 3])), "unique, sorted");
  },

  async "unique-unsorted"(vm) {
    same(tensor(await vm.run("main", f32([3, 1, 3, 2, 1]))), tensor(f32([3, 1, 2])), "unique, in order of appearance");
  },

  async nonzero(vm) {
    const got = await vm.run("main", f32([0, 1, 0, 2, 0, 3], [2, 3]));
    same(tensor(got), { shape: [2, 3], dtype: "int64", data: BigInt64Array.of(0n, 1n, 1n, 1n, 0n, 2n) }, "nonzero's indices");
  },

  async "mask-select"(vm) {
    const got = await vm.run("main", f32([1, 2, 3, 4]), new HostTensor(Uint8Array.of(1, 0, 1, 1), [4]));
    same(tensor(got), tensor(f32([1, 3, 4])), "mask_select");
    same(tensor(await vm.run("main", f32([1, 2]), new HostTensor(Uint8Array.of(0, 0), [2]))), tensor(f32([])), "nothing selected");
  },

  async "arange-size"(vm) {
    same([await vm.run("main", 0, 10, 3), await vm.run("main", 5, 0, 1), await vm.run("main", 10, 0, -3)], [4, 0, 4], "arange sizes");
  },

  async library(vm) {
    same(tensor(await vm.run("main", f32([1, 2, 3]))), tensor(f32([2, 5, 8])), "2 x + iota(n)");
  },
};

for (const dtype of ["bool", "float32", "int32", "int64"]) {
  CHECKS[`tensor-cond-${dtype}`] = async (vm) => {
    same(tensor(await vm.run("main", f32([1, 2, 3]))), tensor(f32([2, 4, 6])), `a true ${dtype} condition`);
    same(tensor(await vm.run("main", f32([0.25, -0.25]))), tensor(f32([0.0625, 0.0625])), `a false ${dtype} condition`);
  };
}
