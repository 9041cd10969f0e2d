"""The SPIR-V backend: every kernel-test case and every SmolLM2 kernel passes spirv-val for Vulkan 1.1
on both presets, reads back by name, and declares a capability only when it uses it; a hand-written
kernel covers the constructs operators rarely reach; the specification's numbers match spirv-tools.
(Numbers of the operators come from the kernel tests on the Vulkan device, tests/kernels.)"""

import os
import subprocess
import tempfile

import numpy as np
import pytest
import tessera
from harness import build
from kernel_cases import kernel_test_cases, kernel_tests_without_cases
from tessera import arith, op
from tessera.codegen import get_backend
from tessera.codegen.spirv import SPIRVError, emit_spirv
from tessera.codegen.spirv.spec import GLSL, BuiltIn, Capability, Decoration, Op, StorageClass
from tessera.ir import Function, Tensor
from tessera.ir.errors import TesseraError
from tessera.op.lowering import LegalizeError
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

F32, F16 = "float32", "float16"
# Every case of the kernel tests, for both presets: the phone's has no shader-f16, so its f16 cases must
# be refused at compile time with an error that names the feature.
CASES = kernel_test_cases(Target.preset("lavapipe"))
PRESETS = ("lavapipe", "vulkan")


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


def assert_valid(kernels, compiled) -> None:
    """Every module passes spirv-val for Vulkan 1.1 and names its buffers and entry point."""
    for kernel, record in zip(kernels, compiled.kernels):
        binary = compiled.modules[record.module]
        result = spirv_tool("spirv-val", binary, "--target-env", "vulkan1.1")
        assert result.returncode == 0, f"{record.module}:\n{result.stderr}{result.stdout}\n{kernel.script()}"
        text = disassemble(binary)
        for buf in kernel.params:
            assert f'OpName %{buf.name} "{buf.name}"' in text
        assert f'OpEntryPoint GLCompute %{record.entry_point} "{record.entry_point}"' in text


def test_the_kernel_tests_cover_float16_and_many_operators():
    assert len(CASES) > 100
    assert any(p.dtype == F16 for _, _, params in CASES for p in params if hasattr(p, "dtype"))


def test_every_kernel_test_gives_cases():
    """A kernel test that stops before its first check_op or build (a new helper, say) would check no
    language here: it is named, with what stopped it, unless kernel_cases lists why it cannot."""
    silent = kernel_tests_without_cases(Target.preset("lavapipe"))
    assert not silent, "kernel tests that give no case:\n" + "\n".join(f"{t}: {e}" for t, e in silent.items())


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[0] for c in CASES])
def test_every_kernel_test_case_passes_spirv_val(case, preset):
    _, make, params = CASES[case]
    try:
        compiled = compile_kernels(make, params, preset)
    except LegalizeError as error:
        if not Target.preset(preset).has(SHADER_F16) and "dtype float16" in str(error) and "shader-f16" in str(error):
            return  # the phone preset refuses f16, naming the feature: what it should do
        raise
    assert_valid(*compiled)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_smollm2_kernel_passes_spirv_val(preset):
    from tessera import nn
    from tessera.frontend import bundled_smollm2_path, load_gguf
    from tessera.models import export_llm, model_from_gguf

    model, weights = model_from_gguf(load_gguf(bundled_smollm2_path()))
    exe = tessera.build(nn.bind_weights(export_llm(model, 256), weights), preset)
    assert {k["backend"] for k in exe.kernels} == {"spirv"}
    assert all(path.startswith("kernels/") and path.endswith(".spv") for path in exe.modules)
    for path, module in sorted(exe.modules.items()):
        result = spirv_tool("spirv-val", module, "--target-env", "vulkan1.1")
        assert result.returncode == 0, f"{path}:\n{result.stderr}"


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
    from tessera.vm.vulkan_runner import VulkanKernelRunner

    runner = VulkanKernelRunner()  # make setup installs lavapipe: a missing device fails, never skips
    rng = np.random.default_rng(0)
    for size in (1, 7, 64, 1000):
        x = rng.uniform(0.5, 1.5, size).astype(np.float32)
        k = rng.integers(-4, 9, size).astype(np.int32)
        got = runner.run(control_flow_kernel(), [x, k], {"n": size})
        want = expected_control_flow(x, k)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
        for g, e in zip(got[1:], want[1:]):
            np.testing.assert_array_equal(g, e)


