"""Compilation targets: a device kind plus the features and limits kernels may rely on.

    Target("webgpu")                             # WebGPU spec defaults: every adapter has these
    Target("webgpu", features={"shader-f16"})    # kernels may use f16
    Target.preset("llvmpipe")                    # Mesa's CPU Vulkan driver behind wgpu-py
    Target.preset("swiftshader")                 # Chromium's CPU WebGPU adapter
    Target.preset("wasm")                        # C kernels compiled to WebAssembly (codegen/c)
    Target.preset("cpu-x86-64-v3")               # C kernels compiled for x86-64 with AVX2 (codegen/c)

A target is asked by capability, never by name: schedule rules size workgroups and workgroup
memory from ``limit(...)``, use vector types when ``vector_lanes`` says the language has them,
subgroup reductions when ``subgroup_feature`` names one, and the memory planner aligns tensors to
``storage_alignment``. The executable records what its kernels need so that loading on a smaller
device fails with a message that names the limit (docs/kernels.md, section 6).

This module imports only ``tessera.facts``. Device kinds and presets are registered by the codegen
backends (``tessera.codegen``), each from its own folder; the facts every backend shares (the limit
names and their WebGPU defaults, the feature names) are stated here, once, the defaults in
compiler/facts.json, which the other runtimes share too (docs/facts.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import facts

# Limit names (WebGPU's spelling, which every runtime's device maps to its own API) and the values
# every WebGPU adapter grants (docs/kernels.md, section 6). Other kinds start from these and raise them.
LIMIT_DEFAULTS = dict(facts.WEBGPU_DEFAULT_LIMITS)

# The limits an executable records as requirements (checked by every runtime before it loads).
REQUIRED_LIMITS = ("maxComputeInvocationsPerWorkgroup", "maxStorageBuffersPerShaderStage",
                   "maxComputeWorkgroupStorageSize", "maxBufferSize", "maxStorageBufferBindingSize")

# Feature names. Subgroup operations go by two names: "subgroup" in wgpu-native (no directive in
# the kernel) and "subgroups" in browsers (which want `enable subgroups;`).
SHADER_F16 = "shader-f16"
# Mesa's CPU drivers (llvmpipe behind WebGPU, lavapipe behind Vulkan) end every loop of an
# invocation once that invocation has run this many loop iterations in all, silently (gallivm's
# loop limiter, LP_MAX_TGSI_LOOP_ITERATIONS, shared by all loops of a shader): kernels for them
# must keep each invocation's loops within it.
MESA_LOOP_BUDGET = 65535
SUBGROUP_FEATURES = ("subgroups", "subgroup")
TIMESTAMP_QUERY = "timestamp-query"


def limit_key(name: str) -> str:
    """A limit's name in kebab case, as wgpu-py spells it: maxBufferSize -> max-buffer-size."""
    return "".join("-" + c.lower() if c.isupper() else c for c in name)


# The tensor dtypes every kind's kernels hold (float16 needs the shader-f16 feature besides). float64 is
# not among them: WGSL has no f64 and the other GPU languages only optionally; C kinds add it.
COMMON_DTYPES = frozenset({"float32", "int32", "uint32", "bool", "int64", "int8", "uint8", "int16", "uint16",
                           "uint64"})


@dataclass(frozen=True)
class TargetKind:
    """A kind of device that runs kernels, as a backend registers it.

    ``backend``: the codegen backend that writes its kernels; ``dtypes``: tensor dtypes its kernels
    hold (float16 additionally needs the shader-f16 feature); ``vector_lanes``: whether kernels may
    use vector types (C kernels are scalar: the C compiler vectorizes their thread loops itself);
    ``serial_threads``: a workgroup's threads run one after another, as a loop on one CPU thread
    (C kernels), so a thread's own inner loops are what the compiler vectorizes;
    ``limits``: raised limits every device of the kind has; ``externs``: the micro-kernels of the
    backend's library its kernels may call (tir ``Extern``); ``quantized_activations``: how a
    model's quantized GEMVs read their activations when compiled for it ("q8": rounded to 8 bits,
    for integer SIMD dot products; op/quantized.py); ``split_partner``: for a GPU kind, the CPU preset
    a model split across devices (``tessera compile --gpu-layers``) runs its other layers on, the one
    a runtime of this kind has beside it (WASM in a browser); "" for a kind that is not split."""

    name: str
    backend: str
    dtypes: frozenset[str] = COMMON_DTYPES
    vector_lanes: bool = True
    serial_threads: bool = False
    limits: tuple[tuple[str, int], ...] = ()
    externs: frozenset[str] = frozenset()
    quantized_activations: str = ""
    split_partner: str = ""


