"""One copy of the weights for all the builds of a bundle (docs/web.md).

Builds of one model for different targets mostly hold the same weights: the quantized blocks of a
GGUF are stored as they are, whatever the target, and a tied embedding is the output head too. So
a bundle stores each distinct byte string once, content-addressed (by SHA-256), in shared shards of
``weights/``, and each build gets a tensor cache of its own beside them (``weights/<build>.json``, the
format of docs/format.md) that maps its constant names onto those bytes. Names need not agree
between builds and identical bytes need not share a name: a weight an f16 build stores as f16 is
other bytes, so it is stored beside the f32 one, and each build's cache points at its own.

A shard holds only bytes that the same set of builds use, so a browser downloads exactly the shards
of the build it runs, and a shard two builds share has one URL and one SHA-256: the Cache API keeps
it once, and switching builds downloads it no more.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
from tessera.vm import CACHE_FORMAT, CACHE_VERSION, RECORD_ALIGNMENT, SHARD_BYTES

WEIGHTS_FOLDER = "weights"


def write_shared_weights(model_dir: str, builds: dict[str, dict[str, np.ndarray]]) -> dict[str, str]:
    """Write the weights of ``builds`` (build name -> its constants by name) into ``model_dir/weights/``,
    each distinct byte string once; returns each build's tensor cache path, relative to ``model_dir``."""
    folder = os.path.join(model_dir, WEIGHTS_FOLDER)
    os.makedirs(folder, exist_ok=True)
    order = list(builds)
    blobs: dict[str, bytes] = {}  # sha256 -> bytes
    users: dict[str, set[int]] = {}  # sha256 -> the builds (indices) that use them
    names: dict[str, dict[str, str]] = {}  # build -> constant name -> sha256
    for index, build in enumerate(order):
        names[build] = {}
        for name in sorted(builds[build]):
            data = np.ascontiguousarray(builds[build][name]).tobytes()
            key = hashlib.sha256(data).hexdigest()
            blobs.setdefault(key, data)
            users.setdefault(key, set()).add(index)
            names[build][name] = key
    # Shards by the set of builds that use their bytes (what all builds share first), each in the
    # order of first use, cut at the executable format's shard size.
    first_use: dict[str, int] = {}
    for key in (key for build in order for key in names[build].values()):
        first_use.setdefault(key, len(first_use))
    groups: dict[tuple[int, ...], list[str]] = {}
    for key in sorted(blobs, key=first_use.__getitem__):
        groups.setdefault(tuple(sorted(users[key])), []).append(key)
    shards: list[dict] = []  # {"dataPath", "nbytes", "sha256", "offsets": {key: offset}, "users"}
    for group, keys in sorted(groups.items(), key=lambda item: (-len(item[0]), item[0])):
        current: list[str] = []
        for key in keys + [None]:
            if current and (key is None or _aligned_size(current, blobs) + len(blobs[key]) > SHARD_BYTES):
                shards.append(_write_shard(folder, len(shards), current, blobs, group))
                current = []
            if key is not None:
                current.append(key)
    paths = {}
    for index, build in enumerate(order):
        records = []
        for shard in shards:
            if index not in shard["users"]:
                continue
            tensors = [{"name": name, "shape": list(builds[build][name].shape), "dtype": str(builds[build][name].dtype),
                        "format": "raw", "nbytes": len(blobs[key]), "byteOffset": shard["offsets"][key]}
                       for name, key in names[build].items() if key in shard["offsets"]]
            records.append({"dataPath": shard["dataPath"], "format": "raw-shard", "nbytes": shard["nbytes"],
                            "sha256": shard["sha256"], "records": tensors})
        paths[build] = f"{WEIGHTS_FOLDER}/{build}.json"
        with open(os.path.join(model_dir, paths[build]), "w", encoding="utf-8") as f:
            json.dump({"format": CACHE_FORMAT, "version": CACHE_VERSION, "records": records}, f, indent=1)
    return paths


def _aligned_size(keys: list[str], blobs: dict[str, bytes]) -> int:
    """The bytes of a shard of ``keys`` as ``_write_shard`` aligns them, up to where one more record would start."""
    size = 0
    for key in keys:
        size += -size % RECORD_ALIGNMENT + len(blobs[key])
    return size + -size % RECORD_ALIGNMENT


def _write_shard(folder: str, index: int, keys: list[str], blobs: dict[str, bytes], users: tuple[int, ...]) -> dict:
    name = f"params_shard_{index}.bin"
    blob, offsets = bytearray(), {}
    for key in keys:
        blob += bytes(-len(blob) % RECORD_ALIGNMENT)  # each record aligned to its element size (docs/format.md)
        offsets[key] = len(blob)
        blob += blobs[key]
    with open(os.path.join(folder, name), "wb") as f:
        f.write(blob)
    return {"dataPath": name, "nbytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest(), "offsets": offsets,
            "users": set(users)}


def download_bytes(build_dir: str, tensor_cache: str, shared_files: tuple[str, ...] = ()) -> int:
    """What a runtime fetches to run the build in ``build_dir``: executable.json, its kernel modules, the
    tensor cache file ``tensor_cache`` and the shards it lists, and ``shared_files`` (the tokenizer and
    chat configuration)."""
    with open(os.path.join(build_dir, "executable.json"), encoding="utf-8") as f:
        modules = json.load(f)["modules"]
    with open(tensor_cache, encoding="utf-8") as f:
        shards = json.load(f)["records"]
    files = [os.path.join(build_dir, "executable.json"), tensor_cache, *shared_files]
    return (sum(os.path.getsize(path) for path in files) + sum(m["nbytes"] for m in modules)
            + sum(s["nbytes"] for s in shards))
