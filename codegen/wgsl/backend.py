"""The WGSL backend: one ``.wgsl`` module file per kernel, run by WebGPU devices.

Registers the ``webgpu`` target kind and the presets users pick with ``--target``.
"""

from __future__ import annotations

from tessera.target import SHADER_F16, TargetKind, register_kind, register_preset
from tessera.tir.lower import lower_kernel

from .. import Backend, CompiledKernel, CompiledKernels, kernel_abi, kernel_limits, register_backend, uses_dtype
from . import LOWERING, emit_wgsl


class WGSLBackend(Backend):
    name = "wgsl"
    language = "WGSL"
    binary = False
    device_kinds = ("webgpu",)

    def compile(self, kernels, target, progress=None) -> CompiledKernels:
        out = CompiledKernels()
        # Browsers want `enable subgroups;` before subgroup builtins; naga (wgpu-native) rejects it.
        subgroups = target.subgroup_feature
        for index, func in enumerate(kernels):
            if progress is not None:
                progress("kernels", index, len(kernels))
            uses_subgroups = bool(func.attrs.get("subgroups"))
            enable = ("subgroups",) if uses_subgroups and subgroups == "subgroups" else ()
            kernel = emit_wgsl(lower_kernel(func, LOWERING), enable)
            path = f"kernels/{index:03d}_{kernel.entry_point}.wgsl"
            out.modules[path] = kernel.source.encode()
            features = []
            if uses_dtype(func, "f16"):
                features.append(SHADER_F16)
            if uses_subgroups:
                features.append(subgroups)
            scalars = [{"name": s, "passed": "uniform", "binding": len(func.params), "offset": 4 * i}
                       for i, s in enumerate(func.scalars)]
            out.kernels.append(CompiledKernel(
                func.name, self.name, path, kernel.entry_point, tuple(kernel.workgroup_size),
                kernel_abi(func, scalars), {"features": features, "limits": kernel_limits(func)}))
        return out


register_backend(WGSLBackend())
register_kind(TargetKind("webgpu", backend="wgsl"))
register_preset("webgpu", "webgpu", description="any WebGPU device: the spec-default limits, no optional feature")
register_preset("webgpu-f16", "webgpu", {SHADER_F16}, description="WebGPU devices with shader-f16")
register_preset("llvmpipe", "webgpu", {SHADER_F16, "subgroup", "timestamp-query"}, {
    "maxComputeWorkgroupStorageSize": 32768,
    "maxComputeInvocationsPerWorkgroup": 1024,
    "maxComputeWorkgroupSizeX": 1024,
    "maxComputeWorkgroupSizeY": 1024,
    "maxStorageBuffersPerShaderStage": 32,
}, cpu_adapter=True, description="Mesa's CPU Vulkan driver behind wgpu-py")
# Chromium names the feature "subgroups" and wants `enable subgroups;` in WGSL.
register_preset("swiftshader", "webgpu", {"subgroups"}, {"maxStorageBuffersPerShaderStage": 10}, cpu_adapter=True,
                description="Chromium's CPU WebGPU adapter")
