"""The rules of targets whose workgroup threads run one after another (C kernels: the native cpu
and wasm), on both of their runners, against numpy: decode attention's small-M matmuls.

Sizes are odd on purpose: M = 3 (decode's query heads per KV head), N not a multiple of the
lanes, symbolic K and N."""

import numpy as np
import pytest
from harness import build, check_op
from tessera import op
from tessera.ir import Constant, Function, Tensor, interpret
from tessera.target import Target
from tessera.transform import fuse_ops, fuse_tir, legalize_ops
from tessera.vm.cpu_runner import CPUKernelRunner
from tessera.vm.wasm_runner import WasmKernelRunner

F32 = "float32"
SIZES = (1, 17, 130)


@pytest.fixture(scope="module", params=["cpu", "wasm"])
def serial(request):
    """(runner, target) for each serial-threads kind."""
    runner = CPUKernelRunner() if request.param == "cpu" else WasmKernelRunner()
    return runner, Target.preset(request.param)


def rules(kernels):
    return [k.attrs["rule"] for k in kernels]


@pytest.mark.parametrize("shapes", [
    ((3, 3, 64), (3, 64, "n")),     # q . K^T: N = the symbolic context length
    ((3, 3, "n"), (3, "n", 64)),    # probs . V: K = the context length
    ((5, 8, 7), (1, 7, "n")),       # M = 8 (8 lanes), a broadcast B
    ((2, 1, "n"), ("n", 6)),        # M = 1: decode's GEMV, N below the lanes
], ids=["qk", "pv", "m8-broadcast", "gemv"])
def test_small_m_matmul_lanes(serial, shapes):
    runner, target = serial
    _, kernels = check_op(runner, op.matmul, [Tensor(s, F32) for s in shapes], rtol=1e-4, atol=1e-4, sizes=SIZES,
                          target=target)
    assert rules(kernels) == ["gemv" if shapes[0][-2] == 1 else "matmul-lanes"]


def test_small_m_matmul_lanes_epilogue_and_ints(serial):
    """A fused epilogue (decode's 1/sqrt(d) scale) sees each row's own accumulator; int32 too."""
    runner, target = serial
    mod = build(lambda q, k: op.multiply(op.matmul(q, k), Constant(np.float32(0.125))),
                [Tensor((3, 3, 64), F32), Tensor((3, 64, 37), F32)])
    fused = legalize_ops(fuse_tir(fuse_ops(mod, target), target), target)
    kernels = [f for f in fused.functions.values() if not isinstance(f, Function)]
    assert rules(kernels) == ["matmul-lanes"]
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((3, 3, 64)).astype(np.float32), rng.standard_normal((3, 64, 37)).astype(np.float32)
    np.testing.assert_allclose(interpret(fused, "main", q, k, kernel_runner=runner), (q @ k) * 0.125,
                               rtol=1e-4, atol=1e-4)
    check_op(runner, op.matmul, [Tensor((3, "n"), "int32"), Tensor(("n", 19), "int32")], sizes=SIZES, target=target)


@pytest.mark.parametrize("make,shapes,rule", [
    # Decode's K^T: the KV cache's (n, heads, 64) slice as (heads, 64, n); rows longer than a chunk.
    (lambda x: op.permute_dims(x, axes=[1, 2, 0]), [("n", 3, 64)], "injective-rows"),
    (lambda x, y: op.add(op.exp(x), y), [("n",), (1,)], "injective-rows"),   # one row, split in chunks
    (lambda x: op.sum(x, axis=[1]), [(3, "n")], "injective-rows"),          # a long reduction, serially
    (lambda x: op.nn.softmax(x, axis=-1), [(9, "n")], "serial-rows"),       # decode's attention softmax
    (lambda x: op.argmax(x, axis=1), [(4, "n")], "serial-rows"),
], ids=["kv-transpose", "chunked-row", "sum", "softmax", "argmax"])
def test_rows_one_thread_each(serial, make, shapes, rule):
    """A thread writes (up to 256 elements of) a row of the last axis, or walks a whole row of a
    row operator: no per-element index division, no workgroup tree."""
    runner, target = serial
    params = [Tensor(s, F32) for s in shapes]
    _, kernels = check_op(runner, make, params, rtol=1e-4, atol=1e-4, sizes=(1, 255, 300), target=target)
    assert set(rules(kernels)) == {rule}
