"""quantize_activations: decode's quantized GEMVs (one row of x) read x rounded to 8 bits; prefill's
GEMMs and everything else are left alone, and the interpreter computes what the attribute says."""

import gguf
import numpy as np
import pytest
from tessera import op
from tessera.ir import BlockBuilder, Tensor, Tuple, Var, interpret
from tessera.tir.quant import FORMATS
from tessera.transform import quantize_activations


def module():
    k = 64
    w = np.ascontiguousarray(gguf.quants.quantize(np.random.default_rng(0).standard_normal((8, k)).astype(np.float32),
                                                  gguf.GGMLQuantizationType.Q4_1)).view("<u4")
    one, rows, weight = Var("one", Tensor((1, k), "float32")), Var("rows", Tensor(("n", k), "float32")), \
        Var("w", Tensor(w.shape, "uint32"))
    bb = BlockBuilder()
    with bb.function("main", [one, rows, weight]):
        a = bb.emit(op.quantized_matmul(one, weight, format="q4_1", k=k))
        b = bb.emit(op.quantized_matmul(rows, weight, format="q4_1", k=k))
        bb.emit_func_output(Tuple((a, b)))
    return bb.get(), w


def activations(mod) -> list[str]:
    return [dict(b.value.attrs).get("activations") for block in mod["main"].body.blocks for b in block.bindings
            if getattr(getattr(b.value, "op", None), "name", "") == "quantized_matmul"]


def test_only_one_row_gemvs_round_their_activations():
    mod, w = module()
    assert activations(mod) == ["", ""]
    rounded = quantize_activations(mod)
    assert activations(rounded) == ["q8", ""]
    assert 'activations="q8"' in rounded.script()
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    before, after = interpret(mod, "main", x, x, w), interpret(rounded, "main", x, x, w)
    np.testing.assert_array_equal(before[1], after[1])  # the GEMM reads x as it is
    assert 0 < np.abs(before[0] - after[0]).max() < 0.05 * np.abs(before[0]).max()


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="'q4' is not one of"):
        quantize_activations(module()[0], "q4")


def test_only_the_named_functions_change():
    mod, _ = module()
    assert activations(quantize_activations(mod, functions=("decode",))) == ["", ""]
    assert activations(quantize_activations(mod, functions=("main",))) == ["q8", ""]


@pytest.mark.parametrize("fmt", ["q4_k", "q6_k", "q5_0", "q2_k"])
def test_k_quant_and_q5_gemvs_round_their_activations_too(fmt):
    """Every format the loader reads has a q8 micro-kernel (codegen/c/microkernels_kquant.c for the
    K-quants, Q5_0 and Q5_1), so their decode GEMVs read x rounded like Q4_0's."""
    words = FORMATS[fmt].row_words(256)
    x, w = Var("x", Tensor((1, 256), "float32")), Var("w", Tensor((8, words), "uint32"))
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        out = bb.emit(op.quantized_matmul(x, w, format=fmt, k=256))
        bb.emit_func_output(out)
    assert activations(quantize_activations(bb.get())) == ["q8"]
