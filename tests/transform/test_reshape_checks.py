"""check_reshapes: a reshape whose element count deduction cannot prove equal to its input's gets a
run-time check (issue 32: the VM used to return a (4, 6) of garbage for a 3x10 x); a provable
reshape, every one of an LLM, is left alone."""

import numpy as np
import pytest
import tessera
from tessera import nn
from tessera.ir import RuntimeCheckError, ShapeValue, assert_structural_equal, interpret, well_formed
from tessera.models import LlamaConfig, LlamaForCausalLM, export_llm
from tessera.script import from_source
from tessera.target import Target
from tessera.transform import check_reshapes
from tessera.transform.pipeline import Pipeline

# The Relax paper's Figure 4 shape: x reshaped to a shape the caller passes.
TO_SHAPE_ARGUMENT = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", "m"), dtype="float32"), s: R.Shape(["a", "b"])) -> R.Tensor(("a", "b"), dtype="float32"):
        n = T.int64()
        m = T.int64()
        a = T.int64()
        b = T.int64()
        with R.dataflow():
            y: R.Tensor((n, m), dtype="float32") = R.exp(x)
            lv0: R.Tensor((a, b), dtype="float32") = R.reshape(y, s)
            gv: R.Tensor((a, b), dtype="float32") = R.add(lv0, R.const(1.0, "float32"))
            R.output(gv)
        return gv
'''

# The check comes first, before exp's kernel: its variables are all the parameters'.
TO_SHAPE_ARGUMENT_CHECKED = '''# from tessera.script import ir as I, relax as R, tir as T


@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", "m"), dtype="float32"), s: R.Shape(["a", "b"])) -> R.Tensor(("a", "b"), dtype="float32"):
        n = T.int64()
        m = T.int64()
        a = T.int64()
        b = T.int64()
        R.func_attr({"described_checks": {"lv0_count": "reshape of y to (a, b) in main (R.reshape(y, s)), the element count of y"}})
        with R.dataflow():
            lv0_count: R.Shape([a * b]) = R.match_cast(R.shape([m * n]), R.Shape([a * b]))
            y: R.Tensor((n, m), dtype="float32") = R.exp(x)
            lv0: R.Tensor((a, b), dtype="float32") = R.reshape(y, s)
            gv: R.Tensor((a, b), dtype="float32") = R.add(lv0, R.const(1.0, "float32"))
            R.output(gv)
        return gv
'''

# Inside a branch, after a match_cast that names the input's dims: the check stays in the arm (the
# other arm reshapes nothing) and comes right after the match_cast that defines p and q.
IN_A_BRANCH = '''
@I.ir_module
class Module:
    @R.function
    def main(c: R.Tensor((), dtype="bool"), x: R.Tensor(dtype="float32", ndim=2), s: R.Shape(["a", "b"])) -> R.Tensor(dtype="float32", ndim=2):
        a = T.int64()
        b = T.int64()
        p = T.int64()
        q = T.int64()
        if c:
            k: R.Tensor((p, q), dtype="float32") = R.match_cast(x, R.Tensor((p, q), dtype="float32"))
            y: R.Tensor((p, q), dtype="float32") = R.exp(k)
            r: R.Tensor((b, a), dtype="float32") = R.reshape(y, R.shape([b, a]))
            out: R.Tensor(dtype="float32", ndim=2) = r
        else:
            out: R.Tensor(dtype="float32", ndim=2) = x
        return out
'''

# What deduction proves: a reshape of (n, 4) to (2 * n, 2), a -1 over a divisor, constants.
PROVABLE = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32")) -> R.Tensor((2, "n", 2), dtype="float32"):
        n = T.int64()
        with R.dataflow():
            lv0: R.Tensor((n * 2, 2), dtype="float32") = R.reshape(x, R.shape([n * 2, 2]))
            lv1: R.Tensor((n, 2, 2), dtype="float32") = R.reshape(lv0, R.shape([-1, 2, 2]))
            lv2: R.Tensor((4, n), dtype="float32") = R.reshape(lv1, R.shape([4, n]))
            gv: R.Tensor((2, n, 2), dtype="float32") = R.reshape(lv2, R.shape([2, n, 2]))
            R.output(gv)
        return gv
'''

PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj")
X = np.linspace(-1, 1, 30, dtype=np.float32).reshape(3, 10)


def test_a_reshape_to_a_shape_argument_is_checked_first():
    before = from_source(TO_SHAPE_ARGUMENT)
    after = check_reshapes(before)
    well_formed(after)
    assert after.script() == TO_SHAPE_ARGUMENT_CHECKED
    assert_structural_equal(from_source(after.script()), after)
    for shape in [(5, 6), (30, 1), (1, 30)]:
        np.testing.assert_allclose(interpret(after, "main", X, ShapeValue(shape)),
                                   interpret(before, "main", X, ShapeValue(shape)), rtol=1e-6)


