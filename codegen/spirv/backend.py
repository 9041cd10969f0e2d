"""The SPIR-V backend: one ``.spv`` module file per kernel, run by Vulkan devices.

Registers the ``vulkan`` target kind and its presets. A kernel's scalars are passed as push
constants (``{"passed": "push_constant", "offset": 4 * i}`` in the ABI).
"""

from __future__ import annotations

from tessera.target import SHADER_F16, TargetKind, register_kind, register_preset
from tessera.tir.ir import walk_dtypes
from tessera.tir.lower import lower_kernel

from .. import Backend, CompiledKernel, CompiledKernels, kernel_abi, kernel_limits, register_backend
from . import LOWERING, emit_spirv


class SPIRVBackend(Backend):
    name = "spirv"
    language = "SPIR-V"
    binary = True
    device_kinds = ("vulkan",)

    def compile(self, kernels, target, progress=None) -> CompiledKernels:
        out = CompiledKernels()
        for index, func in enumerate(kernels):
            if progress is not None:
                progress("kernels", index, len(kernels))
            kernel = emit_spirv(lower_kernel(func, LOWERING))
            path = f"kernels/{index:03d}_{kernel.entry_point}.spv"
            out.modules[path] = kernel.binary
            features = []
            if "f16" in {d.split("x")[0] for d in walk_dtypes(func)}:
                features.append(SHADER_F16)
            if func.attrs.get("subgroups"):
                features.append(target.subgroup_feature)
            scalars = [{"name": s, "passed": "push_constant", "offset": 4 * i} for i, s in enumerate(func.scalars)]
            out.kernels.append(CompiledKernel(
                func.name, self.name, path, kernel.entry_point, tuple(kernel.workgroup_size),
                kernel_abi(func, scalars), {"features": features, "limits": kernel_limits(func)}))
        return out


register_backend(SPIRVBackend())
register_kind(TargetKind("vulkan", backend="spirv"))
# WebGPU's spec-default limits are what Chrome on Android guarantees on such GPUs.
register_preset("vulkan", "vulkan", description="a Vulkan 1.1 GPU of a mid-range Android phone: the WebGPU "
                                                "spec-default limits, no optional feature")
register_preset("lavapipe", "vulkan", {SHADER_F16, "subgroup"}, {
    "maxComputeWorkgroupStorageSize": 32768,
    "maxComputeInvocationsPerWorkgroup": 1024,
    "maxComputeWorkgroupSizeX": 1024,
    "maxComputeWorkgroupSizeY": 1024,
    "maxStorageBuffersPerShaderStage": 32,
}, cpu_adapter=True, description="Mesa's CPU Vulkan driver")
