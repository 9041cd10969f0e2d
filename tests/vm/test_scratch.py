"""A kernel that needs scratch in device memory declares it as a trailing output: the scratch is
allocated by explicit_allocation and planned into the arena like any tensor."""

import numpy as np
import tessera
from tessera import arith, op
from tessera.ir import BlockBuilder, GlobalVar, IRModule, Tensor, TupleGetItem, Var, interpret
from tessera.tir.ir import Barrier, Buffer, Builtin, Const, For, Load, Local, PrimFunc, Store, binary, from_prim
from tessera.tir.verify import verify_kernel
from tessera.vm import VirtualMachine
from tessera.vm.kernel_runner import default_runner

n = arith.Var("n")
LID = Builtin("local_id", 0)


def reverse_doubled() -> PrimFunc:
    """out[i] = 2 * x[n - 1 - i], staged through scratch by one workgroup."""
    x = Buffer("x", "f32", (n,), storage_dtype="float32")
    out = Buffer("out", "f32", (n,), storage_dtype="float32")
    scratch = Buffer("scratch", "f32", (n,), storage_dtype="float32")
    i, j = Local("i"), Local("j")
    size = from_prim(n)
    body = (
        For(i, LID, size, (Store(scratch, i, binary("*", Load(x, i), Const(2.0, "f32"))),), step=64),
        Barrier("storage"),
        For(j, LID, size, (Store(out, j, Load(scratch, binary("-", binary("-", size, Const(1)), j))),), step=64),
    )
    one = arith.IntImm(1)
    return PrimFunc("reverse_doubled", (x,), (out, scratch), ("n",), body, (64, 1, 1), (one, one, one),
                    attrs={"scratch_outputs": 1, "rule": "handwritten"})


def module() -> IRModule:
    x = Var("x", Tensor(("n",), "float32"))
    bb = BlockBuilder()
    bb.add_func(reverse_doubled(), "reverse_doubled")
    with bb.function("main", [x], attrs={"tir_var_upper_bound": {"n": 256}}):
        both = bb.emit(op.call_tir(GlobalVar("reverse_doubled"), [x], [Tensor((n,), "float32")] * 2, tir_vars=[n]),
                       "both")
        y = bb.emit(TupleGetItem(both, 0), "y")
        bb.emit_func_output(bb.emit(op.exp(y), "z"))
    return bb.get()


def test_scratch_lives_in_the_arena_and_the_vm_runs_it():
    verify_kernel(reverse_doubled(), {"n": 100})
    x = np.linspace(0, 1, 100, dtype=np.float32)
    want = np.exp(2 * x[::-1])
    np.testing.assert_allclose(interpret(module(), "main", x, kernel_runner=default_runner()), want, rtol=1e-6)
    exe = tessera.build(module(), "llvmpipe")
    main = exe.functions["main"]
    tensors = [t for s in main["memory"]["storages"] for t in s["tensors"]]
    assert "both_1" in tensors  # the scratch output has a storage of the plan
    assert main["memory"]["static"]
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x), want, rtol=1e-6)


def test_scratch_storage_is_reused_once_the_kernel_is_done():
    from tessera.transform import Pipeline

    target = tessera.target.Target.preset("llvmpipe")
    plan = Pipeline.default(target)(module())["main"].attr("memory_plan")
    token = {t: s["index"] for s in plan["storages"] for t in s["tensors"]}
    # The scratch (both_1) dies with the launch: z reuses its storage.
    assert token["both_1"] == token["z"]