def casts_kernel():
    """Float to integer casts: as_i32[i] = i32(x[i]) and as_u32[i] = u32(x[i]), then the same from f16
    (h) and from x read as 4-lane vectors (by the first n / 4 threads)."""
    n = arith.Var("n")
    lid, wid = Builtin("local_id", 0), Builtin("workgroup_id", 0)
    x, h = Buffer("x", "f32", (n,), "global", "float32"), Buffer("h", "f16", (n,), "global", "float16")
    outs = [Buffer(f"{source}_{dtype}", dtype, (n,), "global", {"i32": "int32", "u32": "uint32"}[dtype])
            for source in ("f32", "f16", "f32x4") for dtype in ("i32", "u32")]
    i = Local("i")
    body = (
        Declare(i, binary("+", binary("*", wid, Const(64)), lid)),
        IfThen(binary("<", i, from_prim(n)), tuple(
            Store(out, i, Cast(Load(source, i), out.dtype)) for source, out in zip((x, x, h, h), outs))),
        IfThen(binary("<", i, binary("/", from_prim(n), Const(4))), tuple(
            Store(out, i, Cast(Load(x, i, 4), f"{out.dtype}x4"), 4) for out in outs[4:])),
    )
    return PrimFunc("casts", (x, h), tuple(outs), ("n",), body, (64, 1, 1),
                    (arith.simplify((n + 63) // 64), arith.IntImm(1), arith.IntImm(1)))


def saturated(x: np.ndarray, dtype) -> np.ndarray:
    """WGSL's float -> integer conversion: NaN is 0, and values beyond the integer's range go to the
    nearest float inside it (2**31 - 128 for i32, 2**32 - 256 for u32), then toward zero."""
    high = {np.int32: 2147483520.0, np.uint32: 4294967040.0}[dtype]
    low = -2147483648.0 if dtype is np.int32 else 0.0
    wide = np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=high, neginf=low)
    return np.trunc(np.clip(wide, low, high)).astype(dtype)


def test_float_to_integer_casts_saturate_on_vulkan():
    """OpConvertFToS/FToU are undefined out of range (lavapipe gave i32(1e10) = -2**31, u32(-3.0) =
    4294967293): the emitter clamps first and sends NaN to 0, so SPIR-V agrees with WGSL."""
    from tessera.vm.vulkan_runner import VulkanKernelRunner

    values = [1e10, -1e10, -3.0, 3.7, -3.7, np.nan, np.inf, -np.inf, 0.0, 2147483647.0, 4294967295.0, 65504.0]
    x = np.array(values, np.float32)
    with np.errstate(over="ignore"):
        h = x.astype(np.float16)  # 1e10 and 2**31 become inf in f16
    assert spirv_tool("spirv-val", emit_spirv(casts_kernel()).binary, "--target-env", "vulkan1.1").returncode == 0
    got = VulkanKernelRunner().run(casts_kernel(), [x, h], {"n": len(values)})
    want = [saturated(x, np.int32), saturated(x, np.uint32), saturated(h, np.int32), saturated(h, np.uint32),
            saturated(x, np.int32), saturated(x, np.uint32)]
    names = [f"{source}->{dtype}" for source in ("f32", "f16", "f32x4") for dtype in ("i32", "u32")]
    for name, g, e in zip(names, got, want):
        np.testing.assert_array_equal(g, e, err_msg=f"{name} of {values}")
    assert got[0][:3].tolist() == [2147483520, -2147483648, -3] and got[1][2] == 0


def test_what_spirv_cannot_express_is_a_tessera_error_naming_the_kernel():
    n = arith.Var("n")
    x, y = Buffer("x", "f32", (n,), "global", "float32"), Buffer("y", "f32", (n,), "global", "float32")
    i = Builtin("local_id", 0)

    def kernel(*body, name="odd"):
        return PrimFunc(name, (x,), (y,), ("n",), body, (64, 1, 1), (arith.IntImm(1),) * 3)

    cases = [
        (kernel(Store(y, i, Call("hypot", (Load(x, i), Load(x, i)), "f32"))),
         r"kernel odd: no SPIR-V for the intrinsic hypot of 2 operands in T.hypot\(x\[T.local_id.x\], x\[T.local_id.x\]\)"),
        (kernel(Store(y, i, binary("&", Load(x, i), Load(x, i)))), r"kernel odd: no SPIR-V instruction for & of f32"),
        (kernel(Store(y, i, Load(x, i, 4), 4), Store(y, i, Load(x, i, 2), 2), name="lanes"),
         r"kernel lanes: y is accessed with [24] and with [24] lanes"),
        (kernel(Assign(Local("t", "f32"), Load(x, i))), r"kernel odd: t is assigned before it is declared"),
    ]
    for func, message in cases:
        with pytest.raises(SPIRVError, match=message):
            emit_spirv(func)
    bytes_buffer = Buffer("b", "u32", (n,), "global", "float64")
    with pytest.raises(TesseraError, match="kernel bytes: b holds float64 tensors"):
        emit_spirv(PrimFunc("bytes", (bytes_buffer,), (y,), ("n",), (), (64, 1, 1), (arith.IntImm(1),) * 3))


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
    arity = {"Pow": 2, "Atan2": 2, "FMin": 2, "UMin": 2, "SMin": 2, "FMax": 2, "UMax": 2, "SMax": 2, "FClamp": 3, "UClamp": 3,
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
