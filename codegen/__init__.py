"""Kernel code generators: a registry of backends, one folder per language.

A backend turns scheduled (and lowered) tir kernels into the module files of an executable folder:
WGSL text for WebGPU, a WebAssembly binary built from C, and later SPIR-V, OpenCL C, Metal. Each
backend lives in its own folder and registers itself here with

- its name (``"wgsl"``), the language it emits and whether its modules are text or binary;
- the runtime device kinds that can run its modules (``("webgpu",)``);
- its target kind and presets (``tessera.target.register_kind`` / ``register_preset``).

``tessera.build`` asks ``backend_for(target)`` and calls ``compile``; nothing outside a backend's
folder (and ``target.py``) asks which language or target kind it is dealing with. A kernel record
in the executable is target-neutral (docs/format.md): the backend's name, the module file, the
entry point, the workgroup size, the ABI (bindings and scalars), and the features and limits it
needs. See docs/architecture.md for a worked "adding a language" example.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from tessera import arith
from tessera.ir.errors import TesseraError
from tessera.target import REQUIRED_LIMITS, SHADER_F16, Target
from tessera.tir.ir import Buffer, Load, PrimFunc, Store, lanes_of, walk_dtypes, walk_expr, walk_stmts

# Bytes of an element in workgroup memory (which holds compute types, not storage types).
_SCRATCH_BYTES = {"f16": 2}


class CodegenError(TesseraError):
    """A kernel the target's language cannot spell (a NaN constant under fast math, a builtin the
    language lacks ...); the message names the kernel."""


@dataclass(frozen=True)
class CompiledKernel:
    """One kernel as the runtimes see it. ``abi``: {"bindings": [{"index", "tensor", "dtype",
    "access", "role"}], "scalars": [{"name", "passed", ...}]}; ``requirements``: {"features": [...],
    "limits": {name: value}}."""

    name: str
    backend: str
    module: str
    entry_point: str
    workgroup_size: tuple[int, int, int]
    abi: dict
    requirements: dict

    def record(self, func: PrimFunc) -> dict:
        """The executable's kernel record: this plus what the tir states for every backend."""
        return {"name": self.name, "backend": self.backend, "module": self.module, "entry_point": self.entry_point,
                "workgroup_size": list(self.workgroup_size), "abi": self.abi,
                "grid": [arith.to_source(g) for g in func.grid], "requirements": self.requirements,
                "rule": func.attrs.get("rule"), "pattern": func.attrs.get("pattern")}


@dataclass
class CompiledKernels:
    """What a backend gives back: a kernel per PrimFunc (in order) and the module files they live in,
    by path relative to the executable folder."""

    kernels: list[CompiledKernel] = field(default_factory=list)
    modules: dict[str, bytes] = field(default_factory=dict)


