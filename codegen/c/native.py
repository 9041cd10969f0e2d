"""The C backend for this CPU (or another): every kernel in one C file, built into ``kernels.so``.

A native runtime calls kernels from C without libffi, so every kernel has one signature
(docs/format.md, "c-native"):

    void k_<name>(void *const *buffers, const int32_t *scalars, int32_t nwg_x, int32_t nwg_y,
                  int32_t nwg_z, int64_t wg_begin, int64_t wg_end)

``buffers`` holds one address per binding (ABI order), ``scalars`` the symbolic sizes in order; the
call runs the flattened workgroups ``[wg_begin, wg_end)`` of the grid (x fastest, then y, then z),
so a runtime's thread pool splits one launch across threads. Kernels are re-entrant: workgroup
memory is a local array of each call and nothing global is written. Only the kernel entries are
exported (``-fvisibility=hidden``).

Registers the ``cpu`` target kind with a preset per instruction set: ``cpu`` is this machine
(``-march=native``), ``cpu-<isa>`` a portable one (``cpu-x86-64-v3``, ``cpu-armv8.2-a`` ...).
Machine code for another architecture is built by that architecture's Debian cross compiler.

``cpu-android-<abi>`` builds for an Android ABI without an NDK (``tessera package --target android``):
bionic is not glibc, so the module links no C library at all (``-nostdlib``) and instead names
Android's ``libc.so`` and ``libm.so`` through empty stand-ins with those sonames, as the NDK's own
stub libraries do; its references stay unversioned (no ``GLIBC_2.17``), and each is checked to be
a function of the C standard library that bionic exports.
"""

from __future__ import annotations

import functools
import os
import platform
import shlex
import shutil
import subprocess
import tempfile

from tessera.target import COMMON_DTYPES, SHADER_F16, TargetKind, register_kind, register_preset
from tessera.tir.lower import LoweringNeeds, lower_kernel

from .. import (
    Backend,
    CodegenError,
    CompiledKernel,
    CompiledKernels,
    entry_name,
    kernel_abi,
    kernel_limits,
    register_backend,
    uses_dtype,
)
from . import C_RESERVED, EXTERNS, LOWERING, CRenderer, emit_c_module

MODULE = "kernels.so"
# Global buffers hold f16 as well (a host has no trouble addressing 2-byte elements).
NATIVE_LOWERING = LoweringNeeds(storage_types=LOWERING.storage_types | {"float16"}, unroll=True, split_workgroups=True)
HALF = "_Float16"
NATIVE = "native"
# Instruction sets a `cpu-<isa>` preset builds for (the -march value), with the architecture that runs them.
ISAS = {"x86-64-v2": "x86_64", "x86-64-v3": "x86_64", "x86-64-v4": "x86_64", "armv8.2-a": "aarch64"}
# Android ABIs a `cpu-android-<abi>` preset builds for: the architecture and the -march its ABI
# guarantees (arm64-v8a phones since 2017 have ARMv8.2-A's dot products in the micro-kernels' reach;
# Android's x86_64 ABI includes SSE4.2 and POPCNT, x86-64-v2).
ANDROID_ABIS = {"android-arm64-v8a": ("aarch64", "armv8.2-a"), "android-x86_64": ("x86_64", "x86-64-v2")}
# What an Android kernels.so may import: functions of the C standard library (string.h, stdlib.h,
# math.h) that bionic's libc.so and libm.so export unversioned. Anything else (a glibc-only symbol,
# a fortify or stack-protector helper) would fail in Android's loader, so the build refuses it.
ANDROID_IMPORTS = frozenset(
    {"memcpy", "memmove", "memset", "memcmp", "abs", "labs", "llabs"}
    | {f"{name}{suffix}" for suffix in ("", "f") for name in (
        "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "pow", "sqrt", "cbrt", "sin", "cos", "tan",
        "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc",
        "floor", "ceil", "round", "trunc", "rint", "nearbyint", "lrint", "lround", "fmod", "remainder",
        "fabs", "fmin", "fmax", "fma", "ldexp", "frexp", "hypot", "tgamma", "lgamma", "copysign")})
