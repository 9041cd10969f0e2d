"""unalias_kernel_args: a launch never binds one tensor twice (browsers reject overlapping writable bindings)."""

import numpy as np
import tessera
from tessera import op
from tessera.ir import BlockBuilder, PrimValue, Tensor, Var, interpret
from tessera.target import Target
from tessera.tir.ir import PrimFunc
from tessera.transform import legalize_ops, unalias_kernel_args
from tessera.vm import VirtualMachine

TARGET = Target.preset("llvmpipe")


def module():
    """concat((x, x)): one tensor passed twice; kv_cache_write: an output that is its input."""
    x = Var("x", Tensor(("n", 4), "float32"))
    cache = Var("cache", Tensor((8, 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x, cache], attrs={"tir_var_upper_bound": {"n": 8}}):
        with bb.dataflow():
            doubled = bb.emit(op.concat((x, x), axis=1), "doubled")
            written = bb.emit(op.kv_cache_write(op.reshape(cache, [8, 1, 4]), op.reshape(x, ["n", 1, 4]),
                                                PrimValue(2)), "written")
            out = bb.emit_output(op.add(op.sum(doubled), op.sum(written)), "out")
        bb.emit_func_output(out)
    return bb.get()


def test_repeated_and_in_place_arguments_become_one_binding():
    before = legalize_ops(module(), TARGET)
    after = unalias_kernel_args(before)
    kernels = {name: f for name, f in after.functions.items() if isinstance(f, PrimFunc)}
    concat = kernels["concat_unaliased"]
    assert [b.name for b in concat.inputs] == ["in0"]  # in1 was the same tensor
    write = kernels["kv_cache_write"]
    assert (len(write.inputs), write.outputs, write.attrs["result_is_input"]) == (2, (), 0)
    calls = [b.value for b in after["main"].body.blocks[0].bindings
             if getattr(getattr(b.value, "op", None), "name", "") == "call_tir"]
    for call in calls:
        args = call.args[1].fields
        assert len({id(a) for a in args}) == len(args)


def test_the_built_executable_binds_each_launch_to_distinct_memory_and_computes_the_same():
    exe = tessera.build(module(), TARGET)
    function = exe.functions["main"]
    for launch in (c for c in function["code"] if c["op"] == "launch"):
        registers = launch["args"] + launch["outs"]
        assert len(set(registers)) == len(registers), exe.kernels[launch["kernel"]]["name"]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    cache = np.ones((8, 4), np.float32)
    want = interpret(module(), "main", x, cache.copy())
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x, cache), want, rtol=1e-6)
    np.testing.assert_allclose(want, 2 * x.sum() + x.sum() + 5 * 4, rtol=1e-6)
