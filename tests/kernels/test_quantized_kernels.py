"""GGUF block formats read directly by kernels, against ggml's own dequantization (the gguf
package's): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K."""

import gguf
import numpy as np
import pytest
from fixtures.quantized_blocks import GGML_TYPES, as_words, block_values, quantized_blocks
from harness import COVERED_OPS, build, check_op, rounded_to_q8, target_for
from tessera import op
from tessera.frontend import bundled_smollm2_path, load_gguf
from tessera.frontend.gguf_reader import BLOCK_FORMATS
from tessera.ir import BlockBuilder, Function, Tensor, Var, interpret
from tessera.op.quantized import Q8_ACTIVATION_FORMATS, dequantize
from tessera.tir.quant import FORMATS, LANE_FORMATS
from tessera.transform import fuse_ops, fuse_tir, legalize_ops

# Every format a kernel reads, K-quants last.
ALL = sorted(FORMATS, key=lambda f: (block_values(f), f))


def quantized(fmt: str, n: int, k: int, seed: int = 0):
    """Weights in ``fmt`` (fixtures/quantized_blocks.py): (words as kernels take them, ggml's floats)."""
    blocks, reference = quantized_blocks(fmt, n, k, seed)
    return as_words(blocks), reference


def test_every_format_the_loader_accepts_has_kernels():
    assert set(BLOCK_FORMATS) == set(FORMATS) == set(GGML_TYPES)
    for fmt, f in FORMATS.items():
        assert (f.values, f.bytes) == gguf.GGML_QUANT_SIZES[GGML_TYPES[fmt]]


@pytest.mark.parametrize("fmt", ALL)
def test_numpy_reference_matches_ggml(fmt):
    """The op's reference reads rows padded to whole words (3 blocks of Q3_K are 330 bytes)."""
    k = 3 * block_values(fmt)
    words, reference = quantized(fmt, 9, k)
    assert words.shape == (9, FORMATS[fmt].row_words(k))
    np.testing.assert_array_equal(dequantize(words, fmt, k), reference)


@pytest.mark.parametrize("fmt", ALL)
def test_quantized_matmul_kernels(runner, fmt):
    """GEMM shapes (M swept over 1, 7, 64, 1000). 42 outputs: not a multiple of the 4-column tile.
    K of 2 blocks, but for Q5_0 (3 blocks of 22 bytes) and Q3_K (1 block of 110 bytes): rows
    padded to a whole word, whose last block is the tail of a group of two (after one whole group
    for Q5_0, and alone for Q3_K)."""
    n, k = 42, {"q5_0": 3, "q3_k": 1}.get(fmt, 2) * block_values(fmt)
    words, reference = quantized(fmt, n, k)

    def inputs(env, rng):
        return [rng.standard_normal((env["m"], k)).astype(np.float32), words]

    lowered, kernels = check_op(runner, lambda x, w: op.quantized_matmul(x, w, format=fmt, k=k),
                                [Tensor(("m", k), "float32"), Tensor((n, words.shape[1]), "uint32")],
                                inputs=inputs, rtol=1e-4, atol=1e-4)
    # C targets: the f32 GEMM micro-kernels over dequantized panels (tir/schedule/cpu_gemm.py).
    gemm = target_for(runner).has_extern("tsr_gemm_f32")
    assert [kern.attrs["rule"] for kern in kernels] == ["cpu-gemm" if gemm else "quantized-matmul"]
    x = np.random.default_rng(1).standard_normal((3, k)).astype(np.float32)
    got = interpret(lowered, "main", x, words, kernel_runner=runner)
    np.testing.assert_allclose(got, x @ reference.T, rtol=1e-4, atol=1e-4)  # against ggml's own floats


