"""The SPIR-V backend: every operator's kernels pass spirv-val for Vulkan 1.1, read back by name, and
declare a capability only when they use it. (Numbers come from the kernel tests on the Vulkan device.)"""

import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
from kernels.harness import build
from tessera import op
from tessera.codegen import get_backend
from tessera.ir import Function, PrimValue, Shape, Tensor
from tessera.op.elementwise import BINARY, COMPARISON, UNARY
from tessera.target import SHADER_F16, Target
from tessera.transform import legalize_ops

pytestmark = pytest.mark.skipif(shutil.which("spirv-val") is None, reason="spirv-tools is not installed")

F32, F16 = "float32", "float16"


def _named(name):
    return op.nn.__getattr__(name[3:]) if name.startswith("nn.") else getattr(op, name)


def _elementwise(dtype):
    cases = [(f"{name}-{dtype}", _named(name), [Tensor(("n", 3), dtype)]) for name in sorted(UNARY)]
    cases += [(f"{name}-vec4-{dtype}", _named(name), [Tensor(("n", 8), dtype)]) for name in sorted(UNARY)]
    cases += [(f"{name}-{dtype}", getattr(op, name), [Tensor(("n", "m"), dtype), Tensor((1, "m"), dtype)])
              for name in sorted(BINARY)]
    cases += [(f"{name}-vec4-{dtype}", getattr(op, name), [Tensor(("n", 8), dtype)] * 2) for name in sorted(BINARY)]
    return cases


