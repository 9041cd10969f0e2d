"""The C backend for WebAssembly: every kernel in one C file, built by clang into ``kernels.wasm``.

A launch is a call of the kernel's export with the buffers' addresses in the module's memory,
then the scalars, then the grid's three workgroup counts (all i32). Registers the ``wasm`` target
kind and preset.

Beside it, ``kernels-threads.wasm`` holds the same kernels for a pool of threads over one shared
memory (runtime-js's Web Workers): each export takes two more i32 arguments, the flattened workgroups
``[wg_begin, wg_end)`` the call runs (x fastest, then y, then z), and keeps its workgroup memory on
its thread's stack, so that threads run parts of one launch at once. No kernel record names that
module (its ``backend`` in executable.json's modules is null); a runtime that has no threads
ignores it, and the single-threaded module's exports are unchanged.
"""

from __future__ import annotations

from tessera.target import COMMON_DTYPES, SHADER_F16, TargetKind, register_kind, register_preset
from tessera.tir.lower import lower_kernel

from .. import (
    Backend,
    CompiledKernel,
    CompiledKernels,
    entry_name,
    kernel_abi,
    kernel_limits,
    register_backend,
    uses_dtype,
)
from . import C_RESERVED, EXTERNS, LOWERING, CRenderer, emit_c_module
from .wasm_build import compile_wasm_pair

MODULE = "kernels.wasm"
THREADS_MODULE = "kernels-threads.wasm"


class ThreadedWasmRenderer(CRenderer):
    """A kernel of the threaded module: the single-threaded export's arguments and a range of
    workgroups, workgroup memory a local array of each call (each thread's stack holds its own)."""

    reserved = C_RESERVED | {"tsr_wg", "wg_begin", "wg_end"}
    scratch_storage = ""

    def signature(self, entry: str) -> list[str]:
        lines = super().signature(entry)
        lines[-1] = lines[-1].replace("int32_t nwg_z) {", "int32_t nwg_z, int32_t wg_begin, int32_t wg_end) {")
        return lines

    def workgroup_loop(self) -> list[str]:
        return ["  for (int32_t tsr_wg = wg_begin; tsr_wg < wg_end; tsr_wg++) {",
                "    const int32_t wg_x = tsr_wg % nwg_x;",
                "    const int32_t wg_y = tsr_wg / nwg_x % nwg_y;",
                "    const int32_t wg_z = tsr_wg / nwg_x / nwg_y;"]


class CWasmBackend(Backend):
    name = "c-wasm"
    language = "C (WebAssembly)"
    binary = True
    device_kinds = ("wasm",)

    def compile(self, kernels, target, progress=None) -> CompiledKernels:
        out = CompiledKernels()
        lowered = []
        for index, func in enumerate(kernels):
            if progress is not None:
                progress("kernels", index, len(kernels))
            lowered.append(lower_kernel(func, LOWERING))
            first = len(func.params)
            scalars = [{"name": s, "passed": "argument", "position": first + i} for i, s in enumerate(func.scalars)]
            abi = kernel_abi(func, scalars) | {"grid": "arguments"}
            features = [SHADER_F16] if uses_dtype(func, "f16") else []
            out.kernels.append(CompiledKernel(func.name, self.name, MODULE, entry_name(func),
                                              tuple(func.workgroup_size), abi,
                                              {"features": features, "limits": kernel_limits(func)}))
        if progress is not None:
            progress("clang", 0, 1)
        out.modules[MODULE], out.modules[THREADS_MODULE] = compile_wasm_pair(
            emit_c_module(lowered), emit_c_module(lowered, ThreadedWasmRenderer))
        return out


register_backend(CWasmBackend())
# WebAssembly: one 4 GiB memory, no binding limits worth the name; workgroups run a thread at a time.
# Decode's quantized GEMVs read activations rounded to 8 bits, for the micro-kernels' SIMD128 dot
# products (as on the cpu kind).
register_kind(TargetKind("wasm", backend="c-wasm", vector_lanes=False, serial_threads=True, limits=(
    ("maxBufferSize", 1 << 31), ("maxComputeWorkgroupStorageSize", 65536), ("maxStorageBufferBindingSize", 1 << 31),
    ("maxStorageBuffersPerShaderStage", 64)), externs=EXTERNS, quantized_activations="q8",
    dtypes=COMMON_DTYPES | {"float64"}))
# f16 tensors are halves in memory computed as floats (codegen/c), so every WebAssembly engine has
# shader-f16 in this sense: kernels that hold f16 name it, as on the cpu kind.
register_preset("wasm", "wasm", {SHADER_F16}, cpu_adapter=True,
                description="C kernels compiled to WebAssembly (any CPU)")
