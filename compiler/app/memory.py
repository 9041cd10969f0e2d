"""What an executable holds on its device once loaded: weights, arenas and state (the KV cache).

Read from the executable alone (docs/format.md), at the upper bounds of its symbolic variables,
which is what the VMs allocate up front: the weights (its constants), one arena per function (the
function's memory plan) and each state tensor once, shared by name across functions. The largest
single buffer and the largest binding are what a WebGPU device's maxBufferSize and
maxStorageBufferBindingSize must allow: the VMs give each weight and each state tensor a buffer of
its own, bound whole, and split an arena into the plan's buffers, binding one storage at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera import arith
from tessera.vm import Executable

MIB = 1 << 20


@dataclass(frozen=True)
class DeviceMemory:
    weights: int
    weight_tensors: int
    arena: int | None  # None: some function's memory is planned at run time (a size without an upper bound)
    kv_cache: int | None  # the state tensors; None when one's size has no upper bound
    state_tensors: int
    largest_buffer: int | None = None  # the largest weight, state tensor or arena buffer
    largest_binding: int | None = None  # the largest weight, state tensor or arena storage

    @property
    def total(self) -> int | None:
        if self.arena is None or self.kv_cache is None:
            return None
        return self.weights + self.arena + self.kv_cache


def device_memory(exe: Executable) -> DeviceMemory:
    arenas = [f["memory"].get("arena_bytes") for f in exe.functions.values()]
    state = state_bytes(exe)
    whole = [int(array.nbytes) for array in exe.constants.values()] + list(state.values())
    buffers = [size for f in exe.functions.values() for size in f["memory"].get("buffers", [])]
    storages = [s.get("static_size") for f in exe.functions.values() for s in f["memory"].get("storages", [])
                if s.get("buffer") is not None]
    return DeviceMemory(
        weights=sum(int(array.nbytes) for array in exe.constants.values()), weight_tensors=len(exe.constants),
        arena=None if None in arenas else sum(arenas),
        kv_cache=None if None in state.values() else sum(state.values()), state_tensors=len(state),
        largest_buffer=None if None in whole else max(whole + buffers, default=0),
        largest_binding=None if None in whole + storages else max(whole + storages, default=0))


def state_bytes(exe: Executable) -> dict[str, int | None]:
    """Bytes of each state tensor, by name, at the upper bounds of the functions that declare it."""
    sizes: dict[str, int | None] = {}
    for record in exe.functions.values():
        bounds = {name: s["upper_bound"] for name, s in record["symbols"].items() if s["upper_bound"] is not None}
        for param in record["params"]:
            tensor = record["tensors"].get(str(param["register"]))
            if not param.get("state") or tensor is None:
                continue
            size = _evaluate_bound(tensor["bytes"], bounds)
            known = sizes.get(param["name"], 0)
            sizes[param["name"]] = None if size is None or known is None else max(known, size)
    return sizes


def _evaluate_bound(text: str, bounds: dict[str, int]) -> int | None:
    expr = arith.parse_expr(text)
    if any(v.name not in bounds for v in arith.free_vars(expr)):
        return None
    return int(arith.evaluate(expr, bounds))


def mib(size: int | None) -> str:
    return "planned at run time" if size is None else f"{size / MIB:.2f} MiB"
