"""`tessera bundle` as docs/web.md states it: one copy of the weights for all builds (issue 16 item 6),
and per build the bytes to download and the device memory it needs, recorded in bundle.json and printed
by `tessera inspect` (item 10); a bundle.json with a bad figure is an error that names it."""

import copy
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from tessera.app.bundle import bundle_model
from tessera.app.bundle_json import BundleError, build_files, check_bundle, read_bundle
from tessera.app.chat import ChatSession, Sampling
from tessera.app.compile import cached_compile
from tessera.app.memory import device_memory
from tessera.app.weights import write_shared_weights
from tessera.vm import Executable
from tessera.vm.executable import load_tensor_cache

TARGETS = ("webgpu-f16", "webgpu", "wasm")
TESSERA = [sys.executable, "-m", "tessera.cli"]


def run(*args):
    return subprocess.run(TESSERA + list(args), capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def site(tiny_gguf, tmp_path_factory):
    """The tiny model bundled for WebGPU f16, WebGPU f32 and WASM: (site folder, model folder)."""
    output = str(tmp_path_factory.mktemp("site"))
    return output, bundle_model(tiny_gguf, output, context_length=64, targets=TARGETS)


def shard_blobs(model_dir: str) -> list[bytes]:
    folder = os.path.join(model_dir, "weights")
    return [open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder)) if name.endswith(".bin")]


def test_each_weight_is_stored_once_and_every_build_replies_alike(site, tiny_gguf):
    _, model_dir = site
    compiled = {t: Executable.load(cached_compile(tiny_gguf, t, 64)) for t in TARGETS}
    distinct = {a.tobytes() for exe in compiled.values() for a in exe.constants.values()}
    shards = shard_blobs(model_dir)
    assert sum(len(s) for s in shards) == sum(len(b) for b in distinct), "the shards hold each byte string once"
    for data in distinct:
        if len(data) >= 64:  # shorter strings may also occur inside longer tensors by chance
            assert sum(s.count(data) for s in shards) == 1
    # Three builds' weights, one copy: what separate tensor caches would have held three times.
    assert sum(len(s) for s in shards) * 3 <= sum(a.nbytes for e in compiled.values() for a in e.constants.values()) + 64
    replies = []
    for target in TARGETS:
        folder = os.path.join(model_dir, target)
        # The weights, tokenizer and chat configuration are the bundle's, once; a build holds its program.
        assert not set(os.listdir(folder)) & {"tensor-cache.json", "params_shard_0.bin", "tokenizer.json", "chat-config.json"}
        files = build_files(folder)
        assert (files.tensor_cache, files.tokenizer, files.chat_config) == (
            os.path.join(model_dir, "weights", f"{target}.json"), os.path.join(model_dir, "tokenizer.json"),
            os.path.join(model_dir, "chat-config.json"))
        loaded = Executable.load(folder, files.tensor_cache)
        assert sorted(loaded.constants) == sorted(compiled[target].constants)
        for name, array in compiled[target].constants.items():
            assert loaded.constants[name].dtype == array.dtype and np.array_equal(loaded.constants[name], array)
        session = ChatSession(folder)  # the Python VM on the build's device: llvmpipe, wasmtime
        replies.append(session.reply([{"role": "user", "content": "Hi"}], 6, Sampling(temperature=0.0))["reply"])
    assert replies[0] and replies == [replies[0]] * len(replies), replies


