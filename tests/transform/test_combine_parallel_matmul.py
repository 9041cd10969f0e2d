"""combine_parallel_matmul: projections of one activation by constant weights become one GEMV."""

import numpy as np
from fixtures.quantized_blocks import as_words, quantized_blocks
from tessera import op
from tessera.ir import BlockBuilder, Constant, Tensor, Var, interpret, print_module
from tessera.target import Target
from tessera.transform import Pipeline, dead_code_elimination
from tessera.transform.combine_parallel_matmul import combine_parallel_matmul


def projections(x_rows=1):
    """q, k and v of one normed x (Q4_1 rows), concatenated as llama.py's attention reads them, and a
    float projection of the same x beside them."""
    weights = {name: Constant(as_words(quantized_blocks("q4_1", rows, 64, seed)[0]),
                              name=f"layers.0.attn.{name}.weight")
               for seed, (name, rows) in enumerate((("q_proj", 32), ("k_proj", 16), ("v_proj", 16)))}
    floats = [Constant(np.random.default_rng(s).standard_normal((64, 8)).astype(np.float32)) for s in (5, 6)]
    x = Var("x", Tensor((x_rows, 64), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            normed = bb.emit(op.nn.rms_norm(x, Constant(np.ones(64, np.float32))), "normed")
            q, k, v = (bb.emit(op.quantized_matmul(normed, w, format="q4_1", k=64), name)
                       for name, w in zip("qkv", weights.values()))
            qkv = bb.emit(op.concat((q, k, v), axis=1), "qkv")
            f0, f1 = (bb.emit(op.matmul(normed, w), f"f{i}") for i, w in enumerate(floats))
            out = bb.emit_output(op.add(op.sum(qkv, axis=[1]), op.sum(op.concat((f1, f0), axis=1), axis=[1])), "out")
        bb.emit_func_output(out)
    return bb.get()


def test_parallel_projections_become_one_and_the_concat_of_their_slices_is_the_whole():
    mod = projections()
    combined = dead_code_elimination(combine_parallel_matmul(mod))
    text = print_module(combined)
    # One GEMV over the stacked rows (32 + 16 + 16), named after its parts; the concat reads it whole.
    assert text.count("R.quantized_matmul(") == 1
    assert 'q_combined: R.Tensor((1, 64), dtype="float32") = R.quantized_matmul(normed, ' in text
    assert "qkv: R.Tensor((1, 64), dtype=\"float32\") = q_combined" in text
    (stacked,) = [b.value.args[1] for b in combined["main"].body.blocks[0].bindings
                  if getattr(b.value, "op", None) is not None and getattr(b.value.op, "name", "") == "quantized_matmul"]
    assert stacked.name == "layers.0.attn.q_proj+k_proj+v_proj.weight" and stacked.data.shape[0] == 64
    # The float projections stack their columns: one matmul of (64, 16), sliced for each; their concat
    # in the other order is no slice of it, and stays.
    assert text.count("R.matmul(") == 1 and text.count("R.strided_slice(") == 2 and text.count("R.concat(") == 1
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    np.testing.assert_allclose(interpret(combined, "main", x), interpret(mod, "main", x), rtol=1e-5, atol=1e-5)


def test_the_default_pipeline_combines_before_fusing():
    names = [name for name, _ in Pipeline.default(Target.preset("llvmpipe")).passes]
    assert names.index("fold_constants") < names.index("combine_parallel_matmul") < names.index("fuse_ops")


def test_projections_that_meet_in_an_epilogue_stay_apart():
    """SwiGLU: the gate's GEMV takes silu(gate) * up as its epilogue; one GEMV of both would not."""
    gate, up = (Constant(as_words(quantized_blocks("q4_1", 32, 64, seed)[0])) for seed in (1, 2))
    x = Var("x", Tensor((1, 64), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            g, u = (bb.emit(op.quantized_matmul(x, w, format="q4_1", k=64)) for w in (gate, up))
            out = bb.emit_output(op.multiply(op.nn.silu(g), u), "out")
        bb.emit_func_output(out)
    mod = bb.get()
    assert print_module(combine_parallel_matmul(mod)) == print_module(mod)
