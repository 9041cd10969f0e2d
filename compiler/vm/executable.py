"""The executable: one versioned file every runtime reads (docs/format.md).

``executable.json`` holds the functions as VM code, the kernel table (WGSL
source, entry point, workgroup size, binding layout, launch grid as shape
expressions), the memory plans, the target with the features and limits its
kernels need, and a reference to the weights: ``tensor-cache.json`` plus
``params_shard_*.bin`` files of at most 32 MiB, each with its SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field

import numpy as np

from ..ir.errors import TesseraError

FORMAT = "tessera-executable"
VERSION = 1
CACHE_FORMAT = "tessera-tensor-cache"
SHARD_BYTES = 32 << 20
WASM_FILE = "kernels.wasm"


class ExecutableError(TesseraError):
    """An executable or weight file that cannot be used: missing, truncated, corrupted, wrong version or target."""


@dataclass
class Executable:
    target: dict
    functions: dict  # name -> {"params", "symbols", "code", "memory", "registers", "result"}
    kernels: list  # kernel records
    required_features: list
    required_limits: dict
    constants: dict = field(default_factory=dict)  # name -> numpy array (the weights)
    wasm: bytes | None = None  # target wasm: the module with every kernel (kernels.wasm)

    def to_json(self) -> dict:
        doc = {"format": FORMAT, "version": VERSION, "target": self.target, "required_features":
               self.required_features, "required_limits": self.required_limits, "functions": self.functions,
               "kernels": self.kernels, "constants": sorted(self.constants)}
        if self.wasm is not None:
            doc["wasm"] = {"path": WASM_FILE, "nbytes": len(self.wasm), "sha256": hashlib.sha256(self.wasm).hexdigest()}
        return doc

    def save(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        save_tensor_cache(directory, self.constants)
        if self.wasm is not None:
            with open(os.path.join(directory, WASM_FILE), "wb") as f:
                f.write(self.wasm)
        text = json.dumps(self.to_json(), indent=1, sort_keys=True)
        with open(os.path.join(directory, "executable.json"), "w", encoding="utf-8") as f:
            f.write(text)

    @staticmethod
    def load(directory: str, target_kind: str | None = None) -> Executable:
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
                                  f"version {VERSION}: rebuild it with this compiler")
        kind = data.get("target", {}).get("kind")
        if target_kind is not None and kind != target_kind:
            raise ExecutableError(f"{path} was built for target {kind!r}, not {target_kind!r}")
        for kernel in data.get("kernels", []):
            digest = hashlib.sha256(kernel.get("wgsl", kernel.get("c", "")).encode()).hexdigest()
            if digest != kernel.get("sha256"):
                raise ExecutableError(f"kernel {kernel.get('name')} in {path} does not match its checksum")
        constants = load_tensor_cache(directory) if data.get("constants") else {}
        missing = set(data.get("constants", [])) - set(constants)
        if missing:
            raise ExecutableError(f"weights missing from tensor-cache.json: {', '.join(sorted(missing))}")
        wasm = _load_wasm(directory, data["wasm"]) if "wasm" in data else None
        try:
            return Executable(data["target"], data["functions"], data["kernels"], data["required_features"],
                              data["required_limits"], constants, wasm)
        except KeyError as error:
            raise ExecutableError(f"{path} lacks the field {error.args[0]!r}") from None


def _load_wasm(directory: str, record: dict) -> bytes:
    path = os.path.join(directory, record.get("path", WASM_FILE))
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        raise ExecutableError(f"cannot read {path}: {error.strerror}") from None
    if hashlib.sha256(data).hexdigest() != record.get("sha256"):
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
    cache = {"format": CACHE_FORMAT, "version": VERSION, "records": shards}
    with open(os.path.join(directory, "tensor-cache.json"), "w", encoding="utf-8") as f:
        json.dump(cache, f, indent=1)


def load_tensor_cache(directory: str) -> dict[str, np.ndarray]:
    path = os.path.join(directory, "tensor-cache.json")
    try:
        with open(path, encoding="utf-8") as f:
            cache = json.load(f)
    except OSError as error:
        raise ExecutableError(f"cannot read {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise ExecutableError(f"{path} is not valid JSON: {error.msg}") from None
    if cache.get("format") != CACHE_FORMAT or cache.get("version") != VERSION:
        raise ExecutableError(f"{path} is not a version-{VERSION} Tessera tensor cache")
    tensors = {}
    for shard in cache.get("records", []):
        shard_path = os.path.join(directory, shard["dataPath"])
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