def test_bytes_that_differ_are_kept_apart_and_each_build_lists_only_its_shards(tmp_path):
    """An f16 build stores some weights as f16: other bytes, stored beside the f32 ones; a weight of
    another name with the same bytes is shared; a build downloads only the shards it uses."""
    rng = np.random.default_rng(0)
    w, norm, head = (rng.standard_normal(s).astype(np.float32) for s in ((64, 32), (32,), (16, 32)))
    builds = {"webgpu-f16": {"w": w, "norm": norm.astype(np.float16)},
              "webgpu": {"w": w, "norm": norm, "head": head},
              "wasm": {"weight_0": w, "norm": norm, "head": head}}
    caches = write_shared_weights(str(tmp_path), builds)
    assert caches == {name: f"weights/{name}.json" for name in builds}
    shards = shard_blobs(str(tmp_path))
    stored = w.nbytes + norm.nbytes + norm.astype(np.float16).nbytes + head.nbytes
    assert sum(len(s) for s in shards) == stored
    for name, tensors in builds.items():
        loaded = load_tensor_cache(os.path.join(tmp_path, caches[name]))
        assert sorted(loaded) == sorted(tensors)
        for key, array in tensors.items():
            assert loaded[key].dtype == array.dtype and np.array_equal(loaded[key], array)
        listed = json.load(open(os.path.join(tmp_path, caches[name])))["records"]
        for shard in listed:  # every tensor of a listed shard is one this build uses
            data = open(os.path.join(tmp_path, "weights", shard["dataPath"]), "rb").read()
            assert hashlib.sha256(data).hexdigest() == shard["sha256"]
            used = {(r["byteOffset"], r["nbytes"]) for r in shard["records"]}
            assert sum(n for _, n in used) == len(data)
    f16 = json.load(open(os.path.join(tmp_path, caches["webgpu-f16"])))["records"]
    assert sum(s["nbytes"] for s in f16) == w.nbytes + norm.astype(np.float16).nbytes, "f16 fetches no f32 norm, no head"


def test_bundle_json_records_what_each_build_downloads_and_needs(site, tiny_gguf):
    _, model_dir = site
    index = read_bundle(model_dir)
    assert index["version"] == 2 and index["model"] == "tiny" and [b["name"] for b in index["builds"]] == list(TARGETS)
    assert (index["tokenizer"], index["chat_config"]) == ("tokenizer.json", "chat-config.json")
    page = open(os.path.join(site[0], "index.html"), encoding="utf-8").read()
    assert 'data-model-url="models/tiny/"' in page
    for build in index["builds"]:
        exe = Executable.load(cached_compile(tiny_gguf, build["name"], 64))
        memory = device_memory(exe)
        figures = build["memory"]
        assert figures == {"weights_bytes": memory.weights, "arena_bytes": memory.arena,
                           "kv_cache_bytes": memory.kv_cache, "total_bytes": memory.total,
                           "largest_buffer_bytes": memory.largest_buffer, "largest_binding_bytes": memory.largest_binding}
        assert figures["total_bytes"] == figures["weights_bytes"] + figures["arena_bytes"] + figures["kv_cache_bytes"]
        # Two layers, K and V of 64 positions x 2 KV heads x 16 values, float16 in the webgpu-f16 build
        # (half the bytes), float32 in the others; the largest buffer: a 49152-row head.
        value_bytes = 2 if build["name"] == "webgpu-f16" else 4
        assert figures["kv_cache_bytes"] == 4 * 64 * 2 * 16 * value_bytes
        assert figures["largest_buffer_bytes"] == max(a.nbytes for a in exe.constants.values())
        assert figures["largest_buffer_bytes"] > exe.required_limits["maxBufferSize"], "weights count, not only arenas"
        assert build["kind"] == exe.target["kind"] and build["features"] == exe.required_features
        # Everything the runtime fetches for this build, file by file.
        folder = os.path.join(model_dir, build["path"])
        cache = os.path.join(model_dir, build["tensor_cache"])
        files = [os.path.join(folder, "executable.json"), cache, os.path.join(model_dir, index["tokenizer"]),
                 os.path.join(model_dir, index["chat_config"])]
        files += [os.path.join(folder, m["path"]) for m in json.load(open(files[0]))["modules"]]
        files += [os.path.join(model_dir, "weights", s["dataPath"]) for s in json.load(open(cache))["records"]]
        assert build["download_bytes"] == sum(os.path.getsize(f) for f in files)


def test_inspect_prints_the_figures_of_bundle_json(site):
    root, model_dir = site
    index = read_bundle(model_dir)
    data = json.loads(run("inspect", model_dir, "--json").stdout)
    assert [{k: b[k] for k in ("name", "download_bytes", "memory")} for b in data["builds"]] == \
        [{k: b[k] for k in ("name", "download_bytes", "memory")} for b in index["builds"]]
    assert data["weights_on_disk_bytes"] == sum(len(s) for s in shard_blobs(model_dir))
    text = run("inspect", root).stdout  # the site: each model's bundle
    assert text == run("inspect", model_dir).stdout
    for build in index["builds"]:
        memory = build["memory"]
        assert f"  download: {build['download_bytes'] / 2**20:.2f} MiB ({build['download_bytes']} bytes)\n" in text
        assert (f"  device memory: {memory['total_bytes'] / 2**20:.2f} MiB ({memory['total_bytes']} bytes): weights "
                f"{memory['weights_bytes'] / 2**20:.2f} MiB, arenas {memory['arena_bytes'] / 2**20:.2f} MiB, KV cache "
                f"{memory['kv_cache_bytes'] / 2**20:.2f} MiB\n") in text
        assert f"  largest buffer: {memory['largest_buffer_bytes'] / 2**20:.2f} MiB ({memory['largest_buffer_bytes']} " \
               f"bytes) (maxBufferSize)" in text
    assert "each distinct tensor once" in text
    # A build's folder in the bundle is an executable folder too, its weights in the shared folder.
    build = json.loads(run("inspect", os.path.join(model_dir, "wasm"), "--json").stdout)
    assert build["device_memory"]["largest_buffer_bytes"] == index["builds"][2]["memory"]["largest_buffer_bytes"]
    assert build["device_memory"]["total_bytes"] == index["builds"][2]["memory"]["total_bytes"]


