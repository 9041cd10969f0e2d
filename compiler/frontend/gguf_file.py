"""A GGUF file's metadata and tensors, parsed in one pass over its header.

The `gguf` package's GGUFReader makes a numpy view of every value it parses: for the 49,152
tokens and 48,900 merges of SmolLM2's vocabulary that is a quarter of a million memmap slices,
2.5 s of a 7 s `tessera compile`. ``read_gguf_file`` parses the same header with ``struct`` and
views each tensor's data in the file's memmap exactly as GGUFReader does (its ggml type, shape and
dtype from the package's own tables), so the values are the ones GGUFReader's fields hold.

Every count is checked against the bytes left before it sizes a loop or an allocation (a fuzzer's
file of 2.6 KB once made GGUFReader ask for gigabytes). Big-endian files are refused: the kernels
read quantized blocks as little-endian bytes, so such a file would compute garbage.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from ..ir.errors import TesseraError

STRING, ARRAY, UINT32 = 8, 9, 4
MAX_DIMS = 4  # GGML_MAX_DIMS
# GGUF value type -> struct format of one little-endian value (gguf.GGUFValueType's numbering).
SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
                  12: "<d"}
# ggml types whose tensors GGUFReader views as elements, not bytes.
ELEMENT_TYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "I16": np.int16,
                 "I32": np.int32, "I64": np.int64}


class GGUFError(TesseraError):
    """A GGUF file that cannot be used: unreadable, truncated, or holding what Tessera cannot run."""


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    tensor_type: object  # gguf.GGMLQuantizationType
    data: np.ndarray  # a view of the file: elements for F32 and the like, (rows, row bytes) uint8 for blocks


@dataclass
class GGUFContents:
    metadata: dict  # key -> a Python value (a list for arrays), GGUF.version and the counts first
    tensors: list[GGUFTensor]


def read_gguf_file(path: str, gguf) -> GGUFContents:
    """The file's metadata and tensors; raises (anything) on a truncated or corrupted file."""
    return _Parser(np.memmap(path, mode="r"), gguf).contents()


