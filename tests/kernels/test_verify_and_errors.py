"""The kernel verifier rejects unsafe kernels; unsupported dtypes are compile errors that say why."""

import pytest
from harness import build
from tessera import arith, op
from tessera.ir import Tensor
from tessera.op.lowering import LegalizeError
from tessera.target import Target
from tessera.tir.ir import Barrier, Buffer, Builtin, Const, IfThen, Load, Local, PrimFunc, Store, binary
from tessera.tir.verify import KernelVerifyError, verify_kernel
from tessera.transform import legalize_ops

n = arith.Var("n")
LID = Builtin("local_id", 0)


SRC = Buffer("src", "f32", (n,), storage_dtype="float32")
DST = Buffer("dst", "f32", (n,), storage_dtype="float32")


ONE_WORKGROUP = (arith.IntImm(1),) * 3


def kernel(body, scratch=()):
    return PrimFunc("k", (SRC,), (DST,), ("n",), tuple(body), (64, 1, 1), ONE_WORKGROUP, tuple(scratch))


def test_unguarded_access_is_rejected_and_guarded_access_passes():
    bad = kernel([Store(DST, LID, Load(SRC, LID))])
    with pytest.raises(KernelVerifyError, match=r"read of src\[T.local_id.x\] may fall outside \[0, 7\) "
                       r"\(index in \[0, 63\] with n = 7\)"):
        verify_kernel(bad, {"n": 7})
    guarded = kernel([IfThen(binary("<", LID, Local("sym_n")), (Store(DST, LID, Load(SRC, LID)),))])
    verify_kernel(guarded, {"n": 7})
    verify_kernel(guarded, {"n": 1000})


def test_barrier_under_thread_dependent_if_is_rejected():
    shared = Buffer("tile", "f32", (arith.IntImm(64),), "workgroup")
    func = kernel([IfThen(binary("<", LID, Const(32)), (Barrier(),))], scratch=(shared,))
    with pytest.raises(KernelVerifyError, match=r"barrier under `if T.local_id.x < 32`"):
        verify_kernel(func, {"n": 7})
    uniform = kernel([IfThen(binary("<", Builtin("workgroup_id", 0), Const(1)), (Barrier(),))])
    verify_kernel(uniform, {"n": 7})


def test_dtypes_the_target_lacks_are_compile_errors():
    mod = build(op.exp, [Tensor(("n",), "float16")])
    with pytest.raises(LegalizeError, match=r"R.exp: dtype float16 is not supported by target webgpu "
                       r"\(it needs the shader-f16 feature\)"):
        legalize_ops(mod, Target("webgpu"))
    legalize_ops(mod, Target("webgpu", features={"shader-f16"}))
    mod = build(op.exp, [Tensor(("n",), "float64")])
    with pytest.raises(LegalizeError, match="R.exp: dtype float64 is not supported by target llvmpipe"):
        legalize_ops(mod, Target.preset("llvmpipe"))


def test_unknown_shapes_cannot_become_kernels():
    mod = build(op.exp, [Tensor(dtype="float32", ndim=2)])
    with pytest.raises(LegalizeError, match=r"cannot legalize R.exp: argument x0 has tensor of ndim 2 float32; "
                       r"a kernel needs a known shape and dtype \(add R.match_cast\)"):
        legalize_ops(mod, Target.preset("llvmpipe"))


def test_targets_and_presets():
    assert Target.preset("swiftshader").limit("maxStorageBuffersPerShaderStage") == 10
    assert Target("webgpu").limit("maxComputeInvocationsPerWorkgroup") == 256
    assert Target.preset("webgpu-f16").supports_dtype("float16")
    assert Target.preset("metal").limit("maxComputeWorkgroupStorageSize") == 32768
    with pytest.raises(ValueError, match="unknown target preset 'no-such-gpu'"):
        Target.preset("no-such-gpu")


def test_operators_without_a_lowering_for_the_target_are_named():
    mod = build(lambda x, g, b: op.nn.layer_norm(x, g, b, axes=[0]),
                [Tensor((4, "n"), "float32"), Tensor((4,), "float32"), Tensor((4,), "float32")])
    with pytest.raises(LegalizeError, match=r"cannot legalize R.nn.layer_norm: kernels normalize over trailing "
                       r"axes, got axes \(0,\) of rank 2 \(in out: "):
        legalize_ops(mod, Target.preset("llvmpipe"))


def test_no_kernel_needs_more_storage_buffers_than_the_target_allows(runner):
    import numpy as np
    from tessera.ir import Function, interpret
    from tessera.transform import fuse_ops, fuse_tir

    # A concat of 9 tensors needs 10 bindings: on WebGPU's default 8 it becomes two kernels.
    parts = [Tensor(("n", 1), "float32") for _ in range(9)]
    mod = build(lambda *xs: op.concat(tuple(xs), axis=1), parts)
    lowered = legalize_ops(mod, Target("webgpu"))
    kernels = [f for f in lowered.functions.values() if not isinstance(f, Function)]
    assert sorted(len(k.params) for k in kernels) == [4, 8]  # 7 parts + output, then that result + 2 parts + output
    xs = [np.full((3, 1), i, np.float32) for i in range(9)]
    np.testing.assert_array_equal(interpret(lowered, "main", *xs, kernel_runner=runner), np.concatenate(xs, axis=1))
    # Fusion stops growing a group before its kernel would need more bindings than allowed.
    wide = build(lambda *xs: op.exp(op.add(op.add(op.add(xs[0], xs[1]), op.add(xs[2], xs[3])),
                                          op.add(op.add(xs[4], xs[5]), op.add(xs[6], xs[7])))), parts[:8])
    fused = legalize_ops(fuse_tir(fuse_ops(wide, Target("webgpu")), Target("webgpu")), Target("webgpu"))
    assert all(len(f.params) <= 8 for f in fused.functions.values() if not isinstance(f, Function))


def test_a_micro_kernel_span_is_checked_whole_and_other_languages_refuse_it():
    """An Extern reads through Span(buffer, start, extent): the verifier checks the first and the
    last element of the range; a language without the micro-kernel names it instead of guessing."""
    from tessera.codegen import CodegenError
    from tessera.codegen.wgsl import emit_wgsl
    from tessera.tir.ir import Declare, Evaluate, Extern, Span

    def reading(start, extent):
        value = Local("v", "f32")
        call = Extern("tsr_dot_q4_1_q8", (Span(SRC, start, extent),), "f32")
        guard = binary("<", LID, Const(1))
        return kernel([IfThen(guard, (Declare(value, call), Store(DST, Const(0), value)))])

    verify_kernel(reading(Const(0), Local("sym_n")), {"n": 7})
    with pytest.raises(KernelVerifyError, match=r"span of src\[\(1 \+ sym_n\) - 1\] may fall outside \[0, 7\) \(index in \[7, 7\]"):
        verify_kernel(reading(Const(1), Local("sym_n")), {"n": 7})
    with pytest.raises(KernelVerifyError, match="may be empty"):
        verify_kernel(reading(Const(0), Const(0)), {"n": 7})
    to_output = kernel([Evaluate(Extern("tsr_quantize_q8", (Span(DST, Const(0), Const(1)),), "void"))])
    with pytest.raises(KernelVerifyError, match="the output dst is passed to a micro-kernel"):
        verify_kernel(to_output, {"n": 7})
    with pytest.raises(CodegenError, match="no micro-kernel 'tsr_dot_q4_1_q8'"):
        emit_wgsl(reading(Const(0), Local("sym_n")))
