"""The OpenCL C backend: one ``.cl`` module file per kernel, run by OpenCL devices.

A launch passes the kernel's buffers, then its scalars as ``int`` arguments (positions after the
buffers); the runtime builds each module with ``-cl-std=CL1.2``. Registers the ``opencl`` target
kind and its presets.
"""

from __future__ import annotations

from tessera.target import SHADER_F16, TargetKind, register_kind, register_preset
from tessera.tir.lower import lower_kernel

from .. import (
    Backend,
    CompiledKernel,
    CompiledKernels,
    entry_name,
    kernel_abi,
    kernel_limits,
    register_backend,
    static_size,
    uses_dtype,
)
from . import FP16_EXTENSION, LOWERING, emit_opencl


class OpenCLBackend(Backend):
    name = "opencl"
    language = "OpenCL C 1.2"
    binary = False
    device_kinds = ("opencl",)

    def compile(self, kernels, target, progress=None) -> CompiledKernels:
        out = CompiledKernels()
        native_half = target.has(FP16_EXTENSION)
        for index, func in enumerate(kernels):
            if progress is not None:
                progress("kernels", index, len(kernels))
            entry = entry_name(func)
            path = f"kernels/{index:03d}_{entry}.cl"
            out.modules[path] = emit_opencl(lower_kernel(func, LOWERING), native_half).encode()
            first = len(func.params)
            scalars = [{"name": s, "passed": "argument", "position": first + i} for i, s in enumerate(func.scalars)]
            features = []
            if uses_dtype(func, "f16"):
                features.append(SHADER_F16)  # f16 tensors: core OpenCL 1.2 stores them with vstore_half
                if native_half:
                    features.append(FP16_EXTENSION)  # and computes on them as half
            limits = kernel_limits(func)
            if not native_half:
                limits["maxComputeWorkgroupStorageSize"] = _local_bytes_in_float(func)
            out.kernels.append(CompiledKernel(func.name, self.name, path, entry, tuple(func.workgroup_size),
                                              kernel_abi(func, scalars), {"features": features, "limits": limits}))
        return out


def _local_bytes_in_float(func) -> int:
    """``__local`` bytes where f16 scratch is held as float (4 bytes) for want of half arithmetic."""
    return sum(4 * static_size(buf) for buf in func.scratch if buf.scope == "workgroup")


register_backend(OpenCLBackend())
register_kind(TargetKind("opencl", backend="opencl"))
# vload_half/vstore_half are core OpenCL 1.2, so f16 tensors are allowed everywhere (computed in float).
register_preset("opencl", "opencl", {SHADER_F16},
                description="an OpenCL 1.2 GPU of an older Android phone (Adreno/Mali): WebGPU's default limits")
register_preset("pocl", "opencl", {SHADER_F16}, {
    "maxComputeInvocationsPerWorkgroup": 1024,
    "maxComputeWorkgroupSizeX": 1024,
    "maxComputeWorkgroupSizeY": 1024,
    "maxComputeWorkgroupStorageSize": 32768,
    "maxStorageBuffersPerShaderStage": 32,
}, cpu_adapter=True, description="PoCL on this machine's CPU")