class _Parser:
    def __init__(self, data: np.ndarray, gguf):
        self.data, self.buf, self.gguf = data, memoryview(data), gguf

    def contents(self) -> GGUFContents:
        magic, version = self._unpack("<II", 0)
        if magic != self.gguf.GGUF_MAGIC:
            raise ValueError("GGUF magic invalid")
        if version not in (2, 3):
            if version & 0xFFFF == 0 and struct.unpack("<I", struct.pack(">I", version))[0] in (2, 3):
                raise ValueError("a big-endian GGUF file, which Tessera does not read (convert it on a "
                                 "little-endian machine)")
            raise ValueError(f"GGUF version {version}, which Tessera does not read (it reads versions 2 and 3)")
        tensor_count, kv_count = self._unpack("<QQ", 8)
        # Counts are checked against the bytes left before they size a loop: a key takes 13 bytes at
        # least (length, one byte, type), a tensor's entry 25 (length, one byte, dims, type, offset).
        if kv_count * 13 + tensor_count * 25 > len(self.data) - 24:
            raise ValueError(f"{kv_count} keys and {tensor_count} tensors cannot fit in {len(self.data)} bytes")
        metadata = {"GGUF.version": version, "GGUF.tensor_count": tensor_count, "GGUF.kv_count": kv_count}
        types = {}
        offset = 24
        for _ in range(kv_count):
            key, offset = self._string(offset, "strict")
            (kind,), offset = self._unpack("<I", offset), offset + 4
            if key in metadata:
                raise KeyError(f"Duplicate {key}")
            metadata[key], offset = self._value(kind, offset)
            types[key] = kind
        infos = []
        for _ in range(tensor_count):
            name, offset = self._string(offset, "strict")
            (n_dims,), offset = self._unpack("<I", offset), offset + 4
            if n_dims > MAX_DIMS:
                raise ValueError(f"tensor {name} has {n_dims} dimensions, more than ggml's {MAX_DIMS}")
            dims, offset = self._unpack(f"<{n_dims}Q", offset), offset + 8 * n_dims
            raw_type, tensor_offset = self._unpack("<IQ", offset)
            offset += 12
            infos.append((name, dims, raw_type, tensor_offset))
        alignment = self.gguf.GGUF_DEFAULT_ALIGNMENT
        if "general.alignment" in metadata:
            if types["general.alignment"] != UINT32:
                raise ValueError("Bad type for general.alignment field")
            alignment = metadata["general.alignment"]
            if alignment == 0 or alignment & (alignment - 1):
                raise ValueError("Invalid alignment: must be a non-zero power of two")
        start = offset + (-offset % alignment)
        return GGUFContents(metadata, self._tensors(infos, start, alignment))

    def _tensors(self, infos, start: int, alignment: int) -> list[GGUFTensor]:
        """The tensors' views, each checked as llama.cpp checks them: inside the file, at an offset that is a
        multiple of the alignment, and not overlapping another tensor."""
        gguf, tensors, names, ranges = self.gguf, [], set(), []
        for name, dims, raw_type, tensor_offset in infos:
            if name in names:
                raise ValueError(f"Found duplicated tensor with name {name}")
            names.add(name)
            ggml_type = gguf.GGMLQuantizationType(raw_type)
            elements = math.prod(dims)  # exact: numpy's product of uint64 dims would wrap around
            shape = tuple(reversed(dims))
            block_size, type_size = gguf.GGML_QUANT_SIZES[ggml_type]
            if dims and dims[0] % block_size:
                raise ValueError(f"tensor {name} has rows of {dims[0]} values, not whole blocks of {block_size}")
            nbytes = elements * type_size // block_size
            begin = start + tensor_offset
            if tensor_offset % alignment:
                raise ValueError(f"tensor {name} starts at offset {tensor_offset}, not a multiple of the alignment "
                                 f"{alignment}")
            if begin + nbytes > len(self.data):
                raise ValueError(f"tensor {name} ends past the end of the file")
            ranges.append((begin, begin + nbytes, name))
            dtype = ELEMENT_TYPES.get(ggml_type.name)
            if dtype is None:
                dtype, shape = np.uint8, gguf.quant_shape_to_byte_shape(shape, ggml_type)
            tensors.append(GGUFTensor(name, ggml_type, self.data[begin:begin + nbytes].view(dtype).reshape(shape)))
        widest = None  # of the tensors in order of their first byte, the one reaching furthest
        for begin, end, name in sorted(r for r in ranges if r[1] > r[0]):
            if widest is not None and begin < widest[1]:
                raise ValueError(f"tensors {widest[2]} and {name} overlap")
            if widest is None or end > widest[1]:
                widest = (begin, end, name)
        return tensors

    def _unpack(self, fmt: str, offset: int) -> tuple:
        return struct.unpack_from(fmt, self.buf, offset)

    def _string(self, offset: int, errors: str = "replace") -> tuple[str, int]:
        """A string and the offset after it: keys and tensor names must be UTF-8 (as GGUFReader
        demands), values are decoded as load_gguf always decoded them."""
        (length,) = self._unpack("<Q", offset)
        end = offset + 8 + length
        if end > len(self.buf):
            raise ValueError("a string runs past the end of the file")
        return bytes(self.buf[offset + 8:end]).decode("utf-8", errors=errors), end

    def _value(self, kind: int, offset: int) -> tuple[object, int]:
        if kind == STRING:
            return self._string(offset)
        if kind in SCALAR_FORMATS:
            fmt = SCALAR_FORMATS[kind]
            return self._unpack(fmt, offset)[0], offset + struct.calcsize(fmt)
        if kind != ARRAY:
            raise ValueError(f"Unknown/unhandled field type {kind}")
        item_kind, count = self._unpack("<IQ", offset)
        offset += 12
        if item_kind == STRING and count * 8 > len(self.buf) - offset:  # 8 bytes of length each, at least
            raise ValueError(f"an array of {count} strings cannot fit in the rest of the file")
        if item_kind == STRING:
            items = []
            for _ in range(count):
                item, offset = self._string(offset)
                items.append(item)
            return items, offset
        if item_kind == ARRAY:  # arrays of arrays, as nested lists: 12 bytes of header each, at least
            if count * 12 > len(self.buf) - offset:
                raise ValueError(f"an array of {count} arrays cannot fit in the rest of the file")
            items = []
            for _ in range(count):
                item, offset = self._value(ARRAY, offset)
                items.append(item)
            return items, offset
        if item_kind not in SCALAR_FORMATS:
            raise ValueError(f"Unknown/unhandled array item type {item_kind}")
        fmt = SCALAR_FORMATS[item_kind]
        end = offset + struct.calcsize(fmt) * count
        if end > len(self.buf):
            raise ValueError("an array runs past the end of the file")
        return np.frombuffer(self.buf, np.dtype(fmt), count, offset).tolist(), end
