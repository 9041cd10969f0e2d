"""The Metal backend on Linux: every kernel it writes type-checks as MSL (clang against the
metal_stdlib shim, metal_check.py), the check itself rejects seeded mistakes, and a metal build is
an executable folder whose modules no device here runs.

Kernels come from two places: SmolLM2 compiled for the ``metal`` preset through ``tessera.build``
(the backend registry), and every case of the kernel tests (tests/kernels), legalized for Metal.
"""

from __future__ import annotations

import json
import os

import pytest
import tessera
from harness import build
from kernel_cases import kernel_test_cases, kernel_tests_without_cases
from metal_check import MetalCheckError, check_metal
from tessera import nn, op
from tessera.codegen import get_backend
from tessera.ir import Function, Tensor
from tessera.target import Target
from tessera.transform import legalize_ops
from tessera.vm import DeviceError, Executable, VirtualMachine

METAL = Target.preset("metal")


def metal_sources(mod) -> dict[str, str]:
    """The .metal modules of ``mod``'s kernels, legalized and compiled for the metal preset."""
    kernels = [f for f in legalize_ops(mod, METAL).functions.values() if not isinstance(f, Function)]
    compiled = get_backend("metal").compile(kernels, METAL)
    return {path: data.decode() for path, data in compiled.modules.items()}


# -- SmolLM2 through tessera.build ------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_metal():
    from tessera.frontend import bundled_smollm2_path, load_gguf
    from tessera.models import export_llm, model_from_gguf

    model, weights = model_from_gguf(load_gguf(bundled_smollm2_path()))
    return tessera.build(nn.bind_weights(export_llm(model, 256), weights), "metal")


def test_every_smollm2_kernel_compiles_as_msl(smollm2_metal):
    exe = smollm2_metal
    assert {k["backend"] for k in exe.kernels} == {"metal"}
    assert exe.required_features == ["subgroup"]  # f16 weights are read as bits, computed in f32
    assert all(path.startswith("kernels/") and path.endswith(".metal") for path in exe.modules)
    assert {k["module"] for k in exe.kernels} == set(exe.modules)
    sources = {path: data.decode() for path, data in exe.modules.items()}
    assert any("simd_sum" in s for s in sources.values()) and any("as_type<half>" in s for s in sources.values())
    for path, source in sorted(sources.items()):
        try:
            check_metal(source)
        except MetalCheckError as error:
            pytest.fail(f"{path}: {error}")


# -- every case of the kernel tests -----------------------------------------------------------


CASES = kernel_test_cases(METAL)


def test_every_kernel_test_gives_cases():
    """As for SPIR-V: no kernel test silently contributes nothing to the Metal check."""
    silent = kernel_tests_without_cases(METAL)
    assert not silent, "kernel tests that give no case:\n" + "\n".join(f"{t}: {e}" for t, e in silent.items())


def test_the_kernel_tests_cover_float16_and_many_operators():
    assert len(CASES) > 100
    assert any(p.dtype == "float16" for _, _, params in CASES for p in params if hasattr(p, "dtype"))


@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[0] for c in CASES])
def test_kernel_test_case_compiles_as_msl(case):
    _, make, params = CASES[case]
    for path, source in metal_sources(build(make, params)).items():
        try:
            check_metal(source)
        except MetalCheckError as error:
            pytest.fail(f"{path}: {error}")


# -- the check fails where Metal would ---------------------------------------------------------

SOFTMAX = build(lambda x: op.nn.softmax(x, axis=-1), [Tensor(("n", 37), "float32")])
VECTOR_ADD = build(op.add, [Tensor(("n", 8), "float32"), Tensor(("n", 8), "float32")])


def _one_source(mod) -> str:
    (source,) = metal_sources(mod).values()
    return source


@pytest.mark.parametrize("mistake,old,new,message", [
    ("undeclared name", "int base = ", "int base = undeclared_row + ", "undeclared identifier 'undeclared_row'"),
    ("write to constant", "const int sym_n = params[0];", "params[0] = 1; const int sym_n = params[0];",
     "read-only variable is not assignable"),
    ("unknown attribute", "[[buffer(0)]]", "[[buffer_index(0)]]", "unknown Metal attribute [[buffer_index]]"),
    ("math arity", "precise::exp(", "precise::exp(1.0f, ", "no matching function for call to 'exp'"),
])
def test_seeded_mistakes_in_a_reduction_are_rejected(mistake, old, new, message):
    source = _one_source(SOFTMAX)
    check_metal(source)
    assert old in source
    with pytest.raises(MetalCheckError, match=message.replace("[", r"\[").replace("(", r"\(")):
        check_metal(source.replace(old, new, 1))


@pytest.mark.parametrize("statement,message", [
    ("float4 wrong = float3(1.0f);", "cannot initialize a variable of type 'metal::float4'"),
    ("float4 wrong = float4(1.0f, 2.0f);", "the components do not add up to the vector's arity"),
    ("half4 wrong = half4(float3(1.0f));", "vector conversion between different arities"),
])
def test_wrong_vector_arity_is_rejected(statement, message):
    source = _one_source(VECTOR_ADD)
    assert "device float4*" in source  # the add reads and writes float4 vectors
    check_metal(source)
    body_end = source.rindex("}")
    with pytest.raises(MetalCheckError, match=message):
        check_metal(source[:body_end] + "  " + statement + "\n" + source[body_end:])


def test_what_msl_cannot_spell_is_a_codegen_error_naming_the_kernel():
    """A TesseraError, so that `tessera compile` prints one line rather than a traceback."""
    from tessera import arith
    from tessera.codegen.metal import emit_metal
    from tessera.ir.errors import TesseraError
    from tessera.tir.ir import Binary, Buffer, Builtin, Const, Load, PrimFunc, Store

    x, y = Buffer("x", "f32", (8,), storage_dtype="float32"), Buffer("y", "f32", (8,), storage_dtype="float32")
    lane = Builtin("local_id", 0)

    def kernel(value):
        return PrimFunc("mixed", (x,), (y,), (), (Store(y, lane, value, 4),), (2, 1, 1), (arith.IntImm(1),) * 3)

    with pytest.raises(TesseraError, match="kernel mixed: x are accessed with several vector widths"):
        emit_metal(kernel(Binary("+", Load(x, lane, 4), Load(x, lane, 1), "f32x4")))
    with pytest.raises(TesseraError, match="kernel mixed: Metal kernels cannot hold a NaN constant"):
        emit_metal(kernel(Binary("+", Load(x, lane, 4), Const(float("nan"), "f32x4"), "f32x4")))


# -- the executable folder ---------------------------------------------------------------------


def test_a_metal_executable_lists_its_modules_and_no_device_here_runs_it(tmp_path):
    exe = tessera.build(SOFTMAX, "metal", upper_bounds={"n": 64})
    exe.save(str(tmp_path))
    with open(tmp_path / "executable.json", encoding="utf-8") as f:
        record = json.load(f)
    (module,) = record["modules"]
    assert module["backend"] == "metal" and module["path"].endswith(".metal") and len(module["sha256"]) == 64
    assert os.path.getsize(tmp_path / module["path"]) == module["nbytes"]
    (kernel,) = record["kernels"]
    assert kernel["abi"]["scalars"][0] | {"name": None} == {"name": None, "passed": "buffer", "binding": 2,
                                                             "offset": 0}
    loaded = Executable.load(str(tmp_path))
    with pytest.raises(DeviceError, match="no device here runs metal kernels"):
        VirtualMachine(loaded)
