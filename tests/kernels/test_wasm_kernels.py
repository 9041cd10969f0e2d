"""The WASM target: the same operators as C kernels (codegen/c) built by clang for wasm32 and run in
wasmtime, against numpy at sizes that are not multiples of any tile (1, 7, 64, 1000)."""

import numpy as np
import pytest
from harness import NONZERO, SIGNED, Domain, check_op
from tessera import op
from tessera.codegen.c import LOWERING, emit_c
from tessera.ir import Constant, PrimValue, Tensor
from tessera.target import Target
from tessera.tir.lower import lower_kernel
from tessera.vm.wasm_runner import WasmKernelRunner

WASM = Target.preset("wasm")
F32 = "float32"


@pytest.fixture(scope="module")
def wasm():
    return WasmKernelRunner()


CASES = {
    "elementwise": (lambda a, b: op.multiply(op.exp(a), op.add(b, a)), [Tensor(("n", 5), F32), Tensor((5,), F32)]),
    "compare_where": (lambda a, b: op.where(op.greater(a, b), a, op.negative(b)), [Tensor(("n",), F32)] * 2),
    # Signed operands (harness.SIGNED: negatives, zeros, half-integers) where the sign decides.
    "relu_abs_round": (lambda a: op.add(op.nn.relu(a), op.subtract(op.abs(a), op.round(a))), [Tensor(("n", 3), F32)]),
    "floor_divide": (op.floor_divide, [Tensor(("n", 3), F32)] * 2, [SIGNED, NONZERO]),
    "integer_division": (lambda a, b: op.add(op.floor_divide(a, b), op.multiply(op.divide(a, b), Constant(
        np.array(100, np.int32)))), [Tensor(("n",), "int32")] * 2, [SIGNED, NONZERO]),
    "int64_floor_divide": (op.floor_divide, [Tensor(("n",), "int64")] * 2, [SIGNED, NONZERO]),
    "gelu_silu": (lambda a: op.nn.silu(op.nn.gelu(a)), [Tensor(("n", 3), F32)]),
    "sum_rows": (lambda a: op.sum(a, axis=[1]), [Tensor(("n", 300), F32)]),
    "mean_all": (lambda a: op.mean(a), [Tensor(("n", 3), F32)]),
    "softmax": (op.nn.softmax, [Tensor(("n", 300), F32)]),
    "rms_norm": (lambda x, w: op.nn.rms_norm(x, w, axes=[-1]), [Tensor(("n", 64), F32), Tensor((64,), F32)]),
    "layer_norm": (lambda x, g, b: op.nn.layer_norm(x, g, b, axes=[-1]),
                   [Tensor(("n", 40), F32), Tensor((40,), F32), Tensor((40,), F32)]),
    "gemv": (op.matmul, [Tensor((1, 96), F32), Tensor((96, "n"), F32)]),
    "gemm": (op.matmul, [Tensor(("n", 70), F32), Tensor((70, 33), F32)]),
    "transpose": (op.permute_dims, [Tensor(("n", 37), F32)]),
    "concat_split": (lambda a, b: op.split(op.concat((a, b), axis=1), indices_or_sections=[2], axis=1),
                     [Tensor(("n", 3), F32), Tensor(("n", 4), F32)]),
    "take": (lambda w, i: op.take(w, i, axis=0), [Tensor((50, 8), F32), Tensor(("n",), "int32")],
             [SIGNED, Domain(0.0, 0.0, (0, 49))]),  # indices into the 50 rows
    "int64_arange": (lambda x: op.add(op.arange(start=0, end=7, step=1, dtype="int64"), op.astype(x, dtype="int64")),
                     [Tensor((7,), "int32")]),
    "argmax_bool": (lambda a: op.logical_and(op.greater(op.argmax(a, axis=1), op.argmin(a, axis=1)),
                                             op.not_equal(op.argmax(a, axis=1), op.argmin(a, axis=1))),
                    [Tensor(("n", 30), F32)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_operators_as_wasm_kernels(wasm, name):
    make, params, *domains = CASES[name]
    check_op(wasm, make, params, target=WASM, rtol=1e-4, atol=1e-4, domains=domains[0] if domains else SIGNED)


def test_the_other_gguf_formats_as_wasm(wasm):
    """Q5_0, Q5_1 and the K-quants take the quantized-matmul rule in WASM too (no lane rule, no
    micro-kernel): decode GEMVs of each, and a GEMM over one 110-byte Q3_K block (a padded row)."""
    from test_quantized_kernels import quantized

    for fmt in ("q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"):
        words, _ = quantized(fmt, 42, 256)
        _, kernels = check_op(wasm, lambda x, w, f=fmt: op.quantized_matmul(x, w, format=f, k=256),
                              [Tensor((1, 256), F32), Tensor((42, words.shape[1]), "uint32")], target=WASM, rtol=1e-4,
                              atol=1e-4, inputs=lambda env, rng, w=words: [rng.standard_normal((1, 256)).astype(np.float32), w])
        assert [k.attrs["rule"] for k in kernels] == ["quantized-matmul"]
    words, _ = quantized("q3_k", 42, 256)
    check_op(wasm, lambda x, w: op.quantized_matmul(x, w, format="q3_k", k=256),
             [Tensor(("m", 256), F32), Tensor((42, words.shape[1]), "uint32")], target=WASM, rtol=1e-4, atol=1e-4,
             inputs=lambda env, rng: [rng.standard_normal((env["m"], 256)).astype(np.float32), words])


def test_the_llm_kernels_as_wasm(wasm):
    """What a Llama step needs beyond the above: quantized GEMV/GEMM and embedding rows, the KV
    cache write (in place) and the sampler, whose workgroup barriers split_workgroups splits at."""
    from test_quantized_kernels import quantized

    words, _ = quantized("q4_1", 42, 128)
    check_op(wasm, lambda x, w: op.quantized_matmul(x, w, format="q4_1", k=128),
             [Tensor(("m", 128), F32), Tensor((42, words.shape[1]), "uint32")], target=WASM, rtol=1e-4, atol=1e-4,
             inputs=lambda env, rng: [rng.standard_normal((env["m"], 128)).astype(np.float32), words])
    for fmt in ("q4_1", "q8_0"):  # decode: the lane rule (tir/schedule/quantized_gemv.py)
        words, _ = quantized(fmt, 42, 128)
        _, kernels = check_op(wasm, lambda x, w, f=fmt: op.quantized_matmul(x, w, format=f, k=128),
                              [Tensor((1, 128), F32), Tensor((42, words.shape[1]), "uint32")], target=WASM, rtol=1e-4,
                              atol=1e-4, inputs=lambda env, rng, w=words: [rng.standard_normal((1, 128)).astype(np.float32), w])
        assert [k.attrs["rule"] for k in kernels] == ["quantized-gemv"]
    for fmt in ("q4_0", "q4_1", "q8_0"):  # decode with x in q8: the SIMD128 micro-kernels
        words, _ = quantized(fmt, 70, 256)
        _, kernels = check_op(wasm, lambda a, w, f=fmt: op.quantized_matmul(a, w, format=f, k=256, activations="q8"),
                              [Tensor((1, 256), F32), Tensor((70, words.shape[1]), "uint32")], target=WASM, rtol=1e-5,
                              atol=1e-4, inputs=lambda env, rng, w=words: [rng.standard_normal((1, 256)).astype(np.float32), w])
        assert [k.attrs["rule"] for k in kernels] == ["quantized-gemv-q8"]
    table, _ = quantized("q8_0", 30, 64)
    check_op(wasm, lambda w, i: op.quantized_take(w, i, format="q8_0", k=64),
             [Tensor((30, table.shape[1]), "uint32"), Tensor(("n",), "int32")], target=WASM, rtol=1e-5, atol=1e-5,
             inputs=lambda env, rng: [table, rng.integers(0, 30, env["n"]).astype(np.int32)])
    check_op(wasm, lambda c, v: op.kv_cache_write(c, v, PrimValue(3)), [Tensor((1010, 2, 4), F32),
                                                                         Tensor(("n", 2, 4), F32)], target=WASM)
    check_op(wasm, lambda qkv, cos, sin, k, v: op.rope_append(qkv, cos, sin, k, v, PrimValue(3)),
             [Tensor(("n", 32), F32), Tensor(("n", 1, 8), F32), Tensor(("n", 1, 8), F32),
              Tensor((1010, 1, 8), F32), Tensor((1010, 1, 8), F32)], target=WASM)

    def sampler_inputs(env, rng):
        return [(rng.standard_normal((1, 1000)) * 3).astype(np.float32), rng.integers(0, 1000, env["m"]).astype(np.int32),
                np.array([0.8, 40, 0.9, 1.2, rng.random()], np.float32)]

    for greedy in (True, False):
        _, kernels = check_op(wasm, lambda x, h, p, g=greedy: op.sample_token(x, h, p, greedy=g),
                              [Tensor((1, 1000), F32), Tensor(("m",), "int32"), Tensor((5,), F32)],
                              target=WASM, inputs=sampler_inputs)
    source = emit_c(lower_kernel(kernels[0], LOWERING))
    assert "for (int32_t lid = 0; lid < 256; lid++)" in source  # the body split into thread loops


def test_fused_attention_as_wasm(wasm):
    """Prefill and split decode attention (the serial rule, tir/schedule/attention.py) in WASM."""
    from test_attention_kernels import attention_module, run_attention

    kernels = run_attention(wasm, attention_module(4, 2, 16, 80), [(5, 5), (3, 37)], 80, (4, 2, 16), target=WASM)
    assert [k.attrs["rule"] for k in kernels] == ["attention-rows"]
    kernels = run_attention(wasm, attention_module(9, 3, 64, 2048, rows=1), [(1, 1), (1, 1500)], 2048, (9, 3, 64),
                            target=WASM)
    assert [k.attrs["rule"] for k in kernels] == ["attention-rows", "attention-merge"]


def test_what_c_kernels_cannot_hold_is_an_error():
    from harness import build
    from tessera.transform import legalize_ops

    with pytest.raises(Exception, match="bfloat16"):  # float16 they hold: test_wasm_f16_kernels.py
        legalize_ops(build(op.exp, [Tensor(("n",), "bfloat16")]), WASM)
