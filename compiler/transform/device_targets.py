"""Which target compiles each value of a module whose tensors are placed on virtual devices.

A module without ``vdevice`` global infos has one target, the build's. A module with them
(heterogeneous execution, docs/vdevice.md) has one target per virtual device: the build's own
target for the vdevice of its kind (or preset name), ``Target.preset(kind)`` for the others, or
what the caller passes in ``overrides``. A value whose struct info names no vdevice lives on the
*default* device: the vdevice the build target stands for, else the module's first.

Legalization, fusion and memory planning ask this map, per binding, which target's rules, limits
and alignment apply; kernels of a split build carry the ``device`` attribute naming their vdevice
so that each is compiled by its own backend (driver.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.errors import TesseraError
from ..ir.module import IRModule
from ..ir.struct_info import StructInfo, TensorStructInfo, TupleStructInfo
from ..target import Target


class DeviceTargetError(TesseraError):
    """A virtual device whose target is unknown, or two devices the build cannot tell apart."""


@dataclass(frozen=True)
class DeviceTargets:
    """``targets``: vdevice canonical name -> Target, in the module's order; ``default``: the name of
    the device of unannotated values ("" for a module without vdevices)."""

    targets: tuple[tuple[str, Target], ...]
    default: str
    build_target: Target
    ids: tuple[int, ...] = ()  # each vdevice's device id (VDevice.index)

    @staticmethod
    def of(mod: IRModule, target: Target | DeviceTargets, overrides: dict[str, Target] | None = None
           ) -> DeviceTargets:
        if isinstance(target, DeviceTargets):
            return target
        if not mod.vdevices:
            return DeviceTargets((), "", target)
        targets, ids = [], []
        default = ""
        for index, vdevice in enumerate(mod.vdevices):
            name = mod.vdevice_name(index)
            if overrides and name in overrides:
                chosen = overrides[name]
            elif vdevice.kind in (target.kind, target.name):
                chosen = target
            else:
                try:
                    chosen = Target.preset(vdevice.kind)
                except ValueError as error:
                    raise DeviceTargetError(f"virtual device {name}: {error}") from None
            if not default and chosen is target:
                default = name
            targets.append((name, chosen))
            ids.append(vdevice.index)
        return DeviceTargets(tuple(targets), default or targets[0][0], target, tuple(ids))

    @property
    def split(self) -> bool:
        """More than one target: kernels are compiled per target (and memory planned, and copies made,
        per physical device when there is more than one)."""
        return len(self.targets) > 1

    @property
    def physical_devices(self) -> list[tuple[str, int]]:
        """The devices the build runs on, in the module's order: (target kind, device id). Two vdevices
        of one kind and id (say the ``webgpu`` and ``llvmpipe`` presets) are one device: their
        tensors share its memory and move between them without a copy."""
        if not self.targets:
            return [(self.build_target.kind, 0)]
        return list(dict.fromkeys((target.kind, id_) for (_, target), id_ in zip(self.targets, self.ids)))

    def placement(self, name: str | None) -> int:
        """The index in ``physical_devices`` of the device a value annotated ``name`` lives on."""
        if not self.targets:
            return 0
        position = self.names.index(self.device(name))
        return self.physical_devices.index((self.targets[position][1].kind, self.ids[position]))

    def placement_of(self, sinfo: StructInfo | None) -> int:
        return self.placement(vdevice_of(sinfo))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.targets] or [""]

    def device(self, name: str | None) -> str:
        """The device a value annotated ``name`` (or not annotated: None) lives on."""
        if not self.targets:
            return ""
        if name is None:
            return self.default
        if name not in dict(self.targets):
            known = ", ".join(self.names)
            raise DeviceTargetError(f"no virtual device {name!r} in the module (devices: {known})")
        return name

    def target(self, name: str | None = None) -> Target:
        if not self.targets:
            return self.build_target
        return dict(self.targets)[self.device(name)]

    def device_of(self, sinfo: StructInfo | None) -> str:
        """The device of a value of this struct info: its (first) annotation, else the default."""
        return self.device(vdevice_of(sinfo))

    def target_of(self, sinfo: StructInfo | None) -> Target:
        return self.target(vdevice_of(sinfo))


def vdevice_of(sinfo: StructInfo | None) -> str | None:
    """The vdevice a struct info names: a tensor's, or the first a tuple's fields name."""
    if isinstance(sinfo, TensorStructInfo):
        return sinfo.vdevice
    if isinstance(sinfo, TupleStructInfo):
        for field in sinfo.fields:
            found = vdevice_of(field)
            if found:
                return found
    return None
