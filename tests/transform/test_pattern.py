"""The pattern language: what matches, what a match returns, and the errors of a bad pattern."""

import numpy as np
import pytest
from tessera import op
from tessera.ir import BlockBuilder, Constant, Tensor, TesseraError, Var
from tessera.ir.errors import UnknownOpError
from tessera.transform import FusionPattern
from tessera.transform.pattern import PatternError, is_const, is_op, match, named, wildcard


def block_of(build, params):
    """The single dataflow block ``build(*params)`` emits, as the var -> binding map match() follows."""
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(build(*params), "out")
        bb.emit_func_output(out)
    func = bb.get()["main"]
    bindings = func.body.blocks[0].bindings
    return {b.var: b for b in bindings}, bindings[-1].var


X = Var("x", Tensor(("n", 16), "float32"))
W = Var("w", Tensor((16, 8), "float32"))
B = Var("b", Tensor((8,), "float32"))


def dense_relu(x, w, b):
    return op.nn.relu(op.add(op.matmul(x, w), b))


def test_a_call_pattern_follows_variables_to_their_bindings_and_names_what_it_bound():
    bound, out = block_of(dense_relu, [X, W, B])
    pattern = is_op("nn.relu")(is_op("add")(is_op("matmul")(wildcard("x"), wildcard("w"), name="mm"), wildcard("b")))
    m = match(pattern, out, bound)
    assert m is not None
    assert m["x"] is X and m["w"] is W and m["b"] is B
    assert bound[m["mm"]].value.op.name == "matmul"
    assert [b.value.op.name for b in m.members] == ["matmul", "add", "nn.relu"]
    # Without the bindings, the variable is only a variable.
    assert match(pattern, out) is None


def test_optional_and_alternatives_take_the_first_that_matches():
    dense = is_op("matmul")(wildcard("x"), wildcard("w")).optional(lambda mm: is_op("add")(mm, wildcard("bias")))
    act = is_op("nn.relu")(dense) | is_op("nn.gelu")(dense)
    bound, out = block_of(dense_relu, [X, W, B])
    m = match(act, out, bound)
    assert m["bias"] is B and len(m.members) == 3
    bound, out = block_of(lambda x, w: op.nn.gelu(op.matmul(x, w)), [X, W])
    m = match(act, out, bound)
    assert "bias" not in m.bindings and [b.value.op.name for b in m.members] == ["matmul", "nn.gelu"]
    bound, out = block_of(lambda x, w: op.nn.silu(op.matmul(x, w)), [X, W])
    assert match(act, out, bound) is None


def test_struct_info_checks():
    bound, out = block_of(dense_relu, [X, W, B])
    relu = is_op("nn.relu")(wildcard())
    assert match(relu.has_dtype("float32"), out, bound)
    assert match(relu.has_dtype("float16"), out, bound) is None
    assert match(relu.has_ndim(2), out, bound)
    assert match(relu.has_ndim(3), out, bound) is None
    assert match(relu.has_shape(("n", 8)), out, bound)
    assert match(relu.has_shape((None, 8)), out, bound)
    assert match(relu.has_shape(("n", 9)), out, bound) is None
    assert match(relu.has_shape(lambda shape: str(shape[0]) == "n"), out, bound)
    w8 = wildcard("w").where(lambda e: e.struct_info.shape[1].value == 8, "8 columns")
    assert match(is_op("nn.relu")(is_op("add")(is_op("matmul")(wildcard(), w8), wildcard())), out, bound)


def test_constants_attributes_and_tuples():
    half = Constant(np.float32(0.5))
    bound, out = block_of(lambda x: op.nn.softmax(op.concat((op.multiply(x, half), x), axis=1), axis=-1), [X])
    x = wildcard("x")
    scaled = is_op("multiply")(x, is_const("scale"))
    assert match(is_op("nn.softmax")(is_op("concat")((scaled, x), axis=1), axis=-1), out, bound)["scale"] == half
    assert match(is_op("nn.softmax")(is_op("concat")((scaled, x), axis=0)), out, bound) is None
    assert match(is_op("nn.softmax")(wildcard(), axis=0), out, bound) is None
    # x used twice must be the same value both times.
    y = wildcard("y")
    assert match(is_op("nn.softmax")(is_op("concat")((is_op("multiply")(y, wildcard()), y))), out, bound)
    bound, out = block_of(lambda x, z: op.concat((op.multiply(x, half), z), axis=1), [X, Var("z", X.struct_info)])
    assert match(is_op("concat")((is_op("multiply")(y, wildcard()), y)), out, bound) is None
    assert match(is_op("concat")((is_op("multiply")(wildcard(), is_const()), wildcard())), out, bound)


def test_is_op_with_several_names_and_named():
    bound, out = block_of(lambda x: op.exp(op.multiply(x, x)), [X])
    m = match(is_op("exp")(named(is_op("add", "multiply")(wildcard(), wildcard()), "product")), out, bound)
    assert bound[m["product"]].value.op.name == "multiply"


def test_bad_patterns_are_refused_with_a_reason():
    with pytest.raises(UnknownOpError, match="unknown operator 'matmull'; did you mean matmul"):
        is_op("matmull")
    with pytest.raises(PatternError, match=r"R.matmul takes 2 inputs \(x1, x2\), the pattern gives 1"):
        is_op("matmul")(wildcard())
    with pytest.raises(PatternError, match="R.nn.softmax has no attribute dim"):
        is_op("nn.softmax")(wildcard(), dim=1)
    with pytest.raises(PatternError, match=r"must be called with its arguments' patterns"):
        is_op("exp")(is_op("add"))
    with pytest.raises(PatternError, match="expected a pattern"):
        is_op("exp")(3)
    with pytest.raises(PatternError, match="the name 'x' is given to two different sub-patterns"):
        FusionPattern("twice", is_op("add")(wildcard("x"), wildcard("x")))
    with pytest.raises(PatternError, match="backend is \"compile\" or a library function's name"):
        FusionPattern("nowhere", is_op("exp")(wildcard()), None, "")
    with pytest.raises(PatternError, match="expected a pattern"):
        FusionPattern("not a pattern", is_op("exp"))
    assert issubclass(PatternError, TesseraError)