def _quantized_matmul(fmt, m, n, k=128):
    words_per_row = {"q4_0": 18 * k // 32 // 4, "q4_1": 20 * k // 32 // 4, "q8_0": 34 * k // 32 // 4}[fmt]
    return (f"quantized_matmul-{fmt}-m{m}", lambda x, w: op.quantized_matmul(x, w, format=fmt, k=k),
            [Tensor((m, k), F32), Tensor((n, words_per_row), "uint32")])


# (id, make, params) for every operator that has kernels; the f16 ones only where the target has shader-f16.
COMMON = [
    *_elementwise(F32),
    *[(f"{name}-int", getattr(op, name), [Tensor(("n",), dt)] * 2)
      for name in ("add", "subtract", "multiply", "divide", "floor_divide", "maximum") for dt in ("int32", "int64")],
    *[(name, getattr(op, name), [Tensor(("n", 2), "bool" if name.startswith("logical") else F32),
                                 Tensor((2,), "bool" if name.startswith("logical") else F32)])
      for name in sorted(COMPARISON)],
    *[(f"{name}-vec4", getattr(op, name), [Tensor(("n", 8), "bool" if name.startswith("logical") else F32)] * 2)
      for name in sorted(COMPARISON)],
    *[(f"astype-{a}-{b}", lambda x, b=b: op.astype(x, dtype=b), [Tensor(("n",), a)])
      for a, b in [(F32, "int32"), ("int32", F32), (F32, "bool"), ("bool", F32), ("int32", "uint32")]],
    *[(f"astype-vec4-{a}-{b}", lambda x, b=b: op.astype(x, dtype=b), [Tensor(("n", 4), a)])
      for a, b in [("bool", F32), ("int32", F32), (F32, "bool")]],
    ("clip-relu6", lambda x: op.clip(x, min=0.0, max=6.0), [Tensor(("n", 3), F32)]),
    ("clip-int", lambda x: op.clip(x, min=1.5, max=2.5), [Tensor(("n", 3), "int32")]),
    ("clip-int64", lambda x: op.clip(x, min=2), [Tensor(("n", 3), "int64")]),
    *[(f"where-{dt}", op.where, [Tensor(("n", 1), "bool"), Tensor((1, 5), dt), Tensor(("n", 5), dt)])
      for dt in (F32, "int64")],
    ("where-vec4", op.where, [Tensor(("n", 4), "bool")] + [Tensor(("n", 4), F32)] * 2),
    ("reshape", lambda x: op.reshape(x, [-1, 2]), [Tensor(("n", 4), F32)]),
    ("flatten", op.flatten, [Tensor(("n", 3, 2), F32)]),
    ("expand_dims", lambda x: op.expand_dims(x, axis=[0, 2]), [Tensor(("n", 3), F32)]),
    ("squeeze", lambda x: op.squeeze(x, axis=[1]), [Tensor(("n", 1, 3), F32)]),
    ("permute_dims", lambda x: op.permute_dims(x, axes=[2, 0, 1]), [Tensor(("n", 3, "m"), F32)]),
    ("transpose", op.permute_dims, [Tensor(("n", "m"), F32)]),
    ("concat", lambda a, b: op.concat((a, b), axis=1), [Tensor(("n", 3), F32), Tensor(("n", 2), F32)]),
    ("split", lambda x: op.split(x, indices_or_sections=[1, 3], axis=1), [Tensor(("n", 5), F32)]),
    *[(f"take-{dt}", lambda w, i: op.take(w, i, axis=0), [Tensor((50, 8), F32), Tensor(("n",), dt)])
      for dt in ("int32", "int64")],
    ("strided_slice", lambda x: op.strided_slice(x, axes=[0], begin=[4], end=[0], strides=[-1]),
     [Tensor((8, "n"), F32)]),
    ("broadcast_to", lambda x, s: op.broadcast_to(x, s), [Tensor((1, 4), F32), Shape(["n", 4])]),
    *[(f"creation-{dt}", lambda x, dt=dt: op.full([3, 4], fill_value=3, dtype=dt), [Tensor(("n",), F32)])
      for dt in (F32, "int32", "int64", "bool")],
    ("zeros", lambda x: op.zeros([4], dtype=F32), [Tensor(("n",), F32)]),
    ("ones", lambda x: op.ones([3, 4], dtype=F32), [Tensor(("n",), F32)]),
    ("arange", lambda x: op.arange(start=1, end=9, step=2, dtype="int64"), [Tensor(("n",), F32)]),
    ("kv_cache_write", lambda c, v: op.kv_cache_write(c, v, PrimValue(3)),
     [Tensor(("n + 3", 2, 4), F32), Tensor(("n", 2, 4), F32)]),
    *[(f"{name}-{axes}", lambda x, name=name, axes=axes: getattr(op, name)(x, axis=[axes]), [Tensor((3, "n"), dt)])
      for name in ("sum", "mean", "max", "min") for axes in (0, 1) for dt in (F32,)],
    ("sum-int", lambda x: op.sum(x, axis=[1]), [Tensor((3, "n"), "int32")]),
    ("prod", lambda x: op.prod(x, axis=[1]), [Tensor(("n", 5), F32)]),
    *[(f"{name}-{dt}", lambda x, name=name: getattr(op, name)(x, axis=1), [Tensor((4, "n"), dt)])
      for name in ("argmax", "argmin") for dt in (F32, "int32")],
    ("softmax", op.nn.softmax, [Tensor(("n", "m"), F32)]),
    ("softmax-axis0", lambda x: op.nn.softmax(x, axis=0), [Tensor(("n", "m"), F32)]),
    ("log_softmax", op.nn.log_softmax, [Tensor(("n", 5), F32)]),
    ("rms_norm", op.nn.rms_norm, [Tensor(("n", 576), F32), Tensor((576,), F32)]),
    ("layer_norm", op.nn.layer_norm, [Tensor(("n", "m"), F32), Tensor(("m",), F32), Tensor(("m",), F32)]),
    ("gemv", op.matmul, [Tensor((1, 96), F32), Tensor((96, "n"), F32)]),
    ("gemm", op.matmul, [Tensor(("n", 64), F32), Tensor((64, 48), F32)]),
    ("gemm-batched", op.matmul, [Tensor((2, 1, "n", 8), F32), Tensor((3, 8, 5), F32)]),
    ("matvec", op.matmul, [Tensor((4, "n"), F32), Tensor(("n",), F32)]),
    ("matmul-int", op.matmul, [Tensor(("n", 3), "int32"), Tensor((3, 2), "int32")]),
    ("conv2d", op.nn.conv2d, [Tensor((1, 3, "n", 9), F32), Tensor((4, 3, 3, 3), F32)]),
    ("conv2d-deep", op.nn.conv2d, [Tensor((1, 64, 5, 5), F32), Tensor((2, 64, 3, 3), F32)]),
    ("max_pool2d", lambda x: op.nn.max_pool2d(x, pool_size=3, strides=2, padding=1), [Tensor((1, 2, "n", 9), F32)]),
    ("avg_pool2d", lambda x: op.nn.avg_pool2d(x, pool_size=3, strides=2, padding=1), [Tensor((1, 2, "n", 9), F32)]),
    *[_quantized_matmul(fmt, m, 42) for fmt in ("q4_0", "q4_1", "q8_0") for m in (1, "m")],
    *[(f"quantized_take-{fmt}", lambda w, i, fmt=fmt: op.quantized_take(w, i, format=fmt, k=128),
       [Tensor((50, {"q4_0": 18, "q4_1": 20, "q8_0": 34}[fmt]), "uint32"), Tensor(("n",), "int32")])
      for fmt in ("q4_0", "q4_1", "q8_0")],
    *[(f"sample_token-{'greedy' if greedy else 'sampled'}",
       lambda x, h, p, greedy=greedy: op.sample_token(x, h, p, greedy=greedy),
       [Tensor((1, 1000), F32), Tensor(("m",), "int32"), Tensor((5,), F32)]) for greedy in (True, False)],
]
HALF = [
    *_elementwise(F16),
    ("astype-int64-f16", lambda x: op.astype(x, dtype=F16), [Tensor(("n",), "int64")]),
    ("astype-f16-f32", lambda x: op.astype(x, dtype=F32), [Tensor(("n",), F16)]),
    ("astype-vec4-f32-f16", lambda x: op.astype(x, dtype=F16), [Tensor(("n", 4), F32)]),
    ("clip-f16", lambda x: op.clip(x, min=0.7, max=1.1), [Tensor(("n", 3), F16)]),
    ("where-f16", op.where, [Tensor(("n", 1), "bool"), Tensor((1, 5), F16), Tensor(("n", 5), F16)]),
    ("take-f16", lambda w, i: op.take(w, i, axis=1), [Tensor((3, 50), F16), Tensor(("n",), "int64")]),
    ("transpose-f16", op.permute_dims, [Tensor(("n", "m"), F16)]),
    ("sum-f16", lambda x: op.sum(x, axis=[1]), [Tensor((3, "n"), F16)]),
    ("softmax-f16", op.nn.softmax, [Tensor(("n", "m"), F16)]),
    ("rms_norm-f16", op.nn.rms_norm, [Tensor(("n", 576), F16), Tensor((576,), F16)]),
    ("layer_norm-f16", op.nn.layer_norm, [Tensor(("n", "m"), F16), Tensor(("m",), F16), Tensor(("m",), F16)]),
    ("gemv-f16", op.matmul, [Tensor((1, 96), F16), Tensor((96, "n"), F16)]),
    ("gemm-f16", op.matmul, [Tensor(("n", 64), F16), Tensor((64, 48), F16)]),
    ("conv2d-f16", op.nn.conv2d, [Tensor((1, 3, "n", 9), F16), Tensor((4, 3, 3, 3), F16)]),
    ("max_pool2d-f16", lambda x: op.nn.max_pool2d(x, pool_size=3, strides=2, padding=1),
     [Tensor((1, 2, "n", 9), F16)]),
]
CASES = [("lavapipe", *case) for case in COMMON + HALF] + [("vulkan", *case) for case in COMMON]


def compile_kernels(make, params, preset):
    """The SPIR-V backend's output for ``make(*params)`` legalized for ``preset``: (kernels, modules)."""
    target = Target.preset(preset)
    lowered = legalize_ops(build(make, params), target)
    kernels = [f for f in lowered.functions.values() if not isinstance(f, Function)]
    compiled = get_backend("spirv").compile(kernels, target)
    return kernels, compiled


def spirv_tool(tool, binary: bytes, *args) -> subprocess.CompletedProcess:
    with tempfile.NamedTemporaryFile(suffix=".spv", delete=False) as f:
        f.write(binary)
    try:
        return subprocess.run([tool, *args, f.name], capture_output=True, text=True, timeout=60)
    finally:
        os.unlink(f.name)


def disassemble(binary: bytes) -> str:
    result = spirv_tool("spirv-dis", binary)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("preset,name,make,params", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_every_kernel_passes_spirv_val(preset, name, make, params):
    kernels, compiled = compile_kernels(make, params, preset)
    for kernel, record in zip(kernels, compiled.kernels):
        binary = compiled.modules[record.module]
        result = spirv_tool("spirv-val", binary, "--target-env", "vulkan1.1")
        assert result.returncode == 0, f"{record.module}:\n{result.stderr}{result.stdout}\n{kernel.script()}"
        text = disassemble(binary)
        for buf in kernel.params:
            assert f'OpName %{buf.name} "{buf.name}"' in text
        assert f'OpEntryPoint GLCompute %{record.entry_point} "{record.entry_point}"' in text


def test_capabilities_appear_only_when_used():
    _, compiled = compile_kernels(op.add, [Tensor(("n",), F32)] * 2, "lavapipe")
    text = disassemble(next(iter(compiled.modules.values())))
    assert "OpCapability Shader" in text
    for unused in ("Float16", "StorageBuffer16BitAccess", "GroupNonUniform", "SPV_KHR_16bit_storage", "GLSL.std.450"):
        assert unused not in text
    _, compiled = compile_kernels(op.exp, [Tensor(("n",), F16)], "lavapipe")
    text = disassemble(next(iter(compiled.modules.values())))
    assert "OpCapability Float16" in text and "OpCapability StorageBuffer16BitAccess" in text
    assert '"GLSL.std.450"' in text and "GroupNonUniform" not in text
    assert compiled.kernels[0].requirements["features"] == [SHADER_F16]


def test_subgroup_reductions_need_the_feature_and_the_capability():
    kernels, compiled = compile_kernels(op.nn.softmax, [Tensor(("n", 1000), F32)], "lavapipe")
    assert kernels[0].attrs.get("subgroups")
    text = disassemble(next(iter(compiled.modules.values())))
    assert "OpCapability GroupNonUniformArithmetic" in text and "OpGroupNonUniformFMax" in text
    assert "BuiltIn SubgroupLocalInvocationId" in text
    assert compiled.kernels[0].requirements["features"] == ["subgroup"]
    # The phone preset has no subgroups: the same operator reduces through workgroup memory alone.
    _, compiled = compile_kernels(op.nn.softmax, [Tensor(("n", 1000), F32)], "vulkan")
    assert "GroupNonUniform" not in disassemble(next(iter(compiled.modules.values())))


def test_abi_passes_scalars_as_push_constants():
    kernels, compiled = compile_kernels(op.add, [Tensor(("n", "m"), F32)] * 2, "vulkan")
    record = compiled.kernels[0]
    assert record.module == f"kernels/000_{record.entry_point}.spv"
    assert record.abi["scalars"] == [{"name": s, "passed": "push_constant", "offset": 4 * i}
                                     for i, s in enumerate(kernels[0].scalars)]
    assert [b["index"] for b in record.abi["bindings"]] == [0, 1, 2]
    text = disassemble(compiled.modules[record.module])
    assert "OpDecorate %out0 Binding 2" in text and "OpDecorate %out0 DescriptorSet 0" in text
    assert "PushConstant" in text and "OpMemberDecorate %Scalars 1 Offset 4" in text
    assert "NonWritable" not in text and "Restrict" not in text


def test_signed_and_unsigned_integer_instructions():
    _, compiled = compile_kernels(op.floor_divide, [Tensor(("n",), "int32")] * 2, "vulkan")
    text = disassemble(next(iter(compiled.modules.values())))
    assert "OpSDiv" in text and "OpSRem" in text and "OpUDiv" not in text
    _, compiled = compile_kernels(lambda x, w: op.quantized_matmul(x, w, format="q4_0", k=128),
                                  [Tensor((1, 128), F32), Tensor((8, 18), "uint32")], "vulkan")
    text = disassemble(next(iter(compiled.modules.values())))
    assert "OpShiftRightLogical" in text and "OpBitwiseAnd" in text and "UnpackHalf2x16" in text


def test_module_header_is_spirv_1_3():
    _, compiled = compile_kernels(op.add, [Tensor(("n",), F32)] * 2, "vulkan")
    words = np.frombuffer(next(iter(compiled.modules.values())), "<u4")
    assert words[0] == 0x07230203 and words[1] == 0x00010300 and words[4] == 0
