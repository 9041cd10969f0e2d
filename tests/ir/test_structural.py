"""Structural equality: what a round trip through text must preserve, and what it may not."""

import numpy as np
import pytest
from tessera import op
from tessera.ir import (
    BindingBlock,
    BlockBuilder,
    Constant,
    Function,
    SeqExpr,
    StructuralMismatch,
    Tensor,
    Var,
    VarBinding,
    assert_structural_equal,
    structural_equal,
)
from tessera.tir.ir import Binary, Const, Local


def exp_function(name: str) -> Function:
    x = Var(name, Tensor(("n",), "float32"))
    bb = BlockBuilder()
    with bb.function("f", [x]):
        bb.emit_func_output(op.exp(x))
    return bb.get()["f"]


def test_variables_match_by_position_not_identity():
    a, b = exp_function("x"), exp_function("x")
    assert a != b  # two builds: different variables, so == (identity of variables) says no
    assert structural_equal(a, b)
    # Names are part of the text, so they are part of the structure.
    with pytest.raises(StructuralMismatch, match=r"\.params\[0\]\.name_hint: 'x' != 'y'"):
        assert_structural_equal(a, exp_function("y"))


def test_one_variable_cannot_stand_for_two():
    def function(second_reads: str) -> Function:
        p = Var("p", Tensor((2,), "float32"))
        x, y = Var("x", Tensor((2,), "float32")), Var("y", Tensor((2,), "float32"))
        reads = {"x": x, "p": p}[second_reads]
        body = SeqExpr((BindingBlock((VarBinding(x, op.exp(p)), VarBinding(y, op.exp(reads)))),), y)
        return Function((p,), body, Tensor((2,), "float32"))

    assert structural_equal(function("x"), function("x"))
    with pytest.raises(StructuralMismatch, match=r"\.bindings\[1\]\.value\.args\[0\]: variable x is matched with a "
                       "different p"):
        assert_structural_equal(function("x"), function("p"))


def test_adjacent_plain_blocks_compare_as_one():
    x, y = Var("x", Tensor((2,), "float32")), Var("y", Tensor((2,), "float32"))
    split = SeqExpr((BindingBlock((VarBinding(x, op.exp(x)),)), BindingBlock((VarBinding(y, op.exp(x)),))), y)
    joined = SeqExpr((BindingBlock((VarBinding(x, op.exp(x)), VarBinding(y, op.exp(x)))),), y)
    assert structural_equal(split, joined)


def test_kernel_nodes_compare_field_by_field():
    # tir nodes are eq=False (identity), yet two equal trees are structurally equal.
    tree = Binary("+", Local("i"), Const(1), "i32")
    assert tree != Binary("+", Local("i"), Const(1), "i32")
    assert structural_equal(tree, Binary("+", Local("i"), Const(1), "i32"))
    # The dtype of a constant and the Python type of its value both count.
    assert not structural_equal(Const(1.0, "f32"), Const(1.0, "f16"))
    assert not structural_equal(Const(1, "f32"), Const(1.0, "f32"))


def test_floats_are_compared_as_floats_not_numbers():
    assert structural_equal(Const(float("nan"), "f32"), Const(float("nan"), "f32"))
    assert not structural_equal(Const(0.0, "f32"), Const(-0.0, "f32"))
    assert structural_equal(Constant(np.array([np.nan, -0.0], np.float32)), Constant(np.array([np.nan, -0.0], np.float32)))
    assert not structural_equal(Constant(np.array([0.0], np.float32)), Constant(np.array([-0.0], np.float32)))


def test_attribute_containers_keep_their_kind():
    assert not structural_equal({"axes": (1, 2)}, {"axes": [1, 2]})
    assert not structural_equal({"a": 1, "b": 2}, {"b": 2, "a": 1})  # printed in order, so read back in order