# The module's segments align to 16 KiB pages, which Android 15 devices may use (the NDK's default since r27).
ANDROID_LINK = ("-nostdlib", "-fno-stack-protector", "-U_FORTIFY_SOURCE", "-Wl,--no-as-needed",
                "-Wl,-z,max-page-size=16384", "-Wl,-soname,kernels.so", "-Wl,--hash-style=both")
# -ffp-contract=off: no fused multiply-add the interpreter does not do either (gcc's ISO C mode
# implies it, clang's default fuses within a statement), and no -ffast-math, so results match the
# reference within the tests' 1e-4 and the micro-kernels' bit-for-bit tests hold.
FLAGS = ("-O3", "-shared", "-fPIC", "-fno-math-errno", "-fno-semantic-interposition", "-std=c11",
         "-ffp-contract=off", "-fvisibility=hidden", "-s")
# gcc's -O3 fuses two iterations of a loop around an inner lane loop (the quantized GEMV of
# tir/schedule/quantized_gemv.py) into one, which it then no longer vectorizes (measured 5x slower).
# clang has no such pass by default and rejects the flag.
GCC_FLAGS = ("-fno-loop-unroll-and-jam",)

# abs() for int32 lives in stdlib.h (an implicit declaration is an error in ISO C); the WASM build
# compiles the prelude without it. f16 bits become a float through _Float16: one instruction with
# F16C (x86-64-v3) or on AArch64, where the prelude's portable helper branches (quantized weights
# read a scale per block, in the hot loop).
NATIVE_INCLUDES = """\
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float tsr_half_bits_to_float(uint32_t h) {
  uint16_t bits = (uint16_t)h; _Float16 f; memcpy(&f, &bits, 2); return (float)f;
}
"""


class NativeBuildError(CodegenError):
    """The C compiler is missing or could not build the kernels."""


class NativeCRenderer(CRenderer):
    """C kernels behind the uniform signature: the arguments unpacked into the names the body uses,
    workgroup memory per call (on the stack: each thread has its own).

    float16 tensors are ``_Float16`` arrays whose values compute as ``float`` (as OpenCL without
    cl_khr_fp16 does), each operation's result rounded to half precision through ``_Float16``."""

    language = "C (native)"
    intrinsics = {**CRenderer.intrinsics, "f16_bits_to_f32": "tsr_half_bits_to_float"}
    lowering = NATIVE_LOWERING
    reserved = C_RESERVED | {"tsr_buffers", "tsr_scalars", "tsr_wg", "wg_begin", "wg_end"}
    scratch_storage = ""
    half_storage = HALF

    def widen_half(self, stored: str) -> str:
        return f"((float){stored})"

    def narrow_half(self, value: str) -> str:
        return f"(({HALF})({value}))"

    def round_half(self, value: str, source: str = "f32") -> str:
        return f"((float)({HALF})({value}))"  # from a double too: one rounding, as a GPU's would be

    def signature(self, entry: str) -> list[str]:
        func = self.func
        lines = ['__attribute__((visibility("default")))',
                 f"void {entry}(void *const *tsr_buffers, const int32_t *tsr_scalars, int32_t nwg_x, int32_t nwg_y, "
                 "int32_t nwg_z, int64_t wg_begin, int64_t wg_end) {"]
        # restrict: the tensors of one launch never overlap and none is bound twice (docs/format.md),
        # which lets the compiler vectorize without run-time alias checks.
        for index, buf in enumerate(func.params):
            c_type = self.element_type(buf)
            lines.append(f"  {c_type} *restrict {self.name(buf.name)} = ({c_type} *)tsr_buffers[{index}];")
        for index, scalar in enumerate(func.scalars):
            lines.append(f"  const int32_t {self.name('sym_' + scalar)} = tsr_scalars[{index}];")
        return lines

    def workgroup_loop(self) -> list[str]:
        return ["  for (int64_t tsr_wg = wg_begin; tsr_wg < wg_end; tsr_wg++) {",
                "    const int32_t wg_x = (int32_t)(tsr_wg % nwg_x);",
                "    const int32_t wg_y = (int32_t)(tsr_wg / nwg_x % nwg_y);",
                "    const int32_t wg_z = (int32_t)(tsr_wg / nwg_x / nwg_y);"]


