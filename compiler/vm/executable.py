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

from .. import arith
from ..ir.errors import TesseraError
from ..ir.struct_info import (
    ObjectStructInfo,
    PrimStructInfo,
    ShapeStructInfo,
    StructInfo,
    TensorStructInfo,
    TupleStructInfo,
)

FORMAT = "tessera-executable"
VERSION = 3
CACHE_FORMAT = "tessera-tensor-cache"
CACHE_VERSION = 1
SHARD_BYTES = 32 << 20


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

    @property
    def backends(self) -> list[str]:
        """The backends of the kernels, each once, in order of first use."""
        return list(dict.fromkeys(k["backend"] for k in self.kernels))

    def to_json(self) -> dict:
        modules = [{"path": path, "backend": _module_backend(self.kernels, path), "nbytes": len(data),
                    "sha256": hashlib.sha256(data).hexdigest()} for path, data in sorted(self.modules.items())]
        return {"format": FORMAT, "version": VERSION, "target": self.target, "required_features":
                self.required_features, "required_limits": self.required_limits, "functions": self.functions,
                "kernels": self.kernels, "modules": modules, "constants": sorted(self.constants),
                "libraries": list(self.libraries)}

    def save(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        save_tensor_cache(directory, self.constants)
        for path, data in self.modules.items():
            full = os.path.join(directory, check_relative_path(path, "module"))
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(data)
        text = json.dumps(self.to_json(), indent=1, sort_keys=True)
        with open(os.path.join(directory, "executable.json"), "w", encoding="utf-8") as f:
            f.write(text)

    @staticmethod
    def load(directory: str, tensor_cache: str | None = None) -> Executable:
        """Read ``directory``; its weights from ``directory/tensor-cache.json``, or from the tensor cache
        file ``tensor_cache`` when given (a bundle keeps its builds' weights in one shared folder)."""
        path = os.path.join(directory, "executable.json")
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as error:
            raise ExecutableError(f"cannot read {path}: {error.strerror}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ExecutableError(f"{path} is not valid JSON (truncated or corrupted?): {error.msg} at line "
                                  f"{error.lineno}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ExecutableError(f"{path} is not a Tessera executable (format {data.get('format')!r})"
                                  if isinstance(data, dict) else f"{path} is not a Tessera executable")
        if data.get("version") != VERSION:
            raise ExecutableError(f"{path} has format version {data.get('version')}; this Tessera reads "
                                  f"version {VERSION}: rebuild it with this compiler (`tessera compile MODEL.gguf "
                                  f"-o {directory}`)")
        try:
            modules = {record["path"]: _load_module(directory, record) for record in data["modules"]}
            for kernel in data["kernels"]:
                for key in ("name", "backend", "entry_point", "workgroup_size", "grid", "requirements"):
                    kernel[key]  # noqa: B018  (a KeyError names the missing field)
                kernel["abi"]["bindings"], kernel["abi"]["scalars"]  # noqa: B018
                if kernel["module"] not in modules:
                    raise ExecutableError(f"kernel {kernel['name']} in {path} names the module {kernel['module']!r}, "
                                          "which the executable does not list")
            constants = load_tensor_cache(tensor_cache or os.path.join(directory, "tensor-cache.json")) \
                if data["constants"] else {}
            missing = set(data["constants"]) - set(constants)
            if missing:
                raise ExecutableError(f"weights missing from tensor-cache.json: {', '.join(sorted(missing))}")
            return Executable(data["target"], data["functions"], data["kernels"], data["required_features"],
                              data["required_limits"], constants, modules, list(data["libraries"]))
        except (KeyError, TypeError) as error:
            raise ExecutableError(f"{path} is malformed: it lacks the field {error.args[0]!r}"
                                  if isinstance(error, KeyError) else f"{path} is malformed: {error}") from None


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


def check_relative_path(path, what: str) -> str:
    """``path`` if it names a file inside the folder: relative, no '..', no empty or odd parts."""
    if not isinstance(path, str) or not path or path.startswith(("/", "\\")) or "\\" in path or "\0" in path:
        raise ExecutableError(f"the {what} path {path!r} is not a relative path inside the folder")
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts) or ":" in parts[0]:
        raise ExecutableError(f"the {what} path {path!r} is not a relative path inside the folder")
    return path


def _module_backend(kernels: list, path: str) -> str | None:
    return next((k["backend"] for k in kernels if k["module"] == path), None)


def _load_module(directory: str, record: dict) -> bytes:
    path = os.path.join(directory, check_relative_path(record["path"], "module"))
    try:
        size = os.stat(path).st_size
        if size != record["nbytes"]:
            raise ExecutableError(f"{path} has {size} bytes, executable.json says {record['nbytes']} (stale or "
                                  "truncated)")
        with open(path, "rb") as f:
            data = f.read(size + 1)
    except OSError as error:
        raise ExecutableError(f"cannot read kernel module {path}: {error.strerror}") from None
    if hashlib.sha256(data).hexdigest() != record["sha256"]:
        raise ExecutableError(f"{path} does not match its checksum in executable.json (corrupted or stale)")
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
        if size + array.nbytes > SHARD_BYTES:
            flush()
        current.append((tensor_name, array))
        size += array.nbytes
    flush()
    cache = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "records": shards}
    with open(os.path.join(directory, "tensor-cache.json"), "w", encoding="utf-8") as f:
        json.dump(cache, f, indent=1)


def load_tensor_cache(path: str) -> dict[str, np.ndarray]:
    """The tensors of the tensor cache file ``path``; its shards are named relative to its folder."""
    directory = os.path.dirname(path)
    try:
        with open(path, encoding="utf-8") as f:
            cache = json.load(f)
    except OSError as error:
        raise ExecutableError(f"cannot read {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise ExecutableError(f"{path} is not valid JSON: {error.msg}") from None
    if cache.get("format") != CACHE_FORMAT or cache.get("version") != CACHE_VERSION:
        raise ExecutableError(f"{path} is not a version-{CACHE_VERSION} Tessera tensor cache")
    tensors = {}
    for shard in cache.get("records", []):
        shard_path = os.path.join(directory, check_relative_path(shard["dataPath"], "weight shard"))
        try:
            with open(shard_path, "rb") as f:
                blob = f.read()
        except OSError as error:
            raise ExecutableError(f"cannot read weight shard {shard_path}: {error.strerror}") from None
        if len(blob) != shard["nbytes"]:
            raise ExecutableError(f"weight shard {shard['dataPath']} has {len(blob)} bytes, expected "
                                  f"{shard['nbytes']} (truncated?)")
        if hashlib.sha256(blob).hexdigest() != shard["sha256"]:
            raise ExecutableError(f"weight shard {shard['dataPath']} does not match its SHA-256 (corrupted)")
        for record in shard["records"]:
            start = record["byteOffset"]
            data = blob[start:start + record["nbytes"]]
            tensors[record["name"]] = np.frombuffer(data, record["dtype"]).reshape(record["shape"]).copy()
    return tensors
