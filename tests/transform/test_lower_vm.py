"""The lowering passes before the VM, each shown on a small module and checked numerically."""

import numpy as np
from tessera import op
from tessera.ir import BlockBuilder, DataflowBlock, Tensor, Var, interpret, well_formed
from tessera.target import Target
from tessera.transform import (
    explicit_allocation,
    legalize_ops,
    plan_memory,
    to_non_dataflow,
    vm_shape_lowering,
)
from tessera.vm.kernel_runner import default_runner

TARGET = Target.preset("llvmpipe")


def legalized():
    x = Var("x", Tensor(("n", 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x], attrs={"tir_var_upper_bound": {"n": 64}}):
        with bb.dataflow():
            lv = bb.emit(op.exp(x), "lv")
            out = bb.emit_output(op.negative(lv), "out")
        bb.emit_func_output(out)
    return bb.get(), legalize_ops(bb.get(), TARGET)


def bindings(mod):
    return [line.strip() for line in mod.script().splitlines() if " = " in line and ": R." in line]


def test_each_lowering_step_keeps_the_numbers():
    original, mod = legalized()
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    want = interpret(original, "main", x)
    steps = [to_non_dataflow, vm_shape_lowering, explicit_allocation, lambda m: plan_memory(m)]
    for step in steps:
        mod = step(mod)
        well_formed(mod)
        np.testing.assert_allclose(interpret(mod, "main", x, kernel_runner=default_runner()), want, rtol=1e-6)
    assert not any(isinstance(b, DataflowBlock) for b in mod["main"].body.blocks)
    assert bindings(mod) == [
        'x_checked: R.Tensor((n, 4), dtype="float32") = R.vm.check(x, sinfo_args=R.Tensor((n, 4), dtype="float32"))',
        "storage0: R.Object = R.memory.alloc_storage(R.shape([1024]), token=0)",
        'lv: R.Tensor((n, 4), dtype="float32") = R.memory.alloc_tensor(storage0, R.shape([n, 4]), dtype="float32")',
        "lv_done: R.Object = R.call_tir_dps(cls.exp, (x, lv), R.shape([n]))",
        "storage1: R.Object = R.memory.alloc_storage(R.shape([1024]), token=1)",
        'out: R.Tensor((n, 4), dtype="float32") = R.memory.alloc_tensor(storage1, R.shape([n, 4]), '
        'dtype="float32")',
        "out_done: R.Object = R.call_tir_dps(cls.negative, (lv, out), R.shape([n]))",
    ]
