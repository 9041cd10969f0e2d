"""Dead-code elimination and constant folding, shown as before/after scripts plus numbers."""

import numpy as np
from tessera import op
from tessera.ir import BlockBuilder, Constant, Tensor, Var, interpret, well_formed
from tessera.transform import dead_code_elimination, fold_constants


def module():
    x = Var("x", Tensor(("n", 2), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(op.add(Constant(np.array([1, 2], np.float32)), Constant(np.array([3, 4], np.float32))), "a")
            scale = bb.emit(op.exp(a), "scale")
            bb.emit(op.negative(x), "unused")
            out = bb.emit_output(op.multiply(x, scale), "out")
        bb.emit_func_output(out)
    return bb.get()


def test_fold_then_dce():
    before = module()
    after = dead_code_elimination(fold_constants(before))
    well_formed(after)
    lines = [line.strip() for line in after.script().splitlines() if ": R." in line and " = " in line]
    assert lines == [
        f'out: R.Tensor((n, 2), dtype="float32") = R.multiply(x, R.const([{float(np.float32(np.exp(4)))!r}, '
        f'{float(np.float32(np.exp(6)))!r}], "float32"))',
    ]
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_allclose(interpret(after, "main", x), interpret(before, "main", x), rtol=1e-6)


def test_dce_keeps_what_the_result_needs_and_impure_calls():
    before = module()
    after = dead_code_elimination(before)
    names = [b.var.name_hint for block in after["main"].body.blocks for b in block.bindings]
    assert names == ["a", "scale", "out"]


def test_normalize_turns_a_hand_built_nested_module_into_a_deduced_one():
    from tessera.ir import Call, DataflowBlock, Function, IRModule, SeqExpr, VarBinding
    from tessera.transform import normalize

    x = Var("x", Tensor(("n", 4), "float32"))
    gv = Var("gv", Tensor(dtype="float32", ndim=-1))  # a hand-written, vague annotation
    nested = op.exp(op.add(x, x))  # a call inside a call, no struct info anywhere
    assert nested.struct_info is None and isinstance(nested.args[0], Call)
    func = Function((x,), SeqExpr((DataflowBlock((VarBinding(gv, nested),)),), gv), Tensor(dtype="float32", ndim=2))
    mod = normalize(IRModule({"main": func}))
    well_formed(mod)
    lines = [line.strip() for line in mod.script().splitlines() if ": R." in line and " = " in line]
    assert lines == ['lv0: R.Tensor((n, 4), dtype="float32") = R.add(x, x)',
                     'gv: R.Tensor((n, 4), dtype="float32") = R.exp(lv0)']
    x_value = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(interpret(mod, "main", x_value), np.exp(2 * x_value), rtol=1e-6)
