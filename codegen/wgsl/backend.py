"""The WGSL backend: one ``.wgsl`` module file per kernel, run by WebGPU devices.

Registers the ``webgpu`` target kind and the presets users pick with ``--target``.
"""

from __future__ import annotations

from tessera.target import MESA_LOOP_BUDGET, SHADER_F16, TargetKind, register_kind, register_preset
from tessera.tir.lower import lower_kernel

from .. import ModulePerKernelBackend, register_backend
from . import LOWERING, emit_wgsl


class WGSLBackend(ModulePerKernelBackend):
    name = "wgsl"
    language = "WGSL"
    binary = False
    device_kinds = ("webgpu",)
    extension = "wgsl"

    def render(self, func, target) -> bytes:
        # Browsers want `enable subgroups;` before subgroup builtins; naga (wgpu-native) rejects it.
        wanted = func.attrs.get("subgroups") and target.subgroup_feature == "subgroups"
        return emit_wgsl(lower_kernel(func, LOWERING), ("subgroups",) if wanted else ()).source.encode()

    def scalar_abi(self, func) -> list[dict]:
        return [{"name": s, "passed": "uniform", "binding": len(func.params), "offset": 4 * i}
                for i, s in enumerate(func.scalars)]



register_backend(WGSLBackend())
register_kind(TargetKind("webgpu", backend="wgsl", split_partner="wasm"))
register_preset("webgpu", "webgpu", description="any WebGPU device: the spec-default limits, no optional feature")
register_preset("webgpu-f16", "webgpu", {SHADER_F16}, activation_dtype="float16",
                description="WebGPU devices with shader-f16: activations and the KV cache in float16")
register_preset("llvmpipe", "webgpu", {SHADER_F16, "subgroup", "timestamp-query"}, {
    "maxComputeWorkgroupStorageSize": 32768,
    "maxComputeInvocationsPerWorkgroup": 1024,
    "maxComputeWorkgroupSizeX": 1024,
    "maxComputeWorkgroupSizeY": 1024,
    "maxStorageBuffersPerShaderStage": 32,
}, cpu_adapter=True, loop_budget=MESA_LOOP_BUDGET, description="Mesa's CPU Vulkan driver behind wgpu-py")
# Chromium names the feature "subgroups" and wants `enable subgroups;` in WGSL.
register_preset("swiftshader", "webgpu", {"subgroups"}, {"maxStorageBuffersPerShaderStage": 10}, cpu_adapter=True,
                description="Chromium's CPU WebGPU adapter")
