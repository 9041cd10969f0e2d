"""IRModule: the unit every pass takes and returns.

It holds graph functions by name, kernels by name (loop-level ``tir``
functions arrive with the kernel issue) and global infos such as the virtual
devices that tensors may be placed on.

Struct info names a virtual device by its canonical name ``"kind:ordinal"``: the
ordinal counts the module's devices of that kind, so the list [webgpu, wasm,
webgpu] names "webgpu:0", "wasm:0", "webgpu:1". Text and users may write any
spec that ``IRModule.lookup_vdevice`` accepts; the parser and
``tessera.ir.resolve_vdevices`` store canonical names (docs/vdevice.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import UnknownVDeviceError
from .expr import Function


@dataclass(frozen=True)
class VDevice:
    """A virtual device: a target kind (or preset name), a physical device id, a memory scope.

    ``index`` is the id of the physical device (what ``R.hint_on_device(x, "gpu:1")`` asks for), not
    the ordinal in a canonical name: that one depends on the module's list (``IRModule.vdevice_name``).
    """

    kind: str
    index: int = 0
    memory_scope: str = "global"


@dataclass(frozen=True)
class IRModule:
    functions: Mapping[str, Any] = field(default_factory=dict)
    global_infos: Mapping[str, tuple] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "functions", dict(self.functions))
        object.__setattr__(self, "global_infos", {k: tuple(v) for k, v in self.global_infos.items()})

    def __getitem__(self, name: str) -> Any:
        try:
            return self.functions[name]
        except KeyError:
            known = ", ".join(sorted(self.functions)) or "none"
            raise KeyError(f"module has no function '{name}' (functions: {known})") from None

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def __iter__(self) -> Iterator[str]:
        return iter(self.functions)

    def graph_functions(self) -> dict[str, Function]:
        return {k: f for k, f in self.functions.items() if isinstance(f, Function)}

    def with_function(self, name: str, func: Any) -> IRModule:
        functions = dict(self.functions)
        functions[name] = func
        return IRModule(functions, self.global_infos)

    def without_function(self, name: str) -> IRModule:
        return IRModule({k: v for k, v in self.functions.items() if k != name}, self.global_infos)

    @property
    def vdevices(self) -> tuple[VDevice, ...]:
        return tuple(self.global_infos.get("vdevice", ()))

    # -- virtual devices: the lookup rules of docs/vdevice.md -----------------------------------

    def lookup_vdevice(self, spec: str) -> VDevice:
        """The device ``spec`` names: ``"kind"`` (= ``"kind:0"``), ``"kind:i"`` (the i-th device of that
        kind, counting from 0) or ``"vdevice:i"`` (the i-th entry of the module's list)."""
        return self.vdevices[self._vdevice_position(spec)]

    def physical_device(self, spec: str) -> tuple[str, int] | None:
        """(target kind, device id) of the device ``spec`` names, as the build tells devices apart
        (tessera.transform.device_targets): the ``webgpu`` and ``llvmpipe`` presets are one WebGPU
        device. None for a name the module does not declare."""
        from ..target import Target

        try:
            vdevice = self.lookup_vdevice(spec)
        except UnknownVDeviceError:
            return None
        try:
            kind = Target.preset(vdevice.kind).kind
        except ValueError:  # a kind with no preset of its name is its own kind
            kind = vdevice.kind
        return kind, vdevice.index

    def resolve_vdevice(self, spec: str) -> str:
        """The canonical name of the device ``spec`` names: ``resolve_vdevice("webgpu") == "webgpu:0"``."""
        return self.vdevice_name(self._vdevice_position(spec))

    def vdevice_name(self, device: int | VDevice) -> str:
        """The canonical name ``"kind:ordinal"`` of an entry, given by position or as the VDevice (an
        entry listed twice is named by its first position)."""
        position = device if isinstance(device, int) else self.vdevices.index(device)
        kind = self.vdevices[position].kind
        ordinal = sum(1 for d in self.vdevices[:position] if d.kind == kind)
        return f"{kind}:{ordinal}"

    @property
    def vdevice_names(self) -> tuple[str, ...]:
        """The canonical names of the module's devices, in the list's order."""
        return tuple(self.vdevice_name(i) for i in range(len(self.vdevices)))

    def _vdevice_position(self, spec: str) -> int:
        kind, _, suffix = spec.rpartition(":")
        if not (kind and suffix.isdigit()):
            kind, number = spec, 0  # a bare kind is its first device
        else:
            number = int(suffix)
        if kind == "vdevice" and number < len(self.vdevices):
            return number
        same_kind = [i for i, d in enumerate(self.vdevices) if d.kind == kind]
        if number < len(same_kind):
            return same_kind[number]
        raise UnknownVDeviceError(f"no virtual device matches {spec!r}: {self.describe_vdevices()}")

    def describe_vdevices(self) -> str:
        if not self.vdevices:
            return 'the module declares none (I.module_global_infos({"vdevice": [...]}))'
        entries = ", ".join(f"{name} (vdevice:{i}, device id {d.index})"
                            for i, (name, d) in enumerate(zip(self.vdevice_names, self.vdevices)))
        return f"the module's virtual devices are {entries}"

    def script(self) -> str:
        """The module as a TVMScript-style Python script (see docs/script.md)."""
        from .printer import print_module

        return print_module(self)

    def __str__(self) -> str:
        return self.script()
