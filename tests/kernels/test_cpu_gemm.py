"""The C targets' GEMM rule (tir/schedule/cpu_gemm.py: packed panels and the f32 micro-kernels of
codegen/c/microkernels_gemm.c) on both C runners, native cpu and wasm, against numpy.

Sizes are ragged on purpose: rows not a multiple of a micro-kernel's tile (6 or 4) nor of a
workgroup's 128 (1, 7, 133, 300), columns not a multiple of a strip (16) nor of a workgroup's 32,
K past one 256-value panel and not a multiple of it, K symbolic; batches with broadcasting; every
GGUF block format, through its C packer or the tir one; fused epilogues. Which rule each kernel
got is checked too: GEMVs and decode's few rows stay with their own rules."""

import numpy as np
import pytest
from harness import build, check_op
from tessera import op
from tessera.ir import Constant, Function, Tensor, interpret
from tessera.target import Target
from tessera.tir.schedule import cpu_gemm
from tessera.transform import fuse_ops, fuse_tir, legalize_ops
from tessera.vm.cpu_runner import CPUKernelRunner
from tessera.vm.wasm_runner import WasmKernelRunner
from test_quantized_kernels import quantized

F32 = "float32"
SIZES = (1, 7, 133, 300)
FORMATS = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k")


@pytest.fixture(scope="module", params=["cpu", "wasm"])
def c_target(request):
    """(runner, target) for each C kind."""
    runner = CPUKernelRunner() if request.param == "cpu" else WasmKernelRunner()
    return runner, Target.preset(request.param)


def rules(kernels):
    return [k.attrs["rule"] for k in kernels]


def kernels_of(mod):
    return [f for f in mod.functions.values() if not isinstance(f, Function)]


@pytest.mark.parametrize("shapes", [
    (("m", 300), (300, "n")),          # two panels of k (256 + 44), M and N swept
    (("m", 40), (40, 45)),             # one short panel; 45 columns: a whole workgroup and a ragged one
    ((2, "m", 70), (70, 37)),          # a batch sharing B
    ((3, 9, "n"), (1, "n", 20)),       # K symbolic, B broadcast over the batch (probabilities x values)
    ((2, 1, "m", 33), (3, 33, 17)),    # batch dims broadcast against each other
], ids=["two-panels", "ragged-columns", "batch", "symbolic-k", "broadcast"])
def test_f32_matmuls_take_the_micro_kernels(c_target, shapes):
    runner, target = c_target
    _, kernels = check_op(runner, op.matmul, [Tensor(s, F32) for s in shapes], rtol=1e-4, atol=1e-4, sizes=SIZES,
                          target=target)
    assert rules(kernels) == ["cpu-gemm"]


def test_gemvs_and_few_rows_keep_their_rules(c_target):
    runner, target = c_target
    _, kernels = check_op(runner, op.matmul, [Tensor((1, 96), F32), Tensor((96, "n"), F32)], rtol=1e-4, atol=1e-4,
                          sizes=(7, 40), target=target)
    assert rules(kernels) == ["gemv"]
    _, kernels = check_op(runner, op.matmul, [Tensor((3, 3, 64), F32), Tensor((3, 64, "n"), F32)], rtol=1e-4,
                          atol=1e-4, sizes=(7, 40), target=target)
    assert rules(kernels) == ["matmul-lanes"]
    words, _ = quantized("q4_1", 42, 128)
    _, kernels = check_op(runner, lambda x, w: op.quantized_matmul(x, w, format="q4_1", k=128),
                          [Tensor((1, 128), F32), Tensor((42, words.shape[1]), "uint32")], rtol=1e-4, atol=1e-4,
                          target=target, inputs=lambda env, rng: [rng.standard_normal((1, 128)).astype(np.float32),
                                                                  words])
    assert "cpu-gemm" not in rules(kernels)


