"""The Metal backend: one ``.metal`` module file per kernel, run by Metal devices (runtime-native on
Apple platforms; no Python device runs them).

Scalars travel in one small constant buffer of i32 right after the kernel's buffers
(``setBytes``), at 4 bytes each in declaration order. Registers the ``metal`` target kind and
preset.
"""

from __future__ import annotations

from tessera.target import SHADER_F16, TargetKind, register_kind, register_preset
from tessera.tir.lower import lower_kernel

from .. import ModulePerKernelBackend, register_backend
from . import LOWERING, emit_metal


class MetalBackend(ModulePerKernelBackend):
    name = "metal"
    language = "Metal Shading Language 2.x"
    binary = False
    device_kinds = ("metal",)
    extension = "metal"

    def render(self, func, target) -> bytes:
        return emit_metal(lower_kernel(func, LOWERING)).encode()

    def scalar_abi(self, func) -> list[dict]:
        return [{"name": s, "passed": "buffer", "binding": len(func.params), "offset": 4 * i}
                for i, s in enumerate(func.scalars)]



register_backend(MetalBackend())
register_kind(TargetKind("metal", backend="metal", split_partner="cpu"))
# Apple GPU family 7 (M1, A14) and later. Metal's own limits, where they differ from WebGPU's:
# - 1024 threads per threadgroup in any shape, 32 KiB of threadgroup memory;
# - a kernel's argument table has 31 buffer slots; the scalars' constant buffer takes one;
# - MTLDevice.maxBufferLength is at least 256 MiB on every family (far more on Macs); a binding
#   may span a whole buffer, so the arena is split at 256 MiB and a tensor may fill one piece;
# - device-buffer offsets need only the element's alignment (16 bytes for float4), but tensors
#   stay 256-byte aligned as for WebGPU so every GPU runtime plans the arena alike.
register_preset("metal", "metal", {SHADER_F16, "subgroup"}, {
    "maxComputeInvocationsPerWorkgroup": 1024,
    "maxComputeWorkgroupSizeX": 1024,
    "maxComputeWorkgroupSizeY": 1024,
    "maxComputeWorkgroupSizeZ": 1024,
    "maxComputeWorkgroupStorageSize": 32768,
    "maxStorageBuffersPerShaderStage": 30,
    "maxBufferSize": 256 << 20,
    "maxStorageBufferBindingSize": 256 << 20,
    "minStorageBufferOffsetAlignment": 256,
}, description="Apple GPUs (family 7+, M1 and later) through Metal")
