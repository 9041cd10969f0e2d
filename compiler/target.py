"""Compilation targets: a kind plus the features and limits kernels may rely on.

    Target("webgpu")                             # WebGPU spec defaults: every adapter has these
    Target("webgpu", features={"shader-f16"})    # kernels may use f16
    Target.preset("llvmpipe")                    # Mesa's CPU Vulkan driver behind wgpu-py
    Target.preset("swiftshader")                 # Chromium's CPU WebGPU adapter
    Target.preset("wasm")                        # C kernels compiled to WebAssembly (codegen/c)

Schedule rules size workgroups and workgroup memory from ``limits``; the
executable records what its kernels need so that loading on a smaller device
fails with a message that names the limit (DESIGN.md section 5).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# WebGPU spec defaults (DESIGN.md section 5).
WEBGPU_DEFAULT_LIMITS = {
    "maxStorageBufferBindingSize": 128 << 20,
    "maxBufferSize": 256 << 20,
    "maxComputeWorkgroupStorageSize": 16384,
    "maxComputeInvocationsPerWorkgroup": 256,
    "maxComputeWorkgroupSizeX": 256,
    "maxComputeWorkgroupSizeY": 256,
    "maxComputeWorkgroupSizeZ": 64,
    "maxStorageBuffersPerShaderStage": 8,
    "maxBindGroups": 4,
    "minStorageBufferOffsetAlignment": 256,
    "maxComputeWorkgroupsPerDimension": 65535,
}

# Tensor dtypes each kind can hold in kernels. WebGPU has no 64-bit floats;
# int64 tensors are stored as pairs of 32-bit words (see docs/kernels.md).
_DTYPES = {
    "webgpu": {"float32", "int32", "uint32", "bool", "int64"},
    # C kernels for WebAssembly (codegen/c): the same tensors, run a workgroup at a time on the CPU.
    "wasm": {"float32", "int32", "uint32", "bool", "int64"},
}

_PRESETS = {
    # name: (features, limits beyond the defaults, CPU adapter?)
    "webgpu": ({}, {}, False),
    "webgpu-f16": ({"shader-f16"}, {}, False),
    "llvmpipe": ({"shader-f16", "subgroup", "timestamp-query"}, {
        "maxComputeWorkgroupStorageSize": 32768,
        "maxComputeInvocationsPerWorkgroup": 1024,
        "maxComputeWorkgroupSizeX": 1024,
        "maxComputeWorkgroupSizeY": 1024,
        "maxStorageBuffersPerShaderStage": 32,
    }, True),
    # Chromium names the feature "subgroups" and wants `enable subgroups;` in WGSL.
    "swiftshader": ({"subgroups"}, {"maxStorageBuffersPerShaderStage": 10}, True),
    # WebAssembly: one 4 GiB memory, no binding limits worth the name; workgroups run a thread at a time.
    "wasm": ({}, {"maxStorageBuffersPerShaderStage": 64, "maxComputeWorkgroupStorageSize": 65536,
                  "maxBufferSize": 1 << 31, "maxStorageBufferBindingSize": 1 << 31}, True),
}
_PRESET_KINDS = {"wasm": "wasm"}  # the others are webgpu


@dataclass(frozen=True)
class Target:
    kind: str
    features: frozenset[str] = field(default_factory=frozenset)
    limits: tuple[tuple[str, int], ...] = ()
    name: str = ""
    cpu_adapter: bool = False

    def __init__(self, kind: str, features=(), limits=None, name: str = "", cpu_adapter: bool = False):
        """``cpu_adapter``: the device is a CPU emulating a GPU (llvmpipe, SwiftShader), where
        workgroup memory and barriers cost more than they save and per-thread work should be wide."""
        if kind not in _DTYPES:
            raise ValueError(f"unknown target kind {kind!r}; known: {', '.join(sorted(_DTYPES))}")
        merged = dict(WEBGPU_DEFAULT_LIMITS)
        merged.update(limits or {})
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "features", frozenset(features))
        object.__setattr__(self, "limits", tuple(sorted(merged.items())))
        object.__setattr__(self, "name", name or kind)
        object.__setattr__(self, "cpu_adapter", cpu_adapter)

    @staticmethod
    def preset(name: str) -> Target:
        if name not in _PRESETS:
            raise ValueError(f"unknown target preset {name!r}; known: {', '.join(sorted(_PRESETS))}")
        features, limits, cpu_adapter = _PRESETS[name]
        return Target(_PRESET_KINDS.get(name, "webgpu"), features, limits, name, cpu_adapter)

    def limit(self, key: str) -> int:
        return dict(self.limits)[key]

    def has(self, feature: str) -> bool:
        return feature in self.features

    def supports_dtype(self, dtype: str) -> bool:
        if dtype == "float16":
            return self.has("shader-f16")
        return dtype in _DTYPES[self.kind]

    def __str__(self) -> str:
        extra = f" with {', '.join(sorted(self.features))}" if self.features else ""
        return f"{self.name}{extra}"