def test_epilogues_apply_to_each_output(c_target):
    """Bias, GELU and a residual add fused into an f32 GEMM (a BERT feed-forward's first layer plus a
    skip), each output read back from the micro-kernel's tile with its own row and column."""
    runner, target = c_target
    rng = np.random.default_rng(0)
    m, k, n = 131, 300, 45
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    bias, skip = rng.standard_normal(n).astype(np.float32), rng.standard_normal((m, n)).astype(np.float32)
    mod = build(lambda a, b, c, d: op.add(op.nn.gelu(op.add(op.matmul(a, b), c)), d),
                [Tensor((m, k), F32), Tensor((k, n), F32), Tensor((n,), F32), Tensor((m, n), F32)])
    fused = legalize_ops(fuse_tir(fuse_ops(mod, target), target), target)
    assert "cpu-gemm" in rules(kernels_of(fused))
    got = interpret(fused, "main", x, w, bias, skip, kernel_runner=runner)
    np.testing.assert_allclose(got, interpret(mod, "main", x, w, bias, skip), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_prefill_over_dequantized_panels(c_target, fmt):
    """x (M rows, f32) times GGUF weights, M swept; 45 outputs; K of two panels (512 values: two
    K-quant super-blocks, sixteen 32-value blocks). Against ggml's own floats: the panels hold them
    exactly, so only the order of the f32 sums differs."""
    runner, target = c_target
    n, k = 45, 512
    words, reference = quantized(fmt, n, k, seed=4)
    _, kernels = check_op(runner, lambda x, w: op.quantized_matmul(x, w, format=fmt, k=k),
                          [Tensor(("m", k), F32), Tensor((n, words.shape[1]), "uint32")], rtol=1e-4, atol=1e-4,
                          sizes=(2, 7, 133), target=target,
                          inputs=lambda env, rng: [rng.standard_normal((env["m"], k)).astype(np.float32), words])
    assert rules(kernels) == ["cpu-gemm"]
    source = kernels[0]
    calls = {e.name for e in _externs(source)}
    assert (cpu_gemm.PACK_QUANTIZED.get(fmt) in calls) == (fmt in cpu_gemm.PACK_QUANTIZED)
    x = np.random.default_rng(1).standard_normal((9, k)).astype(np.float32)
    got = interpret(legalize_ops(build(lambda a, w: op.quantized_matmul(a, w, format=fmt, k=k),
                                       [Tensor((9, k), F32), Tensor((n, words.shape[1]), "uint32")]), target),
                    "main", x, words, kernel_runner=runner)
    np.testing.assert_allclose(got, x.astype(np.float64) @ reference.T.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_quantized_prefill_with_swiglu(c_target):
    """SmolLM2's feed-forward: silu(x @ Wg^T) * (x @ Wu^T), the second matmul's epilogue reading the
    first's output at each row and column."""
    runner, target = c_target
    n, k, m = 70, 256, 37
    gate, gate_ref = quantized("q4_1", n, k, seed=2)
    up, up_ref = quantized("q4_1", n, k, seed=3)
    mod = build(lambda x, g, u: op.multiply(op.nn.silu(op.quantized_matmul(x, g, format="q4_1", k=k)),
                                            op.quantized_matmul(x, u, format="q4_1", k=k)),
                [Tensor((m, k), F32), Tensor((n, gate.shape[1]), "uint32"), Tensor((n, up.shape[1]), "uint32")])
    fused = legalize_ops(fuse_tir(fuse_ops(mod, target), target), target)
    assert set(rules(kernels_of(fused))) == {"cpu-gemm"}
    x = np.random.default_rng(5).standard_normal((m, k)).astype(np.float32)
    got = interpret(fused, "main", x, gate, up, kernel_runner=runner)
    g = x.astype(np.float64) @ gate_ref.T
    np.testing.assert_allclose(got, g / (1 + np.exp(-g)) * (x.astype(np.float64) @ up_ref.T), rtol=1e-4, atol=1e-4)


def test_f16_output_and_a_constant_scale(c_target):
    """A GEMM whose epilogue scales (attention's 1/sqrt(d)) and whose result is stored as float16."""
    runner, target = c_target
    mod = build(lambda a, b: op.astype(op.multiply(op.matmul(a, b), Constant(np.float32(0.125))), dtype="float16"),
                [Tensor((50, 64), F32), Tensor((64, 29), F32)])
    fused = legalize_ops(fuse_tir(fuse_ops(mod, target), target), target)
    assert "cpu-gemm" in rules(kernels_of(fused))
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((50, 64)).astype(np.float32), rng.standard_normal((64, 29)).astype(np.float32)
    got = interpret(fused, "main", a, b, kernel_runner=runner)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), (a.astype(np.float64) @ b) * 0.125, rtol=2e-3, atol=2e-3)


def _externs(func):
    from tessera.tir.ir import Extern, walk_expr, walk_stmts

    return [e for _, exprs in walk_stmts(func.body) for root in exprs for e in walk_expr(root) if isinstance(e, Extern)]
