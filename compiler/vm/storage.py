"""The VM's storage layer: tensors as device bytes, the weights, the state (a KV cache), and each
function's memory (parameter buffers and the storages of its memory plan).

A tensor's device bytes are what every runtime agrees on (docs/format.md): the storage rule of
``tessera.tir.lower.storage`` (bool one u32 word per element, int64 two i32 words), and a buffer
is whole 4-byte words.
"""

from __future__ import annotations

import numpy as np

from .. import arith
from ..tir.lower import element_bytes, host_dtype
from .devices import Device, DeviceError, View


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


class Storage:
    """What lives on the device for the VM's lifetime: the weights and the state tensors."""

    def __init__(self, device: Device, constants: dict[str, np.ndarray]):
        self.device = device
        self.constants = {name: device.allocate_with(to_device(array, str(array.dtype)))
                          for name, array in constants.items()}
        self.constant_bytes = {name: device_bytes(array.size, str(array.dtype)) for name, array in constants.items()}
        self.state: dict[str, tuple[object, int]] = {}

    def state_buffer(self, name: str, size: int):
        """State is shared by name across functions: prefill and decode write one KV cache."""
        if name not in self.state:
            self.state[name] = (self.device.allocate(size), size)
        elif self.state[name][1] < size:
            raise DeviceError(f"state '{name}' is declared with different sizes by different functions")
        return self.state[name][0]

    def reset_state(self) -> None:
        for buffer, size in self.state.values():
            self.device.fill_zero(buffer, size)


class FunctionMemory:
    """A function's parameter buffers and storages, for calls up to ``sizes`` (its upper bounds when
    the plan is static; one call's sizes otherwise)."""

    def __init__(self, storage: Storage, record: dict, sizes: dict[str, int], tokens: dict[int, dict]):
        self.storage, self.record, self.sizes = storage, record, sizes
        device = storage.device
        self.owned: list = []  # buffers made for these sizes alone (freed with this memory)
        self.params: dict[int, object] = {}
        for param in record["params"]:
            tensor = record["tensors"].get(str(param["register"]))
            if tensor is None:
                continue
            if param.get("state"):
                self.params[param["register"]] = storage.state_buffer(param["name"], tensor_bytes(tensor, sizes))
            else:
                self.params[param["register"]] = self._own(device.allocate(tensor_bytes(tensor, sizes)))
        self.storages: dict[int, tuple[object, int]] = {}
        memory = record["memory"]
        if memory["static"]:
            arena = [self._own(device.allocate(size)) for size in memory["buffers"]]
            for index, token in tokens.items():
                self.storages[index] = (arena[token["buffer"]], token["offset"])
        self.storage_tokens: dict[int, int] = {}  # storage register -> token
        for op in record["code"]:
            if op["op"] == "alloc_storage":  # without bounds: at this call's sizes
                self.storages[op["token"]] = (self._own(device.allocate(evaluate(op["size"], sizes))), 0)
                self.storage_tokens[op["dst"]] = op["token"]

    def _own(self, buffer):
        self.owned.append(buffer)
        return buffer

    def view(self, reg: int, sizes: dict[str, int]) -> View:
        """Where tensor register ``reg`` lives, and its bytes at ``sizes``."""
        record = self.record
        loc = record["locations"][str(reg)]
        nbytes = tensor_bytes(record["tensors"][str(reg)], sizes)
        if loc["kind"] == "param":
            return View(self.params[reg], 0, nbytes)
        if loc["kind"] == "constant":
            return View(self.storage.constants[loc["name"]], 0, self.storage.constant_bytes[loc["name"]])
        token = loc["token"] if loc["kind"] == "arena" else self.storage_tokens[loc["register"]]
        buffer, offset = self.storages[token]
        return View(buffer, offset, nbytes)

    def release(self) -> None:
        for buffer in self.owned:
            self.storage.device.free(buffer)
        self.owned = []


_PARSED: dict[str, arith.PrimExpr] = {}


def evaluate(text: str, env: dict[str, int]) -> int:
    """A shape expression of the executable, parsed once however often a call evaluates it."""
    expr = _PARSED.get(text)
    if expr is None:
        expr = _PARSED[text] = arith.parse_expr(text)
    return int(arith.evaluate(expr, env))


def tensor_bytes(tensor: dict, sizes: dict[str, int]) -> int:
    return evaluate(tensor["bytes"], sizes)