@pytest.mark.parametrize("fmt", ALL)
def test_decode_gemv_kernels(runner, fmt):
    """M = 1 (decode): where threads run serially (C kernels), the lane rule of
    tir/schedule/quantized_gemv.py for the formats it reads. 42 outputs: a partial last workgroup."""
    n, k = 42, 192 if block_values(fmt) == 32 else 512
    words, reference = quantized(fmt, n, k, seed=7)
    x = np.random.default_rng(8).standard_normal((1, k)).astype(np.float32)

    lowered, kernels = check_op(runner, lambda a, w: op.quantized_matmul(a, w, format=fmt, k=k),
                                [Tensor((1, k), "float32"), Tensor((n, words.shape[1]), "uint32")],
                                inputs=lambda env, rng: [x, words], rtol=1e-4, atol=1e-4)
    lanes = target_for(runner).serial_threads and target_for(runner).cpu_adapter and fmt in LANE_FORMATS
    assert [kern.attrs["rule"] for kern in kernels] == ["quantized-gemv" if lanes else "quantized-matmul"]
    got = interpret(lowered, "main", x, words, kernel_runner=runner)
    np.testing.assert_allclose(got, x @ reference.T, rtol=1e-4, atol=1e-4)  # against ggml's own floats
    # A fused epilogue (silu) reads the output's row and column.
    mod = build(lambda a, w: op.nn.silu(op.quantized_matmul(a, w, format=fmt, k=k)),
                [Tensor((1, k), "float32"), Tensor((n, words.shape[1]), "uint32")])
    target = target_for(runner)
    fused = legalize_ops(fuse_tir(fuse_ops(mod, target), target), target)
    assert len([f for f in fused.functions.values() if not isinstance(f, Function)]) == 1
    want = x @ reference.T
    np.testing.assert_allclose(interpret(fused, "main", x, words, kernel_runner=runner), want / (1 + np.exp(-want)),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt", ALL)
def test_decode_gemv_with_q8_activations(runner, fmt):
    """activations="q8": on the C runners the integer SIMD micro-kernels (tir/schedule/
    quantized_gemv_q8.py, codegen/c/microkernels.c and microkernels_kquant.c) for the formats they
    have, elsewhere the generic reduction reading x through the op's rounding. Both equal x rounded
    to 8 bits (computed here) times ggml's floats, to float rounding: far closer than to the
    unrounded product. K of two K-quant super-blocks."""
    n, k = 70, 512  # 70 outputs: a partial last workgroup; a block of zeros: d = 0
    words, reference = quantized(fmt, n, k, seed=11)
    x = np.random.default_rng(12).standard_normal((1, k)).astype(np.float32)
    x[0, 64:96] = 0
    gemv = lambda a, w: op.quantized_matmul(a, w, format=fmt, k=k, activations="q8")  # noqa: E731
    lowered, kernels = check_op(runner, gemv, [Tensor((1, k), "float32"), Tensor((n, words.shape[1]), "uint32")],
                                inputs=lambda env, rng: [x, words], rtol=1e-4, atol=1e-4)
    integer = target_for(runner).has_extern("tsr_quantize_q8") and fmt in Q8_ACTIVATION_FORMATS
    (rule,) = [kern.attrs["rule"] for kern in kernels]
    assert rule == "quantized-gemv-q8" if integer else rule.endswith("reduction")
    got = interpret(lowered, "main", x, words, kernel_runner=runner)
    want, unrounded = rounded_to_q8(x) @ reference.T, x @ reference.T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert np.abs(got - unrounded).max() > 10 * np.abs(got - want).max()
    # A fused epilogue (silu) is applied to each output of the micro-kernel.
    mod = build(lambda a, w: op.nn.silu(gemv(a, w)), [Tensor((1, k), "float32"), Tensor((n, words.shape[1]), "uint32")])
    target = target_for(runner)
    fused = legalize_ops(fuse_tir(fuse_ops(mod, target), target), target)
    assert len([f for f in fused.functions.values() if not isinstance(f, Function)]) == 1
    np.testing.assert_allclose(interpret(fused, "main", x, words, kernel_runner=runner), want / (1 + np.exp(-want)),
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("fmt", Q8_ACTIVATION_FORMATS)
def test_decode_batch_gemv_with_q8_activations(runner, fmt):
    """A decode batch's rows (models/llama.py's decode_batch: one token of each sequence) through the
    same rule: each workgroup's columns for one row after another, each row rounded on its own, with a
    fused epilogue indexed by row. Rows of 1, 3 and 7, against x rounded to 8 bits times ggml's floats."""
    n, k = 70, 512
    words, reference = quantized(fmt, n, k, seed=13)
    gemv = lambda a, w: op.nn.silu(op.quantized_matmul(a, w, format=fmt, k=k, activations="q8"))  # noqa: E731
    mod = build(gemv, [Tensor(("b", k), "float32"), Tensor((n, words.shape[1]), "uint32")])
    COVERED_OPS.add("quantized_matmul")
    target = target_for(runner)
    fused = legalize_ops(fuse_tir(fuse_ops(mod, target), target), target)
    kernels = [f for f in fused.functions.values() if not isinstance(f, Function)]
    integer = target.has_extern("tsr_quantize_q8")
    assert [kern.attrs["rule"] for kern in kernels] == (["quantized-gemv-q8"] if integer else kernels and
                                                        [kernels[0].attrs["rule"]])
    rng = np.random.default_rng(14)
    for rows in (1, 3, 7):
        x = rng.standard_normal((rows, k)).astype(np.float32) * rng.uniform(0.05, 0.5, (rows, 1)).astype(np.float32)
        want = rounded_to_q8(x) @ reference.T
        got = interpret(fused, "main", x, words, kernel_runner=runner)
        np.testing.assert_allclose(got, want / (1 + np.exp(-want)), rtol=1e-5, atol=1e-4, err_msg=f"{rows} rows")


def test_q8_activations_are_checked():
    x, w = Var("x", Tensor((1, 64), "float32")), Var("w", Tensor((4, 10), "uint32"))
    with pytest.raises(Exception, match="activations 'q4' is not one of"):
        BlockBuilder().normalize(op.quantized_matmul(x, w, format="q4_1", k=64, activations="q4"))


def test_smollm2_weights_through_the_decode_kernel(runner):
    model = load_gguf(bundled_smollm2_path())
    weight = model.tensors["blk.0.attn_q.weight"]
    assert (weight.format, weight.shape) == ("q4_1", (576, 576))
    blocks = weight.words.view(np.uint8)
    reference = gguf.quants.dequantize(blocks, GGML_TYPES["q4_1"])
    x = np.random.default_rng(0).standard_normal((1, 576)).astype(np.float32)
    _, kernels = check_op(runner, lambda a, w: op.quantized_matmul(a, w, format="q4_1", k=576),
                          [Tensor((1, 576), "float32"), Tensor((576, 90), "uint32")],
                          inputs=lambda env, rng: [x, weight.words], rtol=1e-4, atol=1e-4)
    lowered = legalize_ops(build(lambda a, w: op.quantized_matmul(a, w, format="q4_1", k=576),
                                 [Tensor((1, 576), "float32"), Tensor((576, 90), "uint32")]), target_for(runner))
    got = interpret(lowered, "main", x, weight.words, kernel_runner=runner)
    np.testing.assert_allclose(got, x @ reference.T, rtol=1e-4, atol=1e-4)


def test_epilogues_fuse_into_the_quantized_kernel(runner):
    """SwiGLU as SmolLM2 computes it: silu(x @ Wg^T) * (x @ Wu^T), with quantized weights."""
    k, n = 64, 40
    gate, gate_ref = quantized("q4_1", n, k, seed=2)
    up, up_ref = quantized("q4_1", n, k, seed=3)
    x = Var("x", Tensor(("m", k), "float32"))
    wg, wu = Var("wg", Tensor((n, gate.shape[1]), "uint32")), Var("wu", Tensor((n, up.shape[1]), "uint32"))
    bb = BlockBuilder()
    with bb.function("main", [x, wg, wu]):
        with bb.dataflow():
            g = op.nn.silu(op.quantized_matmul(x, wg, format="q4_1", k=k))
            out = bb.emit_output(op.multiply(g, op.quantized_matmul(x, wu, format="q4_1", k=k)), "out")
        bb.emit_func_output(out)
    mod = bb.get()
    target = target_for(runner)
    lowered = legalize_ops(fuse_tir(fuse_ops(mod, target), target), target)
    kernels = [f for f in lowered.functions.values() if not isinstance(f, Function)]
    assert len(kernels) == 2  # up, then gate with silu and the product as its epilogue
    xs = np.random.default_rng(4).standard_normal((5, k)).astype(np.float32)
    gate_out = xs @ gate_ref.T
    want = gate_out / (1 + np.exp(-gate_out)) * (xs @ up_ref.T)
    np.testing.assert_allclose(interpret(lowered, "main", xs, gate, up, kernel_runner=runner), want, rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("fmt", ALL)
def test_quantized_take_reads_embedding_rows(runner, fmt):
    k = 4 * block_values(fmt)
    words, reference = quantized(fmt, 50, k, seed=5)

    def inputs(env, rng):
        return [words, rng.integers(0, 50, (env["n"],)).astype(np.int32)]

    lowered, _ = check_op(runner, lambda w, i: op.quantized_take(w, i, format=fmt, k=k),
                          [Tensor((50, words.shape[1]), "uint32"), Tensor(("n",), "int32")], inputs=inputs)
    ids = np.array([0, 49, 7, 7], np.int32)
    np.testing.assert_array_equal(interpret(lowered, "main", words, ids, kernel_runner=runner), reference[ids])