@pytest.mark.parametrize("damage, message", [
    (lambda b: b["builds"][0].pop("download_bytes"), "build webgpu-f16's download_bytes is missing"),
    (lambda b: b["builds"][1]["memory"].__setitem__("arena_bytes", -5),
     r"build webgpu's memory.arena_bytes is -5, outside 0 \.\. 2\*\*53 - 1 bytes"),
    (lambda b: b["builds"][2]["memory"].__setitem__("total_bytes", 10 ** 30),
     r"build wasm's memory.total_bytes is 10{30}, outside"),
    (lambda b: b["builds"][2]["memory"].__setitem__("kv_cache_bytes", 1.5), "is 1.5, not a whole number of bytes"),
    (lambda b: b["builds"][2]["memory"].__setitem__("weights_bytes", "7 MB"), "is '7 MB', not a whole number"),
    (lambda b: b["builds"][0].pop("memory"), "build webgpu-f16 has no memory figures"),
    (lambda b: b["builds"][0].__setitem__("tensor_cache", "../../secret.json"), "not a relative path inside"),
    (lambda b: b.__setitem__("version", 1), "version 1; this Tessera reads version 2: bundle the model again"),
])
def test_a_bad_figure_in_bundle_json_is_an_error_that_names_it(site, tmp_path, damage, message):
    _, model_dir = site
    doc = copy.deepcopy(read_bundle(model_dir))
    damage(doc)
    with pytest.raises(BundleError, match=message):
        check_bundle(doc)
    broken = tmp_path / "model"
    broken.mkdir()
    (broken / "bundle.json").write_text(json.dumps(doc))
    result = run("inspect", str(broken))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: {broken / 'bundle.json'}: ")


def test_bundle_gpu_layers_splits_the_webgpu_build(tiny_gguf, tmp_path):
    """`tessera bundle --gpu-layers 1`: the WebGPU build is split (layer 0 on WebGPU, the rest on WASM,
    format version 4) and the WASM fallback stays whole; the weights are still stored once. Asking to
    split a float16 build is one clear line."""
    output = str(tmp_path / "site")
    result = run("bundle", tiny_gguf, "-o", output, "--context", "64", "--gpu-layers", "1")
    assert result.returncode == 0, result.stderr
    model_dir = os.path.join(output, "models", "tiny")
    index = json.load(open(os.path.join(model_dir, "bundle.json")))
    assert [b["name"] for b in index["builds"]] == ["webgpu", "wasm"]
    split = json.load(open(os.path.join(model_dir, "webgpu", "executable.json")))
    whole = json.load(open(os.path.join(model_dir, "wasm", "executable.json")))
    assert split["version"] == 4 and [d["vdevices"] for d in split["devices"]] == [["webgpu:0"], ["wasm:0"]]
    assert whole["version"] == 3
    names = [r["name"] for cache in os.listdir(os.path.join(model_dir, "weights")) if cache.endswith(".json")
             for shard in json.load(open(os.path.join(model_dir, "weights", cache)))["records"] for r in shard["records"]]
    assert len(names) > len(set(names))  # both builds name the same stored tensors
    bad = run("bundle", tiny_gguf, "-o", str(tmp_path / "bad"), "--context", "64", "--gpu-layers", "1",
              "--targets", "webgpu-f16,wasm")
    assert bad.returncode == 1 and "--gpu-layers splits float32 builds; drop webgpu-f16" in bad.stderr
    assert "Traceback" not in bad.stderr
