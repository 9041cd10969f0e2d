"""The OpenCL C backend: operators as OpenCL C kernels on PoCL (this machine's CPU) against numpy,
at sizes that are not multiples of any tile (1, 7, 64, 1000), plus what the emitted source says."""

import numpy as np
import pytest
from harness import NONZERO, SIGNED, SIGNED_GRID, Domain, build, check_op
from tessera import op
from tessera.codegen import get_backend
from tessera.ir import Function, PrimValue, Tensor
from tessera.target import Target
from tessera.transform import legalize_ops

F32, F16 = "float32", "float16"


@pytest.fixture(scope="module")
def opencl():
    from tessera.vm.opencl_runner import OpenCLKernelRunner

    return OpenCLKernelRunner()  # make setup installs PoCL: a missing device fails, never skips


def kernels_of(make, params, target):
    mod = legalize_ops(build(make, params), target)
    return [f for f in mod.functions.values() if not isinstance(f, Function)]


def opencl_source(make, params, target=None):
    target = target or Target.preset("pocl")
    compiled = get_backend("opencl").compile(kernels_of(make, params, target), target)
    return "\n".join(source.decode() for source in compiled.modules.values()), compiled


CASES = {
    "elementwise": (lambda a, b: op.multiply(op.exp(a), op.add(b, a)), [Tensor(("n", 5), F32), Tensor((5,), F32)]),
    "unary_math": (lambda a: op.nn.gelu_tanh(op.nn.gelu(op.sqrt(op.abs(a)))), [Tensor(("n", 3), F32)]),
    "vectorized": (lambda a, b: op.nn.silu(op.subtract(a, b)), [Tensor(("n", 8), F32)] * 2),
    "compare_where": (lambda a, b: op.where(op.greater(a, b), a, op.negative(b)), [Tensor(("n", 8), F32)] * 2),
    "integer_floordiv": (lambda a, b: op.floor_divide(op.negative(a), b), [Tensor(("n", 3), "int32")] * 2,
                         [SIGNED, NONZERO]),  # numerators of either sign and zero, divisors of either sign
    "sum_rows": (lambda a: op.sum(a, axis=[1]), [Tensor(("n", 300), F32)]),
    "max_columns": (lambda a: op.max(a, axis=[0]), [Tensor(("n", 37), F32)]),
    "softmax": (op.nn.softmax, [Tensor(("n", 300), F32)]),
    "rms_norm": (lambda x, w: op.nn.rms_norm(x, w, axes=[-1]), [Tensor(("n", 64), F32), Tensor((64,), F32)]),
    "gemv": (op.matmul, [Tensor((1, 96), F32), Tensor((96, "n"), F32)]),
    "gemm": (op.matmul, [Tensor(("n", 70), F32), Tensor((70, 33), F32)]),
    "transpose": (op.permute_dims, [Tensor(("n", 37), F32)]),
    "concat_split": (lambda a, b: op.split(op.concat((a, b), axis=1), indices_or_sections=[2], axis=1),
                     [Tensor(("n", 3), F32), Tensor(("n", 4), F32)]),
    "take": (lambda w, i: op.take(w, i, axis=0), [Tensor((50, 8), F32), Tensor(("n",), "int32")],
             [SIGNED, Domain(0.0, 0.0, (0, 49))]),  # indices into the 50 rows
    "int64_arange": (lambda x: op.add(op.arange(start=0, end=7, step=1, dtype="int64"), op.astype(x, dtype="int64")),
                     [Tensor((7,), "int32")]),
    "argmax_bool": (lambda a: op.logical_and(op.greater(op.argmax(a, axis=1), op.argmin(a, axis=1)),
                                             op.not_equal(op.argmax(a, axis=1), op.argmin(a, axis=1))),
                    [Tensor(("n", 30), F32)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_operators_as_opencl_kernels(opencl, name):
    make, params, *domains = CASES[name]
    check_op(opencl, make, params, target=opencl.target, rtol=1e-4, atol=1e-4, domains=domains[0] if domains else SIGNED)


# Each case with the float16 ulps it holds (harness.assert_within_ulps). Every kernel computes in
# float and rounds its float16 result once (1 ulp); a case of two kernels also carries the first
# one's rounding (1 ulp of its result, at most 2^-10 of it) through the second, as numpy's reference
# of the same two operators does. Inputs on harness.SIGNED_GRID: the GEMM's sums are exact in float.
F16_CASES = {
    # silu(y) for y = exp(a) > 0 has a condition number below 1.3: 1.3 * 2^-10 of the result, at
    # most 2.6 of its ulps (at least 2^-11 of it), plus its own 1: 4.
    "unary": (lambda a: op.nn.silu(op.exp(a)), [Tensor(("n", 3), F16)], 4),
    # A product passes tanh's 2^-10 through as it is: 2 ulps of the product, plus its own 1: 3.
    "vectorized": (lambda a, b: op.multiply(op.tanh(a), b), [Tensor(("n", 8), F16)] * 2, 3),
    "casts": (lambda a: op.astype(op.add(op.astype(a, dtype=F32), op.astype(a, dtype=F32)), dtype=F16),
              [Tensor(("n", 4), F16)], 1),
    "softmax": (op.nn.softmax, [Tensor(("n", 100), F16)], 1),
    "gemm": (op.matmul, [Tensor(("n", 40), F16), Tensor((40, 9), F16)], 1),
    # The rest move, compare or select values: exact.
    "transpose": (lambda x: op.permute_dims(x, axes=[0, 2, 1]), [Tensor((3, "n", 33), F16)], 0),
    # With cl_khr_fp16 a half4 comparison gives a short4 mask and select on half4 wants one.
    "compare": (lambda a, b: op.logical_and(op.greater(a, b), op.less_equal(a, op.multiply(b, b))),
                [Tensor(("n", 8), F16)] * 2, 0),
    "where_compare": (lambda a, b: op.where(op.greater(a, b), a, b), [Tensor(("n", 8), F16)] * 2, 0),
    "where_bool": (op.where, [Tensor(("n", 8), "bool"), Tensor(("n", 8), F16), Tensor(("n", 8), F16)], 0),
    "bool_astype": (lambda c, a: op.add(op.astype(c, dtype=F16), op.astype(op.astype(a, dtype="bool"), dtype=F16)),
                    [Tensor(("n", 8), "bool"), Tensor(("n", 8), F16)], 0),
}


@pytest.mark.parametrize("name", sorted(F16_CASES))
def test_float16_tensors_computed_in_float(opencl, name):
    """PoCL has no cl_khr_fp16: halves are loaded with vload_half and stored with vstore_half."""
    make, params, ulps = F16_CASES[name]
    check_op(opencl, make, params, target=opencl.target, ulps=ulps, atol=0.0, domains=SIGNED_GRID)


def test_the_llm_kernels_as_opencl(opencl):
    """What a Llama step needs beyond the above: quantized GEMV/GEMM and embedding rows (f16 block
    scales read from words), the KV cache write (in place) and the sampler (barriers, u32 bit casts)."""
    from test_quantized_kernels import quantized

    target = opencl.target
    for fmt in ("q4_0", "q4_1", "q8_0"):
        words, _ = quantized(fmt, 42, 128)
        check_op(opencl, lambda x, w, f=fmt: op.quantized_matmul(x, w, format=f, k=128),
                 [Tensor(("m", 128), F32), Tensor((42, words.shape[1]), "uint32")], target=target,
                 rtol=1e-4, atol=1e-4, inputs=lambda env, rng, w=words: [
                     rng.standard_normal((env["m"], 128)).astype(np.float32), w])
    table, _ = quantized("q8_0", 30, 64)
    check_op(opencl, lambda w, i: op.quantized_take(w, i, format="q8_0", k=64),
             [Tensor((30, table.shape[1]), "uint32"), Tensor(("n",), "int32")], target=target, rtol=1e-5,
             atol=1e-5, inputs=lambda env, rng: [table, rng.integers(0, 30, env["n"]).astype(np.int32)])
    check_op(opencl, lambda c, v: op.kv_cache_write(c, v, PrimValue(3)),
             [Tensor(("n + 3", 2, 4), F32), Tensor(("n", 2, 4), F32)], target=target, rtol=0, atol=0)

    def sampler_inputs(env, rng):
        return [(rng.standard_normal((1, 1000)) * 3).astype(np.float32), rng.integers(0, 1000, env["m"]).astype(np.int32),
                np.array([0.8, 40, 0.9, 1.2, rng.random()], np.float32)]

    for greedy in (True, False):
        check_op(opencl, lambda x, h, p, g=greedy: op.sample_token(x, h, p, greedy=g),
                 [Tensor((1, 1000), F32), Tensor(("m",), "int32"), Tensor((5,), F32)], target=target,
                 inputs=sampler_inputs)


# -- the source as emitted ------------------------------------------------------------------------


def test_a_kernel_states_its_workgroup_size_and_takes_scalars_after_buffers():
    source, compiled = opencl_source(op.nn.softmax, [Tensor(("n", 300), F32)])
    assert "__kernel __attribute__((reqd_work_group_size(" in source
    assert "__global float* in0, __global float* out0, int sym_n)" in source
    assert "__local float red[" in source and "barrier(CLK_LOCAL_MEM_FENCE);" in source
    (kernel,) = compiled.kernels
    assert kernel.module == f"kernels/000_{kernel.entry_point}.cl"
    assert kernel.abi["scalars"] == [{"name": "n", "passed": "argument", "position": 2}]
    assert kernel.requirements["features"] == []


def test_vectors_are_vload4_and_halves_are_vload_half_without_cl_khr_fp16():
    source, _ = opencl_source(lambda a, b: op.add(a, b), [Tensor(("n", 8), F32)] * 2)
    assert "vstore4((vload4(group, in0) + vload4(group, in1)), group, out0);" in source
    source, compiled = opencl_source(lambda a, b: op.add(a, b), [Tensor(("n", 8), F16)] * 2)
    assert "__global half* in0" in source and "vload_half4(" in source and "vstore_half4(" in source
    assert "cl_khr_fp16" not in source
    assert compiled.kernels[0].requirements["features"] == ["shader-f16"]


def test_with_cl_khr_fp16_halves_are_computed_as_half():
    target = Target("opencl", {"shader-f16", "cl_khr_fp16"})
    source, compiled = opencl_source(lambda a: op.exp(a), [Tensor(("n", 3), F16)], target)
    assert source.startswith("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    assert "half" in source and "vload_half" not in source
    assert compiled.kernels[0].requirements["features"] == ["shader-f16", "cl_khr_fp16"]


@pytest.mark.parametrize("name", sorted(F16_CASES))
def test_half_arithmetic_kernels_compile_where_cl_khr_fp16_is(name, tmp_path):
    """No device here has cl_khr_fp16, so clang's OpenCL front end (for SPIR) checks those kernels;
    without the pragma it rejects a half load or half arithmetic, so the check has teeth."""
    import subprocess

    make, params, _ = F16_CASES[name]
    source, _ = opencl_source(make, params, Target("opencl", {"shader-f16", "cl_khr_fp16"}))
    path = tmp_path / "kernel.cl"
    path.write_text(source)
    result = subprocess.run(["clang", "-x", "cl", "-cl-std=CL1.2", "-target", "spir64", "-Xclang",
                             "-finclude-default-header", "-fsyntax-only", "-Werror", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + source


def test_a_vector_cast_to_bool_is_true_in_every_nonzero_lane():
    """No operator casts to bool (astype compares with zero), but a tir Cast may: a lane of 1 or
    0.5 is true, and true is -1 in the mask that select reads by its sign bit."""
    from tessera import arith
    from tessera.codegen.opencl import emit_opencl
    from tessera.tir.ir import Buffer, Builtin, Cast, Const, Load, PrimFunc, Select, Store
    from tessera.vm.devices import View
    from tessera.vm.devices.opencl import OpenCLDevice

    x, y = Buffer("x", "i32", (8,), storage_dtype="int32"), Buffer("y", "f32", (8,), storage_dtype="float32")
    outs = (Buffer("x_nonzero", "u32", (8,), storage_dtype="uint32"),
            Buffer("y_nonzero", "u32", (8,), storage_dtype="uint32"))
    lane = Builtin("local_id", 0)
    body = tuple(Store(out, lane, Select(Cast(Load(src, lane, 4), "boolx4"), Const(1, "u32x4"), Const(0, "u32x4"),
                                         "u32x4"), 4) for src, out in zip((x, y), outs))
    func = PrimFunc("nonzero", (x, y), outs, (), body, (2, 1, 1), (arith.IntImm(1),) * 3)
    source = emit_opencl(func)
    assert "(vload4(lid_0, x) != ((int4)(0)))" in source.replace("((int)get_local_id(0))", "lid_0")

    device = OpenCLDevice.shared()
    xs = np.array([1, 2, 0, -1, 0, 1 << 30, 3, 0], np.int32)
    ys = np.array([0.5, 0, -0.25, 1e-30, 0, 2, -0.0, 7], np.float32)
    buffers = [device.allocate_with(xs.tobytes()), device.allocate_with(ys.tobytes()), device.allocate(32),
               device.allocate(32)]
    (kernel,) = device.load_kernels([{"name": "nonzero", "backend": "opencl", "module": "nonzero.cl",
                                      "entry_point": "k_nonzero", "workgroup_size": [2, 1, 1]}],
                                    {"nonzero.cl": source.encode()})
    device.launch(device.bind(kernel, [View(b, 0, 32) for b in buffers]), [], [1, 1, 1])
    for buffer, values in zip(buffers[2:], (xs, ys)):
        np.testing.assert_array_equal(np.frombuffer(device.read_back(View(buffer, 0, 32)), np.uint32), values != 0)


def test_subgroups_are_a_codegen_error_naming_the_kernel():
    from tessera import arith
    from tessera.codegen import CodegenError
    from tessera.codegen.opencl import emit_opencl
    from tessera.tir.ir import Buffer, Builtin, Cast, PrimFunc, Store

    out = Buffer("out", "f32", (1,), storage_dtype="float32")
    func = PrimFunc("lanes", (), (out,), (), (Store(out, Builtin("local_id", 0), Cast(Builtin("subgroup_size", 0), "f32")),),
                    (1, 1, 1), (arith.IntImm(1),) * 3)
    with pytest.raises(CodegenError, match="kernel lanes: OpenCL C 1.2 has no builtin subgroup_size"):
        emit_opencl(func)


def test_names_that_are_opencl_builtins_are_renamed():
    from tessera.codegen.opencl import OpenCLRenderer

    renderer = OpenCLRenderer.__new__(OpenCLRenderer)
    assert [renderer.name(n) for n in ("min", "local", "float4", "acc")] == ["min_", "local_", "float4_", "acc"]


def test_targets_are_registered():
    assert Target.preset("pocl").backend == "opencl" and Target.preset("pocl").cpu_adapter
    assert Target.preset("opencl").limit("maxComputeInvocationsPerWorkgroup") == 256
    assert Target.preset("opencl").supports_dtype("float16")