@pytest.mark.parametrize("shape", [(4, 6), (6, 6)])  # fewer elements than x, more (a read past x)
def test_a_count_that_differs_is_refused_naming_the_reshape(shape):
    after = check_reshapes(from_source(TO_SHAPE_ARGUMENT))
    count = shape[0] * shape[1]
    with pytest.raises(RuntimeCheckError) as checked:
        interpret(after, "main", X, ShapeValue(shape))
    assert str(checked.value) == ("reshape of y to (a, b) in main (R.reshape(y, s)), the element count of y: "
                                  f"expected R.Shape([a * b]), got shape (30,): dimension 0 is 30, not a * b = {count}")
    # The reference interpreter on the program as written refuses it too, in the reshape's own words.
    with pytest.raises(RuntimeCheckError) as reference:
        interpret(from_source(TO_SHAPE_ARGUMENT), "main", X, ShapeValue(shape))
    assert str(reference.value) == (f"ValueError: 30 elements cannot take the shape {shape}, which holds {count} "
                                    '(in lv0: R.Tensor((a, b), dtype="float32") = R.reshape(y, s))')


def test_the_check_stays_in_its_branch_after_the_match_cast_that_defines_its_sizes():
    before = from_source(IN_A_BRANCH)
    after = check_reshapes(before)
    well_formed(after)
    arm = after["main"].body.blocks[0].bindings[-1].value.true_branch
    assert [b.var.name_hint for block in arm.blocks for b in block.bindings] == ["k", "r_count", "y", "r"]
    assert after["main"].body.blocks[0].bindings[-1].value.false_branch == \
        before["main"].body.blocks[0].bindings[-1].value.false_branch
    true, false = np.array(True), np.array(False)
    np.testing.assert_array_equal(interpret(after, "main", false, X, ShapeValue((4, 6))), X)  # no reshape: no check
    np.testing.assert_allclose(interpret(after, "main", true, X, ShapeValue((6, 5))), np.exp(X).reshape(5, 6),
                               rtol=1e-6)
    with pytest.raises(RuntimeCheckError, match=r"^reshape of y to \(b, a\) in main \(R.reshape\(y, R.shape\(\[b, a\]\)"
                       r"\)\), the element count of y: expected R.Shape\(\[a \* b\]\), got shape \(30,\): "
                       r"dimension 0 is 30, not a \* b = 24"):
        interpret(after, "main", true, X, ShapeValue((4, 6)))


def test_an_inferred_dimension_that_does_not_divide_is_checked():
    """(n,) to (-1, 4): deduction gives (n // 4, 4), which is n only when 4 divides n; 30 would
    become 28 elements without the check."""
    mod = from_source('''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n",), dtype="float32")) -> R.Tensor(dtype="float32", ndim=2):
        n = T.int64()
        with R.dataflow():
            gv = R.reshape(x, R.shape([-1, 4]))
            R.output(gv)
        return gv
''')
    after = check_reshapes(mod)
    assert 'R.match_cast(R.shape([n]), R.Shape([n // 4 * 4]))' in after.script()
    np.testing.assert_array_equal(interpret(after, "main", np.arange(32, dtype=np.float32)),
                                  np.arange(32, dtype=np.float32).reshape(8, 4))
    with pytest.raises(RuntimeCheckError, match=r"dimension 0 is 30, not n // 4 \* 4 = 28"):
        interpret(after, "main", np.arange(30, dtype=np.float32))


def test_provable_reshapes_are_left_alone():
    mod = from_source(PROVABLE)
    assert check_reshapes(mod)["main"] is mod["main"]


def smollm2_like() -> tessera.ir.IRModule:
    """SmolLM2-135M's layer shapes (hidden 576, 9 query heads over 3 KV heads of 64, FFN 1536, Q4_1
    layers, a Q8_0 embedding tied to the head), one layer and 96 tokens, random weights bound."""
    config = LlamaConfig(vocab_size=96, hidden_size=576, intermediate_size=1536, num_layers=1, num_heads=9,
                         num_kv_heads=3, head_dim=64, rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)
    formats = {"model.embed_tokens": "q8_0"}
    formats.update({f"model.layers.0.{name}": "q4_1" for name in PROJECTIONS})
    model = LlamaForCausalLM(config, formats)
    rng = np.random.default_rng(0)
    weights = {}
    for path, param in model.named_parameters():
        shape = tuple(int(d.value) for d in param.sinfo.shape)
        weights[path] = (rng.integers(0, 2**32, shape, dtype=np.uint32) if param.sinfo.dtype == "uint32"
                         else rng.standard_normal(shape).astype(param.sinfo.dtype))
    return nn.bind_weights(export_llm(model, 64), weights)


def test_a_smollm2_like_model_is_left_alone_and_launches_as_many_kernels():
    """Every reshape of a Llama (heads split and merged) is provable: the pass changes no function,
    so the model's kernels and launches cannot move either."""
    target = Target.preset("webgpu")
    mod = smollm2_like()
    pipeline = Pipeline.default(target)
    names = [name for name, _ in pipeline.passes]
    assert names.index("inline_functions") < names.index("check_reshapes") < names.index("fuse_ops")
    before = mod
    for _, run in pipeline.passes[:names.index("check_reshapes")]:
        before = run(before)
    after = check_reshapes(before)
    assert all(after.functions[name] is func for name, func in before.functions.items())

    def launches(exe):
        return {name: sum(op["op"] == "launch" for op in f["code"]) for name, f in exe.functions.items()}

    built = tessera.build(mod, target)
    unchecked = tessera.build(mod, target, pipeline=Pipeline([p for p in pipeline.passes if p[0] != "check_reshapes"]))
    assert launches(built) == launches(unchecked)
    assert [k["name"] for k in built.kernels] == [k["name"] for k in unchecked.kernels]
    assert not any(op["op"] == "shape" for f in built.functions.values() for op in f["code"])
