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
