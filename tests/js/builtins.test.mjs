// The tessera.builtin.* functions on host arrays, as numpy computes them, and the registry's checks.
import assert from "node:assert/strict";
import { test } from "node:test";

import { BUILTINS, libraryRegistry } from "../../runtime-js/src/builtins.js";
import { describeValue, matchValue, ShapeValue } from "../../runtime-js/src/checks.js";
import { HostTensor } from "../../runtime-js/src/host.js";

const call = (name, ...args) => BUILTINS[`tessera.builtin.${name}`](...args);
const shaped = (array, shape) => Object.assign(array, { shape });

test("unique: NaNs are one value and sort last, -0 is 0, int64 and bool work", () => {
  const x = Float32Array.of(2, NaN, -0, 0, NaN, -1, 2);
  assert.equal(call("unique_size", x), 4);
  const out = new Float32Array(4);
  call("unique", x, out);
  assert.deepEqual([...out], [-1, 0, 2, NaN]);
  call("unique_unsorted", x, out);
  assert.deepEqual([...out], [2, NaN, 0, -1]);  // a Set keeps -0 as 0: equal values, one sign
  const big = BigInt64Array.of(5n, -3n, 5n);
  const bigOut = new BigInt64Array(2);
  call("unique", big, bigOut);
  assert.deepEqual([...bigOut], [-3n, 5n]);
  assert.throws(() => call("unique", x, new Float32Array(3)), /unique: the output holds 3 elements, the result 4/);
});

test("nonzero gives row-major indices per axis, as numpy; mask_select and arange_size", () => {
  const x = shaped(Float32Array.of(0, 1, 0, 0, NaN, 0, 2, 0), [2, 2, 2]);
  assert.equal(call("nonzero_size", x), 3);  // NaN is nonzero
  const out = new BigInt64Array(9);
  call("nonzero", x, out);
  assert.deepEqual([...out], [0n, 1n, 1n, 0n, 0n, 1n, 1n, 0n, 0n]);
  const mask = Uint8Array.of(1, 0, 1);
  assert.equal(call("mask_select_size", Int32Array.of(7, 8, 9), mask), 2);
  const rows = shaped(Float32Array.of(1, 2, 3, 4, 5, 6), [2, 3]);
  assert.equal(call("mask_select_size", rows, shaped(Uint8Array.of(1, 0, 1), [3])), 4);  // broadcast over rows
  const picked4 = new Float32Array(4);
  call("mask_select", rows, shaped(Uint8Array.of(1, 0, 1), [3]), picked4);
  assert.deepEqual([...picked4], [1, 3, 4, 6]);
  const steps = new BigInt64Array(3);
  call("arange", 1, 6, 2, steps);
  assert.deepEqual([...steps], [1n, 3n, 5n]);
  const picked = new Int32Array(2);
  call("mask_select", Int32Array.of(7, 8, 9), mask, picked);
  assert.deepEqual([...picked], [7, 9]);
  assert.equal(call("arange_size", 0, 10, 3), 4);
  assert.equal(call("arange_size", Float32Array.of(0.5), BigInt64Array.of(3n), 1), 3);
  assert.equal(call("arange_size", 3, 1, 1), 0);
  assert.throws(() => call("arange_size", 0, 1, 0), /the step is 0/);
});

test("the registry names a missing or bad library", () => {
  assert.throws(() => libraryRegistry({ libraries: ["my.lib"] }, {}), /the library function 'my.lib', which is not registered/);
  assert.throws(() => libraryRegistry({ libraries: [] }, { "my.lib": 3 }), /the library 'my.lib' is not a function/);
  assert.ok(libraryRegistry({ libraries: ["my.lib", "tessera.builtin.unique"] }, { "my.lib": () => 0 }).has("my.lib"));
});

test("a mismatch prints both sides in the text format", () => {
  const op = (sinfo, text) => ({ sinfo, text, what: "argument 'y' of helper" });
  const heap = { m: 3 };
  const y = new HostTensor(new Float32Array(15), [3, 5]);
  assert.throws(() => matchValue(op({ kind: "tensor", dtype: "float32", ndim: 2, shape: ["m", "4"] },
    'R.Tensor((m, 4), dtype="float32")'), y, heap),
  { message: 'argument \'y\' of helper: expected R.Tensor((m, 4), dtype="float32"), got shape (3, 5): dimension 1 is 5, not 4' });
  assert.throws(() => matchValue(op({ kind: "tensor", dtype: "float32", ndim: 2, shape: ["m * 2", "5"] }), y, heap),
    /expected R\.Tensor\(\(m \* 2, 5\), dtype="float32"\), got shape \(3, 5\): dimension 0 is 3, not m \* 2 = 6/);
  assert.throws(() => matchValue(op({ kind: "prim", dtype: "int64", value: "m" }), 4, heap), /expected R\.Prim\(value=m\), got shape \(4,\): dimension 0 is 4, not m = 3/);
  assert.throws(() => matchValue(op({ kind: "shape", ndim: 1, values: null }), new ShapeValue([1, 2]), heap), /got a shape of rank 2/);
  matchValue(op({ kind: "tensor", dtype: "", ndim: -1, shape: null }), y, heap);  // R.Tensor: anything tensor
  const fresh = {};
  matchValue(op({ kind: "tuple", fields: [{ kind: "tensor", dtype: "float32", ndim: 2, shape: ["a", "b"] }, { kind: "object" }] }), [y, 1], fresh);
  assert.deepEqual(fresh, { a: 3, b: 5 });
  assert.equal(describeValue([new HostTensor(Int32Array.of(1), [1]), 2]), 'R.Tuple(R.Tensor((1,), dtype="int32"), R.Prim(value=2))');
});
