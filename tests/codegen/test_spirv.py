"""The SPIR-V backend: every operator's kernels pass spirv-val for Vulkan 1.1, read back by name, and
declare a capability only when they use it. (Numbers come from the kernel tests on the Vulkan device.)"""

import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
from kernels.harness import build
from tessera import arith, op
from tessera.codegen import get_backend
from tessera.codegen.spirv import emit_spirv
from tessera.codegen.spirv.spec import GLSL, BuiltIn, Capability, Decoration, Op, StorageClass
from tessera.ir import Function, PrimValue, Shape, Tensor
from tessera.op.elementwise import BINARY, COMPARISON, UNARY
from tessera.target import SHADER_F16, Target
from tessera.tir.ir import (
    Assign,
    Barrier,
    Buffer,
    Builtin,
    Call,
    Cast,
    Const,
    Declare,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Store,
    binary,
    from_prim,
    intrinsic,
    logical_and,
    select,
)
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


# -- the emitter's constructs on one hand-written kernel ------------------------------------------------


def control_flow_kernel():
    """Loops inside branches inside loops, a loop bound read from memory, a guard that must keep a
    load from running (``i < n && x[i] > 1``), a select whose arm loads, private and workgroup
    scratch around a barrier, and integer division that rounds toward -inf.

    For each i < n: out[i] = x[i] + 1.5 where x[i] > 1, else clamp(x[i], 0.6, 0.9) + erf(x[i]);
    q[i] = floordiv(k[i] - 5, 3) * 10 + (k[i] - 5) % 3 (truncating); w[i] = ((k << 3) | 1) ^ (k >> 1) & 255 as
    u32; steps[i] = sum over a < k[i], b < 2 of (1 if a + b is even else 2)."""
    n = arith.Var("n")
    lid, wid = Builtin("local_id", 0), Builtin("workgroup_id", 0)
    x, k = Buffer("x", "f32", (n,), "global", "float32"), Buffer("k", "i32", (n,), "global", "int32")
    out, q = Buffer("out", "f32", (n,), "global", "float32"), Buffer("q", "i32", (n,), "global", "int32")
    w, steps = Buffer("w", "u32", (n,), "global", "uint32"), Buffer("steps", "i32", (n,), "global", "int32")
    half = Buffer("half", "f32", (arith.IntImm(4),), "private")
    shared = Buffer("shared", "f32", (arith.IntImm(64),), "workgroup")
    i, j, a, b, acc, d = Local("i"), Local("j"), Local("a"), Local("b"), Local("acc"), Local("d")
    inside = binary("<", i, from_prim(n))
    word = Cast(Load(k, i), "u32")
    u32 = lambda v: Const(v, "u32")  # noqa: E731
    body = (
        Declare(i, binary("+", binary("*", wid, Const(64)), lid)),
        For(j, Const(0), Const(4), (Store(half, j, binary("*", Cast(j, "f32"), Const(0.5, "f32"))),)),
        Store(shared, lid, select(inside, Load(x, i), Const(0.0, "f32"))),
        Barrier(),
        IfThen(logical_and(inside, binary(">", Load(x, i), Const(1.0, "f32"))),
               (Store(out, i, binary("+", Load(shared, lid), Load(half, Const(3)))),),
               (IfThen(inside, (Store(out, i, binary("+", Call("clamp", (Load(x, i), Const(0.6, "f32"),
                                                                          Const(0.9, "f32")), "f32"),
                                                      intrinsic("erf", Load(x, i)))),)),)),
        Barrier("storage"),
        IfThen(inside, (
            Declare(d, binary("-", Load(k, i), Const(5))),
            Store(q, i, binary("+", binary("*", intrinsic("floordiv", d, Const(3)), Const(10)), binary("%", d, Const(3)))),
            Store(w, i, binary("&", binary("^", binary("|", binary("<<", word, u32(3)), u32(1)), binary(">>", word, u32(1))),
                               u32(255))),
            Declare(acc, Const(0)),
            For(a, Const(0), Load(k, i), (
                For(b, Const(0), Const(2), (
                    IfThen(binary("==", binary("%", binary("+", a, b), Const(2)), Const(0)),
                           (Assign(acc, binary("+", acc, Const(1))),), (Assign(acc, binary("+", acc, Const(2))),)),)),)),
            Store(steps, i, acc))),
    )
    return PrimFunc("control_flow", (x, k), (out, q, w, steps), ("n",), body, (64, 1, 1),
                    (arith.simplify((n + 63) // 64), arith.IntImm(1), arith.IntImm(1)), scratch=(half, shared))


def expected_control_flow(x, k):
    from math import erf

    out = np.where(x > 1, x + 1.5, np.clip(x, 0.6, 0.9) + np.array([erf(v) for v in x.astype(np.float64)]))
    d = k - 5
    q = np.floor_divide(d, 3) * 10 + np.fmod(d, 3)
    u = k.astype(np.uint32)
    w = (((u << 3) | 1) ^ (u >> 1)) & 255
    steps = np.array([sum(1 if (a + b) % 2 == 0 else 2 for a in range(v) for b in range(2)) for v in k], np.int32)
    return out.astype(np.float32), q.astype(np.int32), w.astype(np.uint32), steps


def test_structured_control_flow_validates():
    kernel = emit_spirv(control_flow_kernel())
    result = spirv_tool("spirv-val", kernel.binary, "--target-env", "vulkan1.1")
    assert result.returncode == 0, result.stderr
    text = disassemble(kernel.binary)
    assert text.count("OpLoopMerge") == 3 and text.count("OpPhi") == 2  # the guard and the select
    for name in ("half", "shared", "acc", "steps"):
        assert f'OpName %{name} "{name}"' in text


def test_structured_control_flow_runs_on_vulkan():
    try:
        from tessera.vm.vulkan_runner import VulkanKernelRunner, VulkanUnavailable
    except ImportError:
        pytest.skip("no Vulkan runner")
    try:
        runner = VulkanKernelRunner()
    except VulkanUnavailable as error:
        pytest.skip(str(error))
    rng = np.random.default_rng(0)
    for size in (1, 7, 64, 1000):
        x = rng.uniform(0.5, 1.5, size).astype(np.float32)
        k = rng.integers(-4, 9, size).astype(np.int32)
        got = runner.run(control_flow_kernel(), [x, k], {"n": size})
        want = expected_control_flow(x, k)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
        for g, e in zip(got[1:], want[1:]):
            np.testing.assert_array_equal(g, e)


# -- the specification's numbers, against spirv-tools ------------------------------------------------


def test_opcodes_are_the_ones_spirv_dis_names():
    """Each opcode alone in a module: spirv-dis names it, in its listing or in its complaint about the
    missing operands."""
    wrong = []
    for name, number in vars(Op).items():
        if name.startswith("_"):
            continue
        words = np.array([0x07230203, 0x00010300, 0, 8, 0, 1 << 16 | number], "<u4")
        result = spirv_tool("spirv-dis", words.tobytes())
        if f"Op{name}" not in (result.stdout + result.stderr).replace("starting", " ").split():
            wrong.append(f"Op{name} = {number}: {result.stdout[-80:]}{result.stderr}")
    assert not wrong, "\n".join(wrong)


def test_enumerants_are_the_ones_spirv_as_assembles():
    def members(cls):
        return [(k, v) for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)]

    operands = {"ArrayStride": " 4", "BuiltIn": " WorkgroupId", "Binding": " 0", "DescriptorSet": " 0", "Offset": " 0"}
    arity = {"Pow": 2, "FMin": 2, "UMin": 2, "SMin": 2, "FMax": 2, "UMax": 2, "SMax": 2, "FClamp": 3, "UClamp": 3,
             "SClamp": 3, "Fma": 3}
    lines, expected = [], []  # expected: (the instruction's index in the module, its word index, value)
    for name, value in members(Capability):
        lines.append(f"OpCapability {name}")
        expected.append((len(lines) - 1, 1, value, f"Capability.{name}"))
    lines += ['%glsl = OpExtInstImport "GLSL.std.450"', "OpMemoryModel Logical GLSL450"]
    for name, value in members(Decoration):
        lines.append(f"OpDecorate %t {name}{operands.get(name, '')}")
        expected.append((len(lines) - 1, 2, value, f"Decoration.{name}"))
    for name, value in members(BuiltIn):
        lines.append(f"OpDecorate %t BuiltIn {name}")
        expected.append((len(lines) - 1, 3, value, f"BuiltIn.{name}"))
    lines.append("%t = OpTypeFloat 32")
    for name, value in members(StorageClass):
        lines.append(f"%p{name} = OpTypePointer {name} %t")
        expected.append((len(lines) - 1, 2, value, f"StorageClass.{name}"))
    for name, value in members(GLSL):
        lines.append(f"%g{name} = OpExtInst %t %glsl {name}" + " %t" * arity.get(name, 1))
        expected.append((len(lines) - 1, 4, value, f"GLSL.{name}"))
    with tempfile.TemporaryDirectory() as folder:
        source, binary = os.path.join(folder, "enums.spvasm"), os.path.join(folder, "enums.spv")
        with open(source, "w") as f:
            f.write("\n".join(lines) + "\n")
        result = subprocess.run(["spirv-as", "--target-env", "spv1.3", source, "-o", binary], capture_output=True,
                                text=True)
        assert result.returncode == 0, result.stderr
        words = np.fromfile(binary, "<u4")[5:]
    instructions, at = [], 0
    while at < len(words):
        instructions.append(words[at:at + (words[at] >> 16)])
        at += words[at] >> 16
    wrong = [f"{what} = {value}, spirv-as says {instructions[line][word]}"
             for line, word, value, what in expected if instructions[line][word] != value]
    assert not wrong, "\n".join(wrong)
