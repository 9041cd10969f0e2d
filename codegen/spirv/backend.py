"""The SPIR-V backend: one ``.spv`` module file per kernel, run by Vulkan devices.

Registers the ``vulkan`` target kind and its presets. A kernel's scalars are passed as push
constants (``{"passed": "push_constant", "offset": 4 * i}`` in the ABI).
"""

from __future__ import annotations

from tessera.target import MESA_LOOP_BUDGET, SHADER_F16, TargetKind, register_kind, register_preset
from tessera.tir.lower import lower_kernel

from .. import ModulePerKernelBackend, register_backend
from . import LOWERING, emit_spirv


class SPIRVBackend(ModulePerKernelBackend):
    name = "spirv"
    language = "SPIR-V"
    binary = True
    device_kinds = ("vulkan",)
    extension = "spv"

    def render(self, func, target) -> bytes:
        return emit_spirv(lower_kernel(func, LOWERING)).binary

    def scalar_abi(self, func) -> list[dict]:
        return [{"name": s, "passed": "push_constant", "offset": 4 * i} for i, s in enumerate(func.scalars)]



register_backend(SPIRVBackend())
register_kind(TargetKind("vulkan", backend="spirv", split_partner="cpu"))
# WebGPU's spec-default limits are what Chrome on Android guarantees on such GPUs.
register_preset("vulkan", "vulkan", description="a Vulkan 1.1 GPU of a mid-range Android phone: the WebGPU "
                                                "spec-default limits, no optional feature")
register_preset("lavapipe", "vulkan", {SHADER_F16, "subgroup"}, {
    "maxComputeWorkgroupStorageSize": 32768,
    "maxComputeInvocationsPerWorkgroup": 1024,
    "maxComputeWorkgroupSizeX": 1024,
    "maxComputeWorkgroupSizeY": 1024,
    "maxStorageBuffersPerShaderStage": 32,
}, cpu_adapter=True, loop_budget=MESA_LOOP_BUDGET, description="Mesa's CPU Vulkan driver")
