"""The OpenCL C backend: one ``.cl`` module file per kernel, run by OpenCL devices.

A launch passes the kernel's buffers, then its scalars as ``int`` arguments (positions after the
buffers); the runtime builds each module with ``-cl-std=CL1.2``. Registers the ``opencl`` target
kind and its presets.
"""

from __future__ import annotations

from tessera.target import SHADER_F16, TargetKind, register_kind, register_preset
from tessera.tir.lower import lower_kernel

from .. import ModulePerKernelBackend, register_backend, static_size, uses_dtype
from . import FP16_EXTENSION, LOWERING, emit_opencl


class OpenCLBackend(ModulePerKernelBackend):
    name = "opencl"
    language = "OpenCL C 1.2"
    binary = False
    device_kinds = ("opencl",)
    extension = "cl"

    def render(self, func, target) -> bytes:
        return emit_opencl(lower_kernel(func, LOWERING), target.has(FP16_EXTENSION)).encode()

    def scalar_abi(self, func) -> list[dict]:
        first = len(func.params)
        return [{"name": s, "passed": "argument", "position": first + i} for i, s in enumerate(func.scalars)]

    def requirements(self, func, target) -> dict:
        native_half = target.has(FP16_EXTENSION)
        needs = super().requirements(func, target)  # f16 tensors: core OpenCL 1.2 stores them with vstore_half
        if native_half and uses_dtype(func, "f16"):
            needs["features"].append(FP16_EXTENSION)  # and computes on them as half
        if not native_half:
            needs["limits"]["maxComputeWorkgroupStorageSize"] = _local_bytes_in_float(func)
        return needs


def _local_bytes_in_float(func) -> int:
    """``__local`` bytes where f16 scratch is held as float (4 bytes) for want of half arithmetic."""
    return sum(4 * static_size(buf) for buf in func.scratch if buf.scope == "workgroup")


register_backend(OpenCLBackend())
register_kind(TargetKind("opencl", backend="opencl", split_partner="cpu"))
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
