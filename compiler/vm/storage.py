"""The VM's storage layer: tensors as device bytes, the weights, the state (a KV cache), and each
function's memory (parameter buffers and the storages of its memory plan).

A tensor's device bytes are what every runtime agrees on (docs/format.md): the storage rule of
``tessera.tir.lower.storage`` (bool one u32 word per element, int64 two i32 words), and a buffer
is whole 4-byte words.
"""

from __future__ import annotations

import numpy as np

from .. import arith
from ..ir.errors import RuntimeCheckError
from ..tir.lower import element_bytes, host_dtype
from .devices import Device, DeviceError, View
from .devices.split import SplitDevice


def device_bytes(count: int, dtype: str) -> int:
    """Bytes of ``count`` elements of ``dtype`` on a device, in whole words."""
    return max(4, -(-count * element_bytes(dtype) // 4) * 4)


def to_device(array: np.ndarray, dtype: str) -> bytes:
    array = np.ascontiguousarray(array)
    data = array.astype(host_dtype(dtype), copy=False).tobytes()
    padding = device_bytes(array.size, dtype) - len(data)
    return data + b"\0" * padding


def from_device(raw, shape, dtype: str) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(raw, host_dtype(dtype), count).reshape(shape).astype(dtype)


def allocate(device: Device, nbytes: int, what: str, on: int = 0):
    """A device buffer of ``nbytes`` for ``what`` (on part ``on`` of a SplitDevice): a size from an
    executable is checked against the device's largest buffer before anything is asked of the device."""
    split = isinstance(device, SplitDevice)
    limit = device.part_limit(on, "maxBufferSize") if split else device.limit("maxBufferSize")
    if nbytes < 0 or (limit is not None and nbytes > limit):
        where = f"{device.names[on]}'s" if split else "this device's"
        raise DeviceError(f"{what} needs a buffer of {nbytes} bytes; {where} maxBufferSize is {limit}")
    return device.allocate_on(on, nbytes) if split else device.allocate(nbytes)


class Storage:
    """What lives on the device for the VM's lifetime: the weights and the state tensors.

    ``placements`` (a split build's ``constant_devices``): the devices each weight is read on; a
    weight gets a copy on each (by default, device 0 only)."""

    def __init__(self, device: Device, constants: dict[str, np.ndarray], placements: dict | None = None):
        self.device = device
        self._constants: dict[tuple[str, int], object] = {}
        for name, array in constants.items():
            data = to_device(array, str(array.dtype))
            for on in (placements or {}).get(name, [0]):
                buffer = allocate(device, len(data), f"the weight {name}", on)
                device.upload(buffer, 0, data)
                self._constants[(name, on)] = buffer
        self.constant_bytes = {name: device_bytes(array.size, str(array.dtype)) for name, array in constants.items()}
        self.state: dict[str, tuple[object, int]] = {}

    def constant(self, name: str, on: int = 0):
        """The buffer of weight ``name`` on device ``on``."""
        buffer = self._constants.get((name, on))
        if buffer is None:
            raise RuntimeCheckError(f"the weight {name} is not placed on device {on} (constant_devices)")
        return buffer

    def state_buffer(self, name: str, size: int, on: int = 0):
        """State is shared by name across functions: prefill and decode write one KV cache."""
        if name not in self.state:
            self.state[name] = (allocate(self.device, size, f"the state tensor {name}", on), size)
        elif self.state[name][1] < size:
            raise DeviceError(f"state '{name}' is declared with different sizes by different functions")
        return self.state[name][0]

    def reset_state(self) -> None:
        for buffer, size in self.state.values():
            self.device.fill_zero(buffer, size)


class FunctionMemory:
    """A straight-line function's parameter buffers and arena, for calls up to ``sizes`` (its upper
    bounds): made once, when the VM is made (the fast path of ``program.py``)."""

    def __init__(self, storage: Storage, record: dict, sizes: dict[str, int], tokens: dict[int, dict]):
        self.storage, self.record, self.sizes = storage, record, sizes
        device = storage.device
        self.params: dict[int, object] = {}
        for param in record["params"]:
            tensor = record["tensors"].get(str(param["register"]))
            if tensor is None:
                continue
            on = tensor.get("device", 0)
            if param.get("state"):
                self.params[param["register"]] = storage.state_buffer(param["name"], tensor_bytes(tensor, sizes), on)
            else:
                self.params[param["register"]] = allocate(device, tensor_bytes(tensor, sizes),
                                                          f"the parameter {param['name']}", on)
        arena = arena_buffers(device, record["memory"], "arena buffer")
        self.storages = {index: (arena[token["buffer"]], token["offset"]) for index, token in tokens.items()}

    def view(self, reg: int, sizes: dict[str, int]) -> View:
        """Where tensor register ``reg`` lives, and its bytes at ``sizes``."""
        record = self.record
        loc = record["locations"][str(reg)]
        nbytes = tensor_bytes(record["tensors"][str(reg)], sizes)
        if loc["kind"] == "param":
            return View(self.params[reg], 0, nbytes)
        if loc["kind"] == "constant":
            on = record["tensors"][str(reg)].get("device", 0)
            return View(self.storage.constant(loc["name"], on), 0, self.storage.constant_bytes[loc["name"]])
        buffer, offset = self.storages[loc["token"]]
        return View(buffer, offset, nbytes)


def arena_buffers(device: Device, memory: dict, what: str) -> list:
    """A function's arena buffers, each on its device (``buffer_devices``, in a split build)."""
    devices = memory.get("buffer_devices") or [0] * len(memory["buffers"])
    return [allocate(device, size, f"{what} {i}", on) for i, (size, on) in enumerate(zip(memory["buffers"], devices))]


_PARSED: dict[str, arith.PrimExpr] = {}


# The largest magnitude a shape expression may reach: what every runtime computes exactly (a double in JS).
MAX_SHAPE_VALUE = (1 << 53) - 1
INT32 = range(-(1 << 31), 1 << 31)


def evaluate(text: str, env: dict[str, int]) -> int:
    """A shape expression of the executable, parsed once however often a call evaluates it. A variable
    without a value, a division by zero or a value past 2**53 is a RuntimeCheckError (the loader checked
    the text; the values come with the call)."""
    expr = _PARSED.get(text)
    if expr is None:
        expr = _PARSED[text] = arith.parse_expr(text)
    try:
        value = int(arith.evaluate(expr, env))
    except (KeyError, ZeroDivisionError) as error:
        raise RuntimeCheckError(f"cannot evaluate the shape expression {text!r}: {error.args[0]}") from None
    if abs(value) > MAX_SHAPE_VALUE:
        raise RuntimeCheckError(f"the shape expression {text!r} is {value}, beyond 2**53")
    return value


def check_launch(kernel: dict, scalars: list[int], grid: list[int]) -> None:
    """Scalars a kernel takes as 32-bit integers, and a grid of 0 .. 2**31 - 1 workgroups along each axis."""
    for value, scalar in zip(scalars, kernel["abi"]["scalars"]):
        if value not in INT32:
            raise RuntimeCheckError(f"kernel {kernel['name']}: its scalar {scalar['name']} is {value}, which does "
                                    "not fit in 32 bits")
    for axis, count in zip("xyz", grid):
        if not 0 <= count < 1 << 31:
            raise RuntimeCheckError(f"kernel {kernel['name']}: its grid is {count} workgroups along {axis}")


def check_copy(source: View, destination: View, function: str) -> None:
    """A ``to_device`` copies a tensor into one of the same bytes: anything else would read or write past
    one of them (the two registers' shapes come from the file)."""
    if source.nbytes != destination.nbytes:
        raise RuntimeCheckError(f"{function}: to_device copies {source.nbytes} bytes into a tensor of "
                                f"{destination.nbytes}")


def tensor_bytes(tensor: dict, sizes: dict[str, int]) -> int:
    return evaluate(tensor["bytes"], sizes)
