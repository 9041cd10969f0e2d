"""Every tensor a kernel binds whole, checked against its device's maxStorageBufferBindingSize.

The VMs bind each weight and each state tensor (the KV cache) as a buffer of its own, and each
arena storage as a range of its buffer (docs/format.md). A device refuses a binding over its limit
only when a kernel first runs; the compiler checks them all before it writes anything, so that a
build that cannot run says which tensor is too large instead. Weights over the limit were cut into
row chunks already (transform/split_weights.py) where their readers allow it.
"""

from __future__ import annotations

from .. import arith
from ..ir.errors import BindingLimitError


def largest_bindings(exe) -> list[tuple[str, str, int, int, str]]:
    """(kind, tensor, bytes, device, function) of every weight, state tensor and arena storage, the
    sizes at the upper bounds (a storage without one is allocated at run time and not listed)."""
    found = [("weight", name, int(array.nbytes), device, "")
             for name, array in exe.constants.items() for device in exe.constant_devices.get(name, [0])]
    for function, record in exe.functions.items():
        bounds = {name: s["upper_bound"] for name, s in record["symbols"].items() if s["upper_bound"] is not None}
        for param in record["params"]:
            tensor = record["tensors"].get(str(param["register"]))
            if param.get("state") and tensor is not None:
                size = _at_bounds(tensor["bytes"], bounds)
                if size is not None:
                    found.append(("state", param["name"], size, tensor.get("device", 0), function))
        for storage in record["memory"]["storages"]:
            if storage.get("buffer") is not None:
                names = ", ".join(str(t) for t in storage.get("tensors", ())) or f"storage {storage['index']}"
                found.append(("storage", names, storage["static_size"], storage.get("device", 0), function))
    return found


def check_binding_limits(exe, limits: list[int]) -> None:
    """Raise BindingLimitError for the largest tensor over its device's binding limit (``limits[device]``)."""
    over = [b for b in largest_bindings(exe) if b[2] > limits[b[3]]]
    if not over:
        return
    kind, tensor, size, device, function = max(over, key=lambda b: b[2])
    where = f" of function {function}" if function else ""
    what = {"weight": "weight", "state": "state tensor", "storage": "arena storage holding"}[kind]
    raise BindingLimitError(f"{what} {tensor}{where} is {size} bytes ({_mib(size)}), more than the target's "
                            f"maxStorageBufferBindingSize {limits[device]} ({_mib(limits[device])}): a kernel binds it "
                            "whole", tensor, size, limits[device], kind, function)


def _mib(size: int) -> str:
    return f"{size / 2 ** 20:.4g} MiB"


def _at_bounds(text: str, bounds: dict[str, int]) -> int | None:
    expr = arith.parse_expr(text)
    if any(v.name not in bounds for v in arith.free_vars(expr)):
        return None
    return int(arith.evaluate(expr, bounds))


def record_binding_needs(exe) -> None:
    """Raise each device's required maxStorageBufferBindingSize to its largest weight or state tensor too
    (the plan's own figure counts only arena storages), so that a runtime refuses a device too small for
    them when it loads the executable rather than when a kernel first binds one."""
    largest: dict[int, int] = {}
    for _, _, size, device, _ in largest_bindings(exe):
        largest[device] = max(largest.get(device, 0), size)
    key = "maxStorageBufferBindingSize"
    if exe.devices:
        for index, device in enumerate(exe.devices):
            device["required_limits"][key] = max(device["required_limits"].get(key, 0), largest.get(index, 0))
    exe.required_limits[key] = max([exe.required_limits.get(key, 0), *largest.values()])