@dataclass(frozen=True)
class _Preset:
    kind: str
    features: frozenset[str]
    limits: tuple[tuple[str, int], ...]
    cpu_adapter: bool
    description: str
    cpu: str
    activation_dtype: str
    loop_budget: int


_KINDS: dict[str, TargetKind] = {}
_PRESETS: dict[str, _Preset] = {}


def register_kind(kind: TargetKind) -> None:
    _KINDS[kind.name] = kind


def register_preset(name: str, kind: str, features=(), limits: dict[str, int] | None = None,
                    cpu_adapter: bool = False, description: str = "", cpu: str = "",
                    activation_dtype: str = "float32", loop_budget: int = 0) -> None:
    """A named target users pick with ``--target NAME``: a kind with its features and limits (and,
    for kinds whose code is machine code, the ``cpu`` it is built for; ``activation_dtype`` and
    ``loop_budget``: see ``Target``)."""
    if kind not in _KINDS:
        raise ValueError(f"preset {name!r} names the unknown target kind {kind!r}")
    unknown = set(limits or {}) - set(LIMIT_DEFAULTS)
    if unknown:
        raise ValueError(f"preset {name!r} sets unknown limits {', '.join(sorted(unknown))}")
    if activation_dtype == "float16" and SHADER_F16 not in features:
        raise ValueError(f"preset {name!r} computes in float16 but lacks the {SHADER_F16} feature")
    _PRESETS[name] = _Preset(kind, frozenset(features), tuple(sorted((limits or {}).items())), cpu_adapter,
                             description, cpu, activation_dtype, loop_budget)


def presets() -> dict[str, str]:
    """Every registered preset with its kind and description, for people choosing a ``--target``."""
    return {name: f"{p.kind}: {p.description}" if p.description else p.kind for name, p in _PRESETS.items()}


# runtime-native's devices (its device table, runtime-native/src/devices.c), each named like the target
# kind whose kernels it runs, with what users call it.
NATIVE_DEVICE_LABELS = {"cpu": "CPU", "vulkan": "Vulkan", "opencl": "OpenCL", "metal": "Metal"}

# What `tessera package --target PLATFORM` builds (compiler/app/package.py), in the order an app tries them:
# (folder, preset, the runtime device that loads it, the Android ABI whose CPU runs it or ""). A phone's
# GPU API first, then its CPU, whose kernels are machine code per ABI, linked for Android's bionic.
MOBILE_BUILDS = {
    "android": (("vulkan", "vulkan", "vulkan", ""),
                ("cpu-arm64-v8a", "cpu-android-arm64-v8a", "cpu", "arm64-v8a"),
                ("cpu-x86_64", "cpu-android-x86_64", "cpu", "x86_64")),
    "ios": (("metal", "metal", "metal", ""),),
}
# A split package (--gpu-layers): the GPU preset and the CPU preset of its other half, with that ABI;
# a platform without one cannot load a CPU build's kernels (iOS runs only code signed into the app).
MOBILE_SPLIT = {"android": ("vulkan", "cpu-android-arm64-v8a", "arm64-v8a")}

# Kinds whose kernels run on the host's CPU (C compiled natively or to WebAssembly). Every other kind
# drives a GPU API, even when a CPU emulates the GPU (llvmpipe, SwiftShader): a program sees a GPU.
HOST_KINDS = frozenset({"cpu", "wasm"})


def device_type(kind_or_preset: str) -> str:
    """"cpu" or "gpu": the kind of physical device a target kind (or a preset, by its kind) runs on;
    what ``R.hint_on_device(x, "cpu")`` matches a vdevice by. A kind not registered is taken to be a GPU."""
    preset = _PRESETS.get(kind_or_preset)
    kind = preset.kind if preset is not None else kind_or_preset
    return "cpu" if kind in HOST_KINDS else "gpu"


