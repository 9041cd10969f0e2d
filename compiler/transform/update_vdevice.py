"""update_vdevice: change a module's list of virtual devices, keeping every tensor on its entry.

Tensors name devices by canonical names, ``"kind:ordinal"``, and an ordinal counts the entries of
one kind: changing an entry's kind can rename entries it does not touch. Replacing entry 0 of
[webgpu, wasm, webgpu] with a wasm device gives [wasm, wasm, webgpu], so "webgpu:0" becomes
"wasm:0", "wasm:0" becomes "wasm:1" and "webgpu:1" becomes "webgpu:0". The pass therefore maps
each entry's old name to the name the entry at the same position has afterwards, and rewrites
every struct info (parameters, bindings, match_cast patterns, return annotations, sinfo_args) and
every ``vdevice`` attribute (R.to_vdevice's target) at once.

- ``update_vdevice(mod, dev)`` appends ``dev``: no name changes;
- ``update_vdevice(mod, dev, i)`` replaces entry ``i``: tensors that were on it are on ``dev`` now;
- ``update_vdevice(mod, [dev, ...])`` replaces the list: tensors follow their entry's position.
  Entries past the new list's end may go only when nothing names them: a tensor whose device
  disappears would have no place, so that is an error naming the tensors (move them first with
  ``update_vdevice(mod, dev, i)`` or drop their annotations).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir.errors import UnknownVDeviceError
from ..ir.module import IRModule, VDevice
from ..ir.vdevice import rename_vdevices, vdevice_uses


def update_vdevice(mod: IRModule, new: VDevice | Sequence[VDevice], index: int | None = None) -> IRModule:
    old = mod.vdevices
    if isinstance(new, VDevice):
        if index is None:
            devices = old + (new,)
        elif 0 <= index < len(old):
            devices = old[:index] + (new,) + old[index + 1:]
        else:
            raise UnknownVDeviceError(f"update_vdevice: there is no entry {index} to replace; "
                                      f"{mod.describe_vdevices()}")
    else:
        if index is not None:
            raise ValueError("update_vdevice: a list of vdevices replaces the whole list; it takes no index")
        devices = tuple(new)
        if not all(isinstance(d, VDevice) for d in devices):
            raise TypeError(f"update_vdevice takes a VDevice or a list of VDevices, got {new!r}")
    updated = IRModule(mod.functions, {**mod.global_infos, "vdevice": devices})
    _check_nothing_lost(mod, len(devices))
    rename = {mod.vdevice_name(i): updated.vdevice_name(i) for i in range(min(len(old), len(devices)))}
    if all(old_name == new_name for old_name, new_name in rename.items()):
        return updated
    # Specs that are not canonical yet (a module built in Python) are looked up in the old list.
    return rename_vdevices(updated, lambda name: rename[mod.resolve_vdevice(name)])


def _check_nothing_lost(mod: IRModule, count: int) -> None:
    if count >= len(mod.vdevices):
        return
    uses: dict[str, list[str]] = {}
    for name, places in vdevice_uses(mod).items():
        uses.setdefault(mod.resolve_vdevice(name), []).extend(places)
    lost = [f"{name} (vdevice:{i}) by {', '.join(uses[name])}"
            for i, name in enumerate(mod.vdevice_names) if i >= count and name in uses]
    if lost:
        raise UnknownVDeviceError(f"update_vdevice: the new list has {count} virtual devices, but devices past its "
                                  f"end are still named: {'; '.join(lost)}")
