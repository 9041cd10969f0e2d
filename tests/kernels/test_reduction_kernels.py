"""Reductions, row operators, matmul, convolution and pooling as kernels on WebGPU, against numpy."""

import numpy as np
import pytest
from harness import NONZERO, SIGNED, SIGNED_GRID, TARGET, build, check_op, rule_on, target_for
from tessera import op
from tessera.ir import Function, Tensor
from tessera.target import Target
from tessera.transform import legalize_ops

F32 = "float32"
# float16 kernels load float16, accumulate and compute in float32 and round the result once. On
# inputs on harness.SIGNED_GRID their sums are exact in float32, and what they compute from a sum
# (a mean, exp, rsqrt) is off by far less than a float16 ulp, so one rounding leaves them within 1 ulp
# of numpy's float64 rounded once.
FLOATS = [("float32", {"rtol": 1e-4, "atol": 1e-4, "domains": SIGNED}),
          ("float16", {"ulps": 1, "atol": 0.0, "domains": SIGNED_GRID})]


def rules(lowered):
    return sorted(f.attrs["rule"] for f in lowered.functions.values() if not isinstance(f, Function))


@pytest.mark.parametrize("dtype,tolerance", FLOATS, ids=["f32", "f16"])
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
def test_reductions_short_and_long(runner, name, dtype, tolerance):
    make = getattr(op, name)
    # A long reduction (n up to 1000) gets a workgroup per output; a short one runs serially.
    lowered, _ = check_op(runner, lambda x: make(x, axis=[1]), [Tensor((3, "n"), dtype)], **tolerance)
    assert rules(lowered) == [rule_on(runner, "workgroup-reduction")]
    lowered, _ = check_op(runner, lambda x: make(x, axis=[0], keepdims=True), [Tensor((5, "n"), dtype)],
                          **tolerance)
    assert rules(lowered) == [rule_on(runner, "injective")]
    check_op(runner, make, [Tensor(("n", 3), dtype)], **tolerance)


@pytest.mark.parametrize("dtype,tolerance", FLOATS, ids=["f32", "f16"])
def test_prod(runner, dtype, tolerance):
    """Factors of either sign and never zero (a zero would end most rows' products); a float32
    product of 5 is off by at most 4 float32 roundings, far below a float16 ulp."""
    check_op(runner, lambda x: op.prod(x, axis=[1]), [Tensor(("n", 5), dtype)], **{**tolerance, "domains": NONZERO})


@pytest.mark.parametrize("name", ["max", "min"])
def test_any_and_all_of_bools(runner, name):
    """max and min of bools (ONNX's ReduceMax/ReduceMin on bool inputs) reduce 0s and 1s in u32."""
    make = getattr(op, name)
    check_op(runner, lambda x: make(x, axis=[1]), [Tensor(("n", 5), "bool")], sizes=(1, 64))
    check_op(runner, lambda x: make(x, axis=[0], keepdims=True), [Tensor(("n", 3), "bool")], sizes=(7,))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions(runner, name, dtype):
    make = getattr(op, name)
    lowered, _ = check_op(runner, lambda x: make(x, axis=1), [Tensor((4, "n"), dtype)])
    assert rules(lowered) == [rule_on(runner, "row-reduction")]
    check_op(runner, lambda x: make(x, axis=0, keepdims=True), [Tensor(("n", 3), dtype)])
    check_op(runner, make, [Tensor(("n", 3), dtype)])
    # Ties go to the first occurrence, as in numpy.
    check_op(runner, lambda x: make(x, axis=1), [Tensor((2, "n"), "int32")],
             inputs=lambda env, rng: [rng.integers(0, 3, (2, env["n"])).astype(np.int32)])


GPU_TARGET = Target("webgpu", features={"shader-f16"})  # workgroup-memory rules, run on llvmpipe all the same
TARGETS = pytest.mark.parametrize("target", [TARGET, GPU_TARGET], ids=["llvmpipe-subgroups", "workgroup-tree"])