@dataclass(frozen=True)
class Target:
    kind: str
    features: frozenset[str] = field(default_factory=frozenset)
    limits: tuple[tuple[str, int], ...] = ()
    name: str = ""
    cpu_adapter: bool = False
    cpu: str = ""
    activation_dtype: str = "float32"
    loop_budget: int = 0

    def __init__(self, kind: str, features=(), limits=None, name: str = "", cpu_adapter: bool = False,
                 cpu: str = "", activation_dtype: str = "float32", loop_budget: int = 0):
        """``cpu_adapter``: the device is a CPU emulating a GPU (llvmpipe, SwiftShader, WASM), where
        workgroup memory and barriers cost more than they save and per-thread work should be wide.
        ``cpu``: the instruction set machine code is built for (a compiler's ``-march`` value such as
        ``x86-64-v3``, or ``native``: this machine's); empty for kinds whose modules a driver compiles.
        ``activation_dtype``: the float type a model's activations and KV cache are kept in;
        "float16" (which needs shader-f16) halves their memory and traffic, while reductions,
        softmax and dot products still accumulate in float32 (transform/mixed_precision.py).
        ``loop_budget``: the most loop iterations one invocation may run, all its loops together
        (``MESA_LOOP_BUDGET`` on Mesa's CPU drivers); 0 when the driver sets no such bound."""
        if activation_dtype not in ("float32", "float16"):
            raise ValueError(f"activation_dtype must be float32 or float16, got {activation_dtype!r}")
        if kind not in _KINDS:
            raise ValueError(f"unknown target kind {kind!r}; known: {', '.join(sorted(_KINDS))}")
        merged = dict(LIMIT_DEFAULTS)
        merged.update(_KINDS[kind].limits)
        merged.update(limits or {})
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "features", frozenset(features))
        object.__setattr__(self, "limits", tuple(sorted(merged.items())))
        object.__setattr__(self, "name", name or kind)
        object.__setattr__(self, "cpu_adapter", cpu_adapter)
        object.__setattr__(self, "cpu", cpu)
        object.__setattr__(self, "activation_dtype", activation_dtype)
        object.__setattr__(self, "loop_budget", int(loop_budget))

    @staticmethod
    def preset(name: str) -> Target:
        if name not in _PRESETS:
            raise ValueError(f"unknown target preset {name!r}; known: {', '.join(sorted(_PRESETS))}")
        p = _PRESETS[name]
        return Target(p.kind, p.features, dict(p.limits), name, p.cpu_adapter, p.cpu, p.activation_dtype,
                      p.loop_budget)

    # -- capabilities --------------------------------------------------------------------------

    @property
    def backend(self) -> str:
        """The codegen backend that writes this target's kernels."""
        return _KINDS[self.kind].backend

    def limit(self, key: str) -> int:
        return dict(self.limits)[key]

    def has(self, feature: str) -> bool:
        return feature in self.features

    def supports_dtype(self, dtype: str) -> bool:
        if dtype == "float16":
            return self.has(SHADER_F16)
        return dtype in _KINDS[self.kind].dtypes

    @property
    def vector_lanes(self) -> bool:
        """Kernels may read and write vectors (vec4) of a buffer."""
        return _KINDS[self.kind].vector_lanes

    @property
    def serial_threads(self) -> bool:
        """A workgroup's threads run one after another on one CPU thread: adjacent threads are not
        SIMD lanes, and a rule gets vector code from contiguous loops within one thread instead."""
        return _KINDS[self.kind].serial_threads

    def has_extern(self, name: str) -> bool:
        """Whether kernels for this target may call the micro-kernel ``name``."""
        return name in _KINDS[self.kind].externs

    @property
    def quantized_activations(self) -> str:
        """How a model's quantized GEMVs read activations on this target ("" or "q8")."""
        return _KINDS[self.kind].quantized_activations

    @property
    def split_partner(self) -> str:
        """The CPU preset a split build of this (GPU) target pairs it with; "" when it has none."""
        return _KINDS[self.kind].split_partner

    @property
    def subgroup_feature(self) -> str | None:
        """The name under which this target has subgroup operations, or None."""
        return next((name for name in SUBGROUP_FEATURES if self.has(name)), None)

    @property
    def storage_alignment(self) -> int:
        """Bytes every tensor's offset in an arena buffer is a multiple of."""
        return self.limit("minStorageBufferOffsetAlignment")

    def __str__(self) -> str:
        extra = f" with {', '.join(sorted(self.features))}" if self.features else ""
        if self.activation_dtype != "float32":
            extra += f", {self.activation_dtype} activations"
        return f"{self.name}{extra}"
