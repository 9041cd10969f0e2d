"""Several devices behind the one ``Device`` interface: how the VM runs a build split across devices.

An executable of format version 4 (docs/format.md, "Devices") places each kernel, tensor, weight
and arena buffer on one of its ``devices``. The VM opens one device per entry and hands its layers
this composite: every buffer, kernel and binding it gives out remembers the part it belongs to,
so storage and program code stay device-independent. The layers say where to allocate
(``allocate_on``); everything else follows the handle. ``copy`` between parts is the
``to_device`` instruction: read back from one, write into the other (each part keeps its own
order: a read waits for the source's queued kernels, a write is ordered after the destination's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..plan_checks import DeviceFit, check_device_fit
from . import Device, DeviceError, View


@dataclass(frozen=True, eq=False)
class OnPart:
    """A buffer, kernel or binding of part ``part``."""

    part: int
    handle: object


class SplitDevice(Device):
    kind = "split"

    def __init__(self, parts: list[Device], names: list[str]):
        """``parts``: a device per entry of the executable's ``devices``; ``names``: how people call them."""
        self.parts, self.names = parts, names
        self.name = " + ".join(f"{n} ({p.name})" for n, p in zip(names, parts))
        self.backends = tuple(b for p in parts for b in p.backends)
        self.copies = 0  # to_device copies so far, for tests and benchmarks

    def limit(self, name: str) -> int | None:
        values = [v for v in (p.limit(name) for p in self.parts) if v is not None]
        return min(values) if values else None

    def fit(self) -> list[DeviceFit]:
        return [replace(part.fit()[0], name=f"device {name}") for part, name in zip(self.parts, self.names)]

    def check(self, exe) -> None:
        for part, device in zip(self.parts, exe.devices):
            try:
                part.check_requirements(_DevicePart(exe, device))
            except DeviceError as error:
                raise DeviceError(f"{device['vdevices'][0]}: {error}") from None
        check_device_fit(exe, self.fit(), "executable.json", DeviceError)

    # -- memory --------------------------------------------------------------------------------

    def part_limit(self, part: int, name: str) -> int | None:
        return self.parts[part].limit(name)

    def allocate(self, nbytes: int) -> object:
        return self.allocate_on(0, nbytes)

    def allocate_on(self, part: int, nbytes: int) -> OnPart:
        return OnPart(part, self.parts[part].allocate(nbytes))

    def upload(self, buffer: OnPart, offset: int, data: bytes) -> None:
        self.parts[buffer.part].upload(buffer.handle, offset, data)

    def fill_zero(self, buffer: OnPart, nbytes: int) -> None:
        self.parts[buffer.part].fill_zero(buffer.handle, nbytes)

    def free(self, buffer: OnPart) -> None:
        self.parts[buffer.part].free(buffer.handle)

    def read_back(self, view: View) -> bytes:
        return self.parts[view.buffer.part].read_back(_inner(view))

    def copy(self, source: View, destination: View) -> None:
        if source.buffer.part == destination.buffer.part:
            self.parts[source.buffer.part].copy(_inner(source), _inner(destination))
            return
        data = self.parts[source.buffer.part].read_back(_inner(source))
        self.parts[destination.buffer.part].upload(destination.buffer.handle, destination.offset,
                                                   bytes(data[:destination.nbytes]))
        self.copies += 1

    # -- kernels -------------------------------------------------------------------------------

    def load_kernels(self, kernels: list[dict], modules: dict[str, bytes]) -> list:
        handles: list = [None] * len(kernels)
        for part, device in enumerate(self.parts):
            mine = [i for i, k in enumerate(kernels) if k.get("device", 0) == part]
            if not mine:
                continue
            files = {k["module"] for k in (kernels[i] for i in mine)}
            loaded = device.load_kernels([kernels[i] for i in mine], {p: d for p, d in modules.items() if p in files})
            for index, handle in zip(mine, loaded):
                handles[index] = OnPart(part, handle)
        return handles

    def bind(self, kernel: OnPart, views: list[View]) -> OnPart:
        for view in views:
            if view.buffer.part != kernel.part:
                raise DeviceError(f"a kernel of {self.names[kernel.part]} is given a tensor on "
                                  f"{self.names[view.buffer.part]}")
        return OnPart(kernel.part, self.parts[kernel.part].bind(kernel.handle, [_inner(v) for v in views]))

    def launch(self, bound: OnPart, scalars: list[int], grid: list[int]) -> None:
        self.parts[bound.part].launch(bound.handle, scalars, grid)

    def timed_launch(self, bound: OnPart, scalars: list[int], grid: list[int]) -> float:
        return self.parts[bound.part].timed_launch(bound.handle, scalars, grid)

    def flush(self) -> None:
        for part in self.parts:
            part.flush()

    def synchronize(self) -> None:
        for part in self.parts:
            part.synchronize()


def _inner(view: View) -> View:
    return View(view.buffer.handle, view.offset, view.nbytes)


class _DevicePart:
    """One device's share of a split executable, as ``Device.check`` reads an executable."""

    def __init__(self, exe, device: dict):
        index = exe.devices.index(device)
        self.backends = list(dict.fromkeys(k["backend"] for k in exe.kernels if k.get("device", 0) == index))
        self.required_features = device["required_features"]
        self.required_limits = device["required_limits"]
        self.target = device["target"]
