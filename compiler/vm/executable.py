"""The executable: one versioned file every runtime reads (docs/format.md).

``executable.json`` holds the functions as VM code, the kernel table (per
kernel: the backend, the module file it lives in, entry point, workgroup size,
ABI, launch grid as shape expressions, requirements), the module files with
their SHA-256, the memory plans, the target with the features and limits its
kernels need, and a reference to the weights: ``tensor-cache.json`` plus
``params_shard_*.bin`` files of at most 32 MiB, each with its SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field

import numpy as np

from .. import arith, facts
from ..ir.errors import TesseraError
from ..ir.struct_info import (
    ObjectStructInfo,
    PrimStructInfo,
    ShapeStructInfo,
    StructInfo,
    TensorStructInfo,
    TupleStructInfo,
)
from .files import check_relative_path, parse_json, read_inside, read_json, read_regular
from .format_checks import check_executable, check_tensor_cache
from .schema import check_against_schema

FORMAT = "tessera-executable"
VERSION = 3
# A build split across devices (heterogeneous execution, docs/format.md "Devices") is version 4: a reader
# that knows only version 3 refuses it rather than running every kernel on one device.
SPLIT_VERSION = 4
CACHE_FORMAT = "tessera-tensor-cache"
CACHE_VERSION = 1
SHARD_BYTES = 32 << 20
# The largest tensor-cache.json and kernel module a loader reads (compiler/facts.json).
MAX_TENSOR_CACHE_BYTES = facts.MAX_JSON_BYTES["tensor_cache"]
MAX_MODULE_BYTES = facts.MAX_MODULE_BYTES
# Where a record of a shard may start: a multiple of its element size, so that runtimes read it in place
# (a reader refuses a misaligned one); writers start every record at a multiple of 8 bytes.
RECORD_ALIGNMENT = 8


class ExecutableError(TesseraError):
    """An executable or weight file that cannot be used: missing, truncated, corrupted, wrong version or target."""


@dataclass
class Executable:
    target: dict
    functions: dict  # name -> {"params", "symbols", "code", "memory", "registers", "result"}
    kernels: list  # kernel records (docs/format.md)
    required_features: list
    required_limits: dict
    constants: dict = field(default_factory=dict)  # name -> numpy array (the weights)
    modules: dict = field(default_factory=dict)  # path in the folder -> bytes (kernel modules)
    libraries: list = field(default_factory=list)  # host functions call_builtin names
    devices: list = field(default_factory=list)  # a split build's devices (version 4); [] for one device
    constant_devices: dict = field(default_factory=dict)  # weight -> the devices it lives on (version 4)

    @property
    def version(self) -> int:
        return SPLIT_VERSION if self.devices else VERSION

    @property
    def backends(self) -> list[str]:
        """The backends of the kernels, each once, in order of first use."""
        return list(dict.fromkeys(k["backend"] for k in self.kernels))

    def to_json(self) -> dict:
        modules = [{"path": path, "backend": _module_backend(self.kernels, path), "nbytes": len(data),
                    "sha256": hashlib.sha256(data).hexdigest()} for path, data in sorted(self.modules.items())]
        doc = {"format": FORMAT, "version": self.version, "target": self.target, "required_features":
               self.required_features, "required_limits": self.required_limits, "functions": self.functions,
               "kernels": self.kernels, "modules": modules, "constants": sorted(self.constants),
               "libraries": list(self.libraries)}
        if self.devices:
            doc["devices"] = self.devices
            doc["constant_devices"] = self.constant_devices
        return doc

    def save(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        save_tensor_cache(directory, self.constants)
        for path, data in self.modules.items():
            full = os.path.join(directory, check_relative_path(path, "module", ExecutableError))
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(data)
        text = json.dumps(self.to_json(), indent=1, sort_keys=True)
        with open(os.path.join(directory, "executable.json"), "w", encoding="utf-8") as f:
            f.write(text)

    @staticmethod
    def load(directory: str, tensor_cache: str | None = None) -> Executable:
        """Read ``directory``; its weights from ``directory/tensor-cache.json``, or from the tensor cache
        file ``tensor_cache`` when given (a bundle keeps its builds' weights in one shared folder).

        Nothing in the folder is trusted (docs/format.md, "What a loader checks"): executable.json must
        match docs/executable.schema.json and its cross-references must hold, every path is a relative
        name inside the folder, and every file is a regular file whose size is checked before it is read."""
        path = os.path.join(directory, "executable.json")
        data = read_json(directory, "executable.json", "executable", error=ExecutableError)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ExecutableError(f"{path} is not a Tessera executable (format {data.get('format')!r})"
                                  if isinstance(data, dict) else f"{path} is not a Tessera executable")
        if data.get("version") not in (VERSION, SPLIT_VERSION):
            raise ExecutableError(f"{path} has format version {data.get('version')!r}; this Tessera reads "
                                  f"versions {VERSION} and {SPLIT_VERSION}: rebuild it with this compiler "
                                  f"(`tessera compile MODEL.gguf -o {directory}`)")
        check_against_schema(data, "executable", path, ExecutableError)
        check_executable(data, path, ExecutableError)
        modules = {record["path"]: _load_module(directory, record) for record in data["modules"]}
        constants = load_tensor_cache(tensor_cache or os.path.join(directory, "tensor-cache.json")) \
            if data["constants"] else {}
        missing = set(data["constants"]) - set(constants)
        if missing:
            raise ExecutableError(f"weights missing from tensor-cache.json: {', '.join(sorted(missing))}")
        return Executable(data["target"], data["functions"], data["kernels"], data["required_features"],
                          data["required_limits"], constants, modules, list(data["libraries"]),
                          data.get("devices", []), data.get("constant_devices", {}))


def sinfo_from_json(doc: dict) -> StructInfo:
    """The struct info an executable records (docs/format.md), back as the IR's classes, so that one
    check (tessera.ir.check) serves the interpreter and the VM."""
    kind = doc["kind"]
    exprs = lambda texts: None if texts is None else tuple(arith.parse_expr(t) for t in texts)  # noqa: E731
    if kind == "tensor":
        return TensorStructInfo(exprs(doc["shape"]), doc["dtype"] or "", doc["ndim"])
    if kind == "shape":
        return ShapeStructInfo(exprs(doc["values"]), doc["ndim"])
    if kind == "prim":
        return PrimStructInfo(doc["dtype"], None if doc["value"] is None else arith.parse_expr(doc["value"]))
    if kind == "tuple":
        return TupleStructInfo(tuple(sinfo_from_json(f) for f in doc["fields"]))
    if kind == "object":
        return ObjectStructInfo()
    raise ExecutableError(f"unknown struct info kind {kind!r} in executable.json")


def _module_backend(kernels: list, path: str) -> str | None:
    return next((k["backend"] for k in kernels if k["module"] == path), None)


def _load_module(directory: str, record: dict) -> bytes:
    data = read_inside(directory, record["path"], "kernel module", MAX_MODULE_BYTES, record["nbytes"],
                       error=ExecutableError)
    if hashlib.sha256(data).hexdigest() != record["sha256"]:
        raise ExecutableError(f"{os.path.join(directory, record['path'])} does not match its checksum in "
                              "executable.json (corrupted or stale)")
    return data


def save_tensor_cache(directory: str, tensors: dict[str, np.ndarray]) -> None:
    """Weights as shards of at most 32 MiB plus tensor-cache.json with a SHA-256 per shard."""
    shards: list[dict] = []
    current: list[tuple[str, np.ndarray]] = []
    size = 0

    def flush():
        nonlocal current, size
        if not current:
            return
        name = f"params_shard_{len(shards)}.bin"
        records, offset, blob = [], 0, bytearray()
        for tensor_name, array in current:
            data = np.ascontiguousarray(array).tobytes()
            padding = -offset % RECORD_ALIGNMENT
            blob += bytes(padding)
            offset += padding
            records.append({"name": tensor_name, "shape": list(array.shape), "dtype": str(array.dtype),
                            "format": "raw", "nbytes": len(data), "byteOffset": offset})
            blob += data
            offset += len(data)
        with open(os.path.join(directory, name), "wb") as f:
            f.write(blob)
        shards.append({"dataPath": name, "format": "raw-shard", "nbytes": len(blob),
                       "sha256": hashlib.sha256(blob).hexdigest(), "records": records})
        current, size = [], 0

    for tensor_name in sorted(tensors):
        array = tensors[tensor_name]
        if size + -size % RECORD_ALIGNMENT + array.nbytes > SHARD_BYTES:
            flush()
        current.append((tensor_name, array))
        size += -size % RECORD_ALIGNMENT + array.nbytes
    flush()
    cache = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "records": shards}
    with open(os.path.join(directory, "tensor-cache.json"), "w", encoding="utf-8") as f:
        json.dump(cache, f, indent=1)


def load_tensor_cache(path: str) -> dict[str, np.ndarray]:
    """The tensors of the tensor cache file ``path``; its shards are named relative to its folder, inside it.
    Every record is checked against its shard's size (known before the shard is read), its element size
    (aligned) and the other records (none overlaps another) before any byte of it is used."""
    directory = os.path.dirname(path)
    cache = parse_json(read_regular(path, "tensor cache", MAX_TENSOR_CACHE_BYTES, error=ExecutableError), path,
                       ExecutableError)
    if not isinstance(cache, dict) or cache.get("format") != CACHE_FORMAT or cache.get("version") != CACHE_VERSION:
        raise ExecutableError(f"{path} is not a version-{CACHE_VERSION} Tessera tensor cache")
    check_against_schema(cache, "tensor-cache", path, ExecutableError)
    check_tensor_cache(cache, path, ExecutableError)
    tensors = {}
    for shard in cache["records"]:
        blob = read_inside(directory, shard["dataPath"], "weight shard", shard["nbytes"], shard["nbytes"],
                           error=ExecutableError)
        if hashlib.sha256(blob).hexdigest() != shard["sha256"]:
            raise ExecutableError(f"weight shard {shard['dataPath']} does not match its SHA-256 (corrupted)")
        for record in shard["records"]:
            count = record["nbytes"] // np.dtype(record["dtype"]).itemsize
            tensors[record["name"]] = np.frombuffer(blob, record["dtype"], count, record["byteOffset"]) \
                .reshape(record["shape"]).copy()
    return tensors