def emit_native_module(kernels) -> str:
    """One C file of lowered kernels behind the uniform signature."""
    return NATIVE_INCLUDES + emit_c_module(kernels, NativeCRenderer)


def host_machine() -> str:
    """This machine's architecture as toolchains name it: x86_64, aarch64."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def architecture(cpu: str) -> tuple[str, str]:
    """The architecture ``cpu`` runs on and the -march value it builds with."""
    if cpu == NATIVE:
        return host_machine(), NATIVE
    if cpu in ISAS:
        return ISAS[cpu], cpu
    if cpu in ANDROID_ABIS:
        return ANDROID_ABIS[cpu]
    raise NativeBuildError(f"unknown CPU {cpu!r}; known: {NATIVE}, {', '.join([*ISAS, *ANDROID_ABIS])}")


def compiler_for(cpu: str) -> list[str]:
    """The command that builds for ``cpu``: $CC (default cc) on its own architecture, else Debian's
    cross compiler for the other one."""
    machine = architecture(cpu)[0]
    if machine == host_machine():
        return shlex.split(os.environ.get("CC") or "cc")
    cross = f"{machine}-linux-gnu-gcc"
    if shutil.which(cross) is None:
        raise NativeBuildError(f"building for {cpu} ({machine}) on this {host_machine()} machine needs the cross "
                               f"compiler {cross}: install gcc-{machine.replace('_', '-')}-linux-gnu")
    return [cross]


@functools.cache
def is_gcc(compiler: tuple[str, ...]) -> bool:
    """Whether the C compiler is gcc (clang defines __GNUC__ too, and __clang__)."""
    try:
        result = subprocess.run([*compiler, "-dM", "-E", "-x", "c", os.devnull], capture_output=True, text=True)
    except FileNotFoundError:
        return False
    return "#define __GNUC__" in result.stdout and "__clang__" not in result.stdout


def compile_native(source: str, cpu: str) -> bytes:
    """The shared object of a C file from ``emit_native_module``, for ``cpu`` (a -march value, or an
    Android ABI of ANDROID_ABIS)."""
    compiler = compiler_for(cpu)
    flags = FLAGS + (GCC_FLAGS if is_gcc(tuple(compiler)) else ())
    android = cpu in ANDROID_ABIS
    libraries = [*ANDROID_LINK, "-L", "stubs", "-lm", "-lc", "-lgcc"] if android else ["-lm"]
    command = compiler + [*flags, f"-march={architecture(cpu)[1]}", "-o", MODULE, "kernels.c", *libraries]
    # Relative names in a private folder: nothing of the folder's path ends up in the module's bytes.
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "kernels.c"), "w") as f:
            f.write(source)
        if android:
            _write_android_stubs(compiler, folder)
        try:
            result = subprocess.run(command, capture_output=True, text=True, cwd=folder)
        except FileNotFoundError:
            raise NativeBuildError(f"the C compiler {command[0]!r} is not installed (set CC, or install gcc)") \
                from None
        if result.returncode != 0:
            raise NativeBuildError(f"{shlex.join(command)} failed to build the CPU kernels:\n"
                                   f"{result.stderr[-4000:]}\n--- kernels.c ---\n{_numbered(source)}")
        if android:
            _check_android_imports(os.path.join(folder, MODULE), cpu)
        with open(os.path.join(folder, MODULE), "rb") as f:
            return f.read()


def _write_android_stubs(compiler: list[str], folder: str) -> None:
    """Empty shared objects named as bionic's libc.so and libm.so: linking them records the names the
    module needs (DT_NEEDED) without a C library's symbols or versions; Android's loader binds the
    module's references to the phone's libraries."""
    os.makedirs(os.path.join(folder, "stubs"))
    with open(os.path.join(folder, "stubs", "empty.c"), "w") as f:
        f.write("/* a stand-in for an Android system library */\n")
    for name in ("libc.so", "libm.so"):
        command = compiler + ["-nostdlib", "-shared", "-fPIC", f"-Wl,-soname,{name}", "-o",
                              os.path.join("stubs", name), os.path.join("stubs", "empty.c")]
        result = subprocess.run(command, capture_output=True, text=True, cwd=folder)
        if result.returncode != 0:
            raise NativeBuildError(f"{shlex.join(command)} failed to build the stand-in {name}:\n{result.stderr}")


def _check_android_imports(path: str, cpu: str) -> None:
    """Refuses an Android module that imports something bionic may lack, or a versioned symbol."""
    result = subprocess.run(["readelf", "--dyn-syms", "-W", path], capture_output=True, text=True)
    if result.returncode != 0:
        raise NativeBuildError(f"readelf could not read the kernels built for {cpu} (install binutils):\n"
                               f"{result.stderr}")
    imported = {fields[7] for fields in (line.split() for line in result.stdout.splitlines())
                if len(fields) >= 8 and fields[6] == "UND"}
    unknown = sorted(name for name in imported if name.split("@")[0] not in ANDROID_IMPORTS or "@" in name)
    if unknown:
        raise NativeBuildError(f"the kernels built for {cpu} import {', '.join(unknown)}, which Android's libc.so "
                               f"and libm.so are not known to export unversioned")


def _numbered(source: str) -> str:
    return "\n".join(f"{i:5d}  {line}" for i, line in enumerate(source.splitlines(), 1))


class CNativeBackend(Backend):
    name = "c-native"
    language = "C (native shared object)"
    binary = True
    device_kinds = ("cpu",)

    def compile(self, kernels, target, progress=None) -> CompiledKernels:
        cpu = target.cpu or NATIVE
        compiler_for(cpu)  # an unknown CPU or a missing cross compiler fails before the kernels are lowered
        out = CompiledKernels()
        lowered = []
        for index, func in enumerate(kernels):
            if progress is not None:
                progress("kernels", index, len(kernels))
            lowered.append(lower_kernel(func, NATIVE_LOWERING))
            scalars = [{"name": s, "passed": "array", "position": i} for i, s in enumerate(func.scalars)]
            features = [SHADER_F16] if uses_dtype(func, "f16") else []
            out.kernels.append(CompiledKernel(func.name, self.name, MODULE, entry_name(func),
                                              tuple(func.workgroup_size), kernel_abi(func, scalars) | {"grid": "range"},
                                              {"features": features, "limits": kernel_limits(func)}))
        if progress is not None:
            progress("cc", 0, 1)
        out.modules[MODULE] = compile_native(emit_native_module(lowered), cpu)
        return out


register_backend(CNativeBackend())
# Host memory: no binding limits worth the name; workgroup memory is a stack array of each call.
# Decode's quantized GEMVs read activations rounded to 8 bits (as llama.cpp's CPU kernels do), for the
# integer SIMD micro-kernels.
register_kind(TargetKind("cpu", backend="c-native", vector_lanes=False, serial_threads=True, limits=(
    ("maxBufferSize", 1 << 31), ("maxComputeWorkgroupStorageSize", 65536), ("maxStorageBufferBindingSize", 1 << 31),
    ("maxStorageBuffersPerShaderStage", 64)), externs=EXTERNS, quantized_activations="q8",
    dtypes=COMMON_DTYPES | {"float64"}))
register_preset("cpu", "cpu", {SHADER_F16}, cpu_adapter=True, cpu=NATIVE,
                description="C kernels in a shared object for this machine's CPU (-march=native)")
for _isa, _machine in ISAS.items():
    register_preset(f"cpu-{_isa}", "cpu", {SHADER_F16}, cpu_adapter=True, cpu=_isa,
                    description=f"C kernels in a shared object for {_machine} CPUs with {_isa}")
for _abi, (_machine, _isa) in ANDROID_ABIS.items():
    register_preset(f"cpu-{_abi}", "cpu", {SHADER_F16}, cpu_adapter=True, cpu=_abi,
                    description=f"C kernels in a shared object for Android's {_abi.split('-', 1)[1]} ABI "
                                f"({_machine}, {_isa}; bionic's libc.so and libm.so)")
