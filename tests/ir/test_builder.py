"""The BlockBuilder normalizes as it emits and names the binding when deduction fails."""

import numpy as np
import pytest
from tessera import op
from tessera.ir import (
    BlockBuilder,
    Call,
    DataflowBlock,
    DataflowVar,
    DeductionError,
    GlobalVar,
    Tensor,
    Var,
    WellFormedError,
    print_binding,
)

F32 = "float32"


def test_nested_calls_become_their_own_bindings():
    x = Var("x", Tensor(("n", 4), F32))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(op.exp(op.add(x, x)), "out")
        bb.emit_func_output(out)
    block = bb.get()["main"].body.blocks[0]
    assert isinstance(block, DataflowBlock)
    assert [print_binding(b) for b in block.bindings] == [
        'lv0: R.Tensor((n, 4), dtype="float32") = R.add(x, x)',
        'out: R.Tensor((n, 4), dtype="float32") = R.exp(lv0)',
    ]
    assert isinstance(block.bindings[0].var, DataflowVar)
    assert not isinstance(block.bindings[1].var, DataflowVar)


def test_deduction_errors_quote_the_binding():
    x = Var("x", Tensor(("n", 256), F32))
    w = Var("w", Tensor((128, 64), F32))
    bb = BlockBuilder()
    with pytest.raises(DeductionError) as info:
        with bb.function("main", [x, w]):
            with bb.dataflow():
                bb.emit(op.exp(x))
                bb.emit(op.exp(x))
                bb.emit(op.exp(x))
                bb.emit(op.matmul(x, w))
    assert str(info.value) == "shape mismatch in lv3 = R.matmul(x, w): x has (n, 256), w has (128, 64)"


def test_annotations_may_coarsen_but_not_refine():
    x = Var("x", Tensor(("n", 4), F32))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        coarse = bb.emit(op.exp(x), "coarse", annotation=Tensor(dtype=F32, ndim=2))
        assert coarse.struct_info == Tensor(dtype=F32, ndim=2)
        unique = bb.emit(op.unique(x), "u")
        with pytest.raises(DeductionError, match=r"annotation too specific in bad = R.exp\(u\): deduced "
                           r"tensor of ndim 1 float32, annotated \(m,\) float32; use R.match_cast"):
            bb.emit(op.exp(unique), "bad", annotation=Tensor(("m",), F32))
        with pytest.raises(DeductionError, match="annotation mismatch"):
            bb.emit(op.exp(x), "wrong", annotation=Tensor(("n", 5), F32))
        bb.emit_func_output(coarse)


def test_function_calls_deduce_from_the_signature_and_reject_provable_mismatches():
    y = Var("y", Tensor(("m", 2), F32))
    bb = BlockBuilder()
    with bb.function("double_rows", [y]):
        bb.emit_func_output(op.concat((y, y), axis=0))
    x = Var("x", Tensor((5, 2), F32))
    z = Var("z", Tensor((5, 3), F32))
    with bb.function("main", [x, z]):
        out = bb.emit(Call(GlobalVar("double_rows"), (x,)), "out")
        assert out.struct_info == Tensor((10, 2), F32)
        with pytest.raises(DeductionError, match=r"argument mismatch in bad = cls.double_rows\(z\): argument 0 "
                           r"of cls.double_rows: z has \(5, 3\) float32, the parameter needs \(m, 2\) "
                           r"float32 \(dimension 1 is 3, not 2\)"):
            bb.emit(Call(GlobalVar("double_rows"), (z,)), "bad")
        bb.emit_func_output(out)
    assert str(bb.get()["double_rows"].ret_struct_info.shape[0]) == "m * 2"


def test_builder_misuse_is_a_clear_error():
    bb = BlockBuilder()
    with pytest.raises(WellFormedError, match="no function is being built"):
        bb.emit(op.exp(Var("x", Tensor((1,), F32))))
    x = Var("x", Tensor((1,), F32))
    with pytest.raises(WellFormedError, match="emit_output is only valid inside a dataflow block"):
        with bb.function("f", [x]):
            bb.emit_output(op.exp(x))
    with pytest.raises(WellFormedError, match="ended without emit_func_output"):
        with bb.function("g", [x]):
            bb.emit(op.exp(x))


def test_upper_bounds_from_the_function_attribute_reach_the_analyzer():
    x = Var("x", Tensor(("n",), F32))
    bb = BlockBuilder()
    with bb.function("main", [x], attrs={"tir_var_upper_bound": {"n": 2048}}):
        ctx = bb.context()
        assert ctx.analyzer.upper_bound(x.struct_info.shape[0] * 4) == 8192
        bb.emit_func_output(x)


def test_constants_get_their_struct_info():
    from tessera.ir import Constant

    c = Constant(np.zeros((2, 3), np.float16))
    assert c.struct_info == Tensor((2, 3), "float16")