@TARGETS
@pytest.mark.parametrize("dtype,tolerance", FLOATS, ids=["f32", "f16"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax(runner, axis, dtype, tolerance, target):
    _, kernels = check_op(runner, lambda x: op.nn.softmax(x, axis=axis), [Tensor(("n", "m"), dtype)], **tolerance,
                          target=target)
    assert bool(kernels[0].attrs.get("subgroups")) == (target_for(runner, target).subgroup_feature is not None)
    check_op(runner, lambda x: op.nn.log_softmax(x, axis=axis), [Tensor(("n", 5), dtype)], **tolerance,
             target=target)


@TARGETS
@pytest.mark.parametrize("dtype,tolerance", FLOATS, ids=["f32", "f16"])
def test_norms(runner, dtype, tolerance, target):
    check_op(runner, op.nn.rms_norm, [Tensor(("n", 576), dtype), Tensor((576,), dtype)], **tolerance,
             target=target)
    if dtype == "float16":
        # layer_norm ends in a sum, (x - mean) * rstd * gamma + beta, that may cancel to near zero,
        # where a float16 ulp is tiny: the float32 error of its terms (below 2^3 in size: standardized
        # values of these rows times |gamma| <= 2, plus |beta| <= 2; about 8 roundings on the way) is
        # at most 8 * 2^3 * 2^-24 = 2^-18, absolute.
        tolerance = {**tolerance, "atol": 2.0**-18}
    check_op(runner, op.nn.layer_norm, [Tensor(("n", "m"), dtype), Tensor(("m",), dtype), Tensor(("m",), dtype)],
             **tolerance, target=target)


@pytest.mark.parametrize("target", [TARGET, GPU_TARGET], ids=["cpu-adapter-rules", "gpu-rules"])
@pytest.mark.parametrize("dtype,tolerance", FLOATS, ids=["f32", "f16"])
def test_matmul_gemv_and_gemm(runner, dtype, tolerance, target):
    # Decode: one row against a weight matrix (GEMV; split-K across threads on GPUs).
    lowered, kernels = check_op(runner, op.matmul, [Tensor((1, 96), dtype), Tensor((96, "n"), dtype)],
                                **tolerance, target=target)
    assert rules(lowered) == ["gemv"]
    assert any(s.scope == "workgroup" for s in kernels[0].scratch) == (not target_for(runner, target).cpu_adapter)
    # Prefill: tiled GEMM; sizes are not tile multiples.
    lowered, _ = check_op(runner, op.matmul, [Tensor(("n", 40), dtype), Tensor((40, "m"), dtype)],
                          **tolerance, sizes=(1, 7, 64, 130), target=target)
    # C targets take f32 GEMMs to their micro-kernels (tir/schedule/cpu_gemm.py).
    gemm = target_for(runner, target).has_extern("tsr_gemm_f32") and dtype == "float32"
    assert rules(lowered) == ["cpu-gemm" if gemm else "gemm"]
    check_op(runner, op.matmul, [Tensor(("n", 64), dtype), Tensor((64, 48), dtype)], **tolerance,
             target=target)
    check_op(runner, op.matmul, [Tensor((2, "n", 8), dtype), Tensor((1, 8, 5), dtype)], **tolerance,
             target=target)


def test_matmul_batched_broadcast_and_vectors(runner):
    check_op(runner, op.matmul, [Tensor((2, 1, "n", 8), F32), Tensor((3, 8, 5), F32)], rtol=1e-4, atol=1e-4)
    check_op(runner, op.matmul, [Tensor(("n",), F32), Tensor(("n", 6), F32)], rtol=1e-4, atol=1e-4)
    check_op(runner, op.matmul, [Tensor((4, "n"), F32), Tensor(("n",), F32)], rtol=1e-4, atol=1e-4)
    check_op(runner, op.matmul, [Tensor(("n", 3), "int32"), Tensor((3, 2), "int32")])


@pytest.mark.parametrize("dtype,tolerance", FLOATS, ids=["f32", "f16"])
def test_conv2d(runner, dtype, tolerance):
    conv = lambda x, w: op.nn.conv2d(x, w, strides=2, padding=1)  # noqa: E731
    check_op(runner, conv, [Tensor((1, 3, "n", 9), dtype), Tensor((4, 3, 3, 3), dtype)], **tolerance)
    # With dilation 2 a 3x3 window spans 5 pixels, so the swept axis starts at 5.
    grouped = lambda x, w: op.nn.conv2d(x, w, groups=2, dilation=2)  # noqa: E731
    check_op(runner, grouped, [Tensor((2, 4, 9, "n"), dtype), Tensor((6, 2, 3, 3), dtype)], **tolerance,
             sizes=(5, 7, 64, 1000))
    # A long reduction (64 channels x 3 x 3) takes the workgroup rule; C targets' f32 convolutions their
    # micro-kernels (tir/schedule/conv.py, tests/kernels/test_conv_kernels.py).
    lowered, _ = check_op(runner, op.nn.conv2d, [Tensor((1, 64, 5, 5), dtype), Tensor((2, 64, 3, 3), dtype)],
                          **tolerance)
    micro = target_for(runner).has_extern("tsr_conv2d_f32") and dtype == "float32"
    assert rules(lowered) == ["conv2d" if micro else rule_on(runner, "workgroup-reduction")]


@pytest.mark.parametrize("dtype,tolerance", FLOATS, ids=["f32", "f16"])
def test_pooling(runner, dtype, tolerance):
    check_op(runner, lambda x: op.nn.max_pool2d(x, pool_size=3, strides=2, padding=1),
             [Tensor((1, 2, "n", 7), dtype)], **tolerance)
    check_op(runner, lambda x: op.nn.avg_pool2d(x, pool_size=3, strides=2, padding=1),
             [Tensor((1, 2, "n", 7), dtype)], **tolerance)
    check_op(runner, lambda x: op.nn.avg_pool2d(x, pool_size=2, strides=2, padding=1, count_include_pad=True),
             [Tensor((1, 2, 6, 6), dtype)], **tolerance)
    # Dilated windows over padding: each output averages only its taps inside the image.
    check_op(runner, lambda x: op.nn.avg_pool2d(x, pool_size=3, strides=1, padding=(2, 1, 0, 2), dilation=(2, 3)),
             [Tensor((1, 2, "n", 9), dtype)], **tolerance, sizes=(4, 7))


def test_unique_becomes_a_runtime_call(runner):
    lowered, kernels = check_op(runner, op.unique, [Tensor(("n",), "int32")])
    assert kernels == []
    assert "R.call_pure_packed(\"tessera.builtin.unique\", x0" in lowered.script()


def test_other_value_dependent_sizes_become_runtime_calls(runner):
    """nonzero, masked_select and arange_dynamic: no kernel, a runtime call the VM splits in two steps
    (tests/vm/test_programs.py and the conformance program cases run them compiled)."""
    cases = [(op.nonzero, [Tensor((3, "n"), "int32")], "tessera.builtin.nonzero"),
             (op.masked_select, [Tensor(("n", 2), F32), Tensor(("n", 2), "bool")], "tessera.builtin.mask_select"),
             (lambda end: op.arange_dynamic(end, start=2, step=3), [Tensor((), "int32")],
              "tessera.builtin.arange")]
    for make, params, function in cases:
        lowered, kernels = check_op(runner, make, params)
        assert kernels == []
        assert f'R.call_pure_packed("{function}"' in lowered.script()


def test_lowered_module_prints_kernel_calls():
    mod = legalize_ops(build(lambda x, w: op.exp(op.matmul(x, w)), [Tensor(("n", 4), F32), Tensor((4, 4), F32)]),
                       TARGET)
    text = mod.script()
    assert 'R.call_tir(cls.matmul, (x0, x1), R.shape([n]), out_sinfo=R.Tensor((n, 4), dtype="float32"))' in text
