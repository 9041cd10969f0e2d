"""tir dtypes as SPIR-V types and constants: "f32", "f16x4", "u32", "bool" -> interned ids."""

from __future__ import annotations

import struct

import numpy as np
from tessera.tir.ir import lanes_of

from .builder import Module
from .errors import SPIRVError

# Bytes of one scalar in a storage buffer (ArrayStride of a buffer's runtime array).
SCALAR_BYTES = {"f32": 4, "f16": 2, "i32": 4, "u32": 4}


def kind_of(dtype: str) -> str:
    """What decides the instruction: "f" (f32, f16), "i" (signed i32), "u" (u32) or "b" (bool)."""
    scalar, _ = lanes_of(dtype)
    kinds = {"f32": "f", "f16": "f", "i32": "i", "u32": "u", "bool": "b"}
    if scalar not in kinds:
        raise SPIRVError(f"SPIR-V kernels have no type for {dtype}")
    return kinds[scalar]


class KernelTypes:
    """The type and constant ids of one module, asked for by tir dtype."""

    def __init__(self, module: Module):
        self.module = module

    def of(self, dtype: str) -> int:
        scalar, lanes = lanes_of(dtype)
        element = self.scalar(scalar)
        return element if lanes == 1 else self.module.type_vector(element, lanes)

    def scalar(self, dtype: str) -> int:
        m = self.module
        if dtype == "bool":
            return m.type_bool()
        if dtype in ("i32", "u32"):
            return m.type_int(32, dtype == "i32")
        if dtype in ("f32", "f16"):
            return m.type_float(int(dtype[1:]))
        raise SPIRVError(f"SPIR-V kernels have no type for {dtype}")

    def constant(self, value, dtype: str) -> int:
        """``value`` as a constant of ``dtype``; a vector dtype splats it to every lane."""
        scalar, lanes = lanes_of(dtype)
        if lanes > 1:
            part = self.constant(value, scalar)
            return self.module.constant_composite(self.of(dtype), *[part] * lanes)
        type_id = self.scalar(scalar)
        if scalar == "bool":
            return self.module.constant_bool(type_id, bool(value))
        if scalar == "f32":
            return self.module.constant(type_id, struct.unpack("<I", struct.pack("<f", float(value)))[0])
        if scalar == "f16":
            # A 16-bit literal sits in the low half of its word; the high half must be zero.
            return self.module.constant(type_id, int(np.float16(value).view(np.uint16)))
        return self.module.constant(type_id, int(value) & 0xFFFFFFFF)

    def pointer(self, storage_class: int, pointee: int) -> int:
        return self.module.type_pointer(storage_class, pointee)