class Backend:
    """A code generator. Subclasses set the class attributes and implement ``compile``."""

    name: str = ""
    language: str = ""
    binary: bool = False  # module files are bytes (WASM, SPIR-V) rather than text
    device_kinds: tuple[str, ...] = ()  # runtime devices that run its modules

    def compile(self, kernels: Sequence[PrimFunc], target: Target, progress=None) -> CompiledKernels:
        """Module files for ``kernels``; ``progress(stage, done, total)`` hears of each kernel."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<backend {self.name}: {self.language}, run by {', '.join(self.device_kinds)}>"


class ModulePerKernelBackend(Backend):
    """A backend that writes one module file per kernel, ``kernels/NNN_<entry point>.<extension>``
    (WGSL, SPIR-V, OpenCL C, Metal). A subclass says how a kernel is spelled (``render``, given the
    kernel as scheduled: it lowers it for its language) and how its scalars are passed
    (``scalar_abi``); a kernel needs shader-f16 when it holds f16 values and the target's subgroup
    feature when its schedule used subgroups, unless ``requirements`` says otherwise."""

    extension: str = ""

    def render(self, func: PrimFunc, target: Target) -> bytes:
        raise NotImplementedError

    def scalar_abi(self, func: PrimFunc) -> list[dict]:
        raise NotImplementedError

    def requirements(self, func: PrimFunc, target: Target) -> dict:
        features = [SHADER_F16] if uses_dtype(func, "f16") else []
        if func.attrs.get("subgroups"):
            features.append(target.subgroup_feature)
        return {"features": features, "limits": kernel_limits(func)}

    def compile(self, kernels, target, progress=None) -> CompiledKernels:
        out = CompiledKernels()
        for index, func in enumerate(kernels):
            if progress is not None:
                progress("kernels", index, len(kernels))
            entry = entry_name(func)
            path = f"kernels/{index:03d}_{entry}.{self.extension}"
            out.modules[path] = self.render(func, target)
            out.kernels.append(CompiledKernel(func.name, self.name, path, entry, tuple(func.workgroup_size),
                                              kernel_abi(func, self.scalar_abi(func)), self.requirements(func, target)))
        return out


_BACKENDS: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    if not backend.name or not backend.device_kinds:
        raise ValueError(f"a backend needs a name and the device kinds that run it: {backend!r}")
    _BACKENDS[backend.name] = backend
    return backend


def get_backend(name: str) -> Backend:
    if name not in _BACKENDS:
        raise KeyError(f"no backend {name!r} is registered; known: {', '.join(sorted(_BACKENDS))}")
    return _BACKENDS[name]


def backend_for(target: Target) -> Backend:
    return get_backend(target.backend)


def backends() -> dict[str, Backend]:
    return dict(_BACKENDS)


# -- helpers every backend uses ------------------------------------------------------------------


def kernel_abi(func: PrimFunc, scalars: list[dict]) -> dict:
    """The binding list of ``func`` (its inputs, then its outputs, by index) with each buffer's
    storage dtype and whether the kernel reads or writes it; ``scalars`` say how each scalar is passed."""
    written = {s.buffer.name for s, _ in walk_stmts(func.body) if isinstance(s, Store)}
    bindings = []
    for index, buf in enumerate(func.params):
        role = "input" if index < len(func.inputs) else "output"
        access = "write" if role == "output" else ("read_write" if buf.name in written else "read")
        bindings.append({"index": index, "tensor": buf.name, "dtype": buf.storage_dtype, "access": access,
                         "role": role})
    return {"bindings": bindings, "scalars": scalars}


def kernel_limits(func: PrimFunc) -> dict[str, int]:
    """The limits ``func`` needs of a device: invocations, storage buffers, workgroup memory."""
    workgroup_bytes = 0
    for buf in func.scratch:
        if buf.scope == "workgroup":
            size = arith.Analyzer().as_int(buf.size)
            workgroup_bytes += int(size) * _SCRATCH_BYTES.get(buf.dtype.split("x")[0], 4)
    needs = {"maxComputeInvocationsPerWorkgroup": math.prod(func.workgroup_size),
             "maxStorageBuffersPerShaderStage": len(func.params),
             "maxComputeWorkgroupStorageSize": workgroup_bytes}
    assert set(needs) <= set(REQUIRED_LIMITS)
    return needs


def vector_accesses(func: PrimFunc) -> dict[str, int]:
    """Buffers the kernel reads or writes as vectors, with their lane count: a language declares
    such a buffer as an array of vectors."""
    found: dict[str, int] = {}
    for stmt, exprs in walk_stmts(func.body):
        if isinstance(stmt, Store) and stmt.lanes > 1:
            found[stmt.buffer.name] = stmt.lanes
        for root in exprs:
            for e in walk_expr(root):
                if isinstance(e, Load) and e.lanes > 1:
                    found[e.buffer.name] = e.lanes
    return found


def uses_dtype(func: PrimFunc, scalar: str) -> bool:
    """Whether any value or buffer of ``func`` is of ``scalar`` type, vectors of it included."""
    return any(lanes_of(d)[0] == scalar for d in walk_dtypes(func))


def static_size(buf: Buffer) -> int:
    """Elements of a scratch buffer, which languages declare as fixed-size arrays."""
    size = arith.Analyzer().as_int(buf.size)
    if size is None:
        raise ValueError(f"scratch buffer {buf.name} needs a static size, has {buf.shape}")
    return size


def entry_name(func: PrimFunc) -> str:
    """An identifier every language accepts, from the kernel's name."""
    return "k_" + "".join(ch if ch.isalnum() else "_" for ch in func.name)


# The built-in backends register themselves on import.
from . import c, metal, opencl, spirv, wgsl  # noqa: E402
