"""runtime-js refuses the files the Python loader refuses (issue 17): every case of
tests/fixtures/hostile_files.py, fed to the JS loader by tests/js/hostile-files.mjs as a page loads a
bundle, gets the same verdict from both runtimes, a FormatError or LoadError naming the field in JS, and
no URL the JS loader asks for leaves the model's folder. A plan that would run garbage or fail inside a
device (issue 32) is refused where the Python VM refuses it: at load, by the WASM VM, or by a WebGPU
device's limits."""

import copy
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from fixtures.hostile_files import (
    ESCAPING_PATHS,
    EVERY_DEVICE,
    LOAD,
    NONE,
    WEBGPU,
    WEBGPU_DEFAULTS,
    broken_texts,
    expected_output,
    mutations,
    plan_cases,
    small_build,
)
from tessera.app.bundle_json import BundleError, check_bundle
from tessera.app.chat_files import ChatFilesError, read_chat_config
from tessera.vm import Executable, ExecutableError

DRIVER = os.path.join(os.path.dirname(__file__), "hostile-files.mjs")

BUNDLE = {"format": "tessera-bundle", "version": 2, "model": "m", "tokenizer": "tokenizer.json",
          "chat_config": "chat-config.json",
          "builds": [{"name": "wasm", "kind": "wasm", "path": "wasm/", "features": [], "tensor_cache": "weights/wasm.json",
                      "download_bytes": 100, "memory": {"weights_bytes": 1, "arena_bytes": 2, "kv_cache_bytes": 3,
                                                        "total_bytes": 6, "largest_buffer_bytes": 3,
                                                        "largest_binding_bytes": 3}}]}
TOKENIZER = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
             "added_tokens": [{"id": 3, "content": "<|im_end|>", "special": True}]}
CHAT_CONFIG = {"model": "m.gguf", "context_length": 64, "prefill_chunk": 64, "stop_token_ids": [3],
               "chat_template": "{{ messages[0]['content'] }}", "bos_token_id": 0, "bos_token": "a", "eos_token": "b",
               "add_bos_token": False, "compiler_version": "0.1.0",
               "chat_format": {"version": 1, "begin": "", "default_system": None,
                               "roles": {"user": {"prefix": "<u>", "suffix": "</u>"}},
                               "generation_prompt": "<a>", "end": "", "trim_content": False}}


def run_js(cases, tmp_path) -> dict:
    node = shutil.which("node")
    assert node, "node is not on PATH (runtime-js's tests need Node.js 20 or later)"
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases), encoding="utf-8")
    result = subprocess.run([node, DRIVER, str(path)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return {r["label"]: r for r in json.loads(result.stdout)}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("hostile-js") / "build")
    doc = small_build("wasm", folder)
    with open(os.path.join(folder, "tensor-cache.json"), encoding="utf-8") as f:
        return folder, doc, json.load(f)


def python_verdict(folder, files) -> str | None:
    """The Python loader's error on ``folder`` with ``files`` (name -> text) in place, or None."""
    case = folder + "-case"
    shutil.rmtree(case, ignore_errors=True)
    shutil.copytree(folder, case)
    for name, text in files.items():
        with open(os.path.join(case, name), "w" if isinstance(text, str) else "wb") as f:
            f.write(text)
    try:
        Executable.load(case)
    except ExecutableError as error:
        return str(error)
    return None


def compare(cases, verdicts, results):
    """Every case: the same verdict from both runtimes, a named error in JS, no URL outside the folder."""
    disagree, unnamed, outside = [], [], []
    for case in cases:
        js, py = results[case["label"]], verdicts[case["label"]]
        if js["refused"] != (py is not None):
            disagree.append(f"{case['label']}: Python {'refuses: ' + py if py else 'loads'}; JS "
                            f"{'refuses: ' + js['message'] if js['refused'] else 'loads'}")
        elif js["refused"] and js["name"] not in ("FormatError", "LoadError"):
            unnamed.append(f"{case['label']}: {js['name']}: {js['message']}")
        if js["outside"]:
            outside.append(f"{case['label']}: {js['outside']}")
    assert not disagree, "\n".join(disagree)
    assert not unnamed, "\n".join(unnamed)
    assert not outside, "\n".join(outside)


def test_every_malformed_executable_and_tensor_cache_gets_the_python_loaders_verdict(build, tmp_path):
    folder, doc, cache = build
    cases, verdicts = [], {}
    for name, document in (("executable.json", doc), ("tensor-cache.json", cache)):
        for label, _, _, mutated in mutations(document):
            files = {name: json.dumps(mutated)}
            label = f"{name}: {label}"
            cases.append({"label": label, "kind": "build", "folder": folder, "files": files})
            verdicts[label] = python_verdict(folder, files)
        for label, text in broken_texts():
            label = f"{name}: {label}"
            # JSON.parse reads a member twice as the last one; the Python loader refuses it (runtime-native too).
            if label.endswith("a member twice"):
                continue
            cases.append({"label": label, "kind": "build", "folder": folder,
                          "files": {name: text.decode("latin-1")}})
            verdicts[label] = python_verdict(folder, {name: text})
    assert sum(v is not None for v in verdicts.values()) > 800
    compare(cases, verdicts, run_js(cases, tmp_path))


def test_every_malformed_split_executable_gets_the_python_loaders_verdict(tmp_path):
    """Version 4: every field of a split build's executable.json (its devices, constant_devices, each
    kernel's, tensor's, parameter's, storage's and instruction's device, the to_device instruction) changed
    one at a time gets the same verdict from both loaders."""
    import tessera
    from modules import SPLIT_ACROSS_DEVICES
    from tessera.script import from_source

    folder = str(tmp_path / "split")
    exe = tessera.build(from_source(SPLIT_ACROSS_DEVICES), "llvmpipe")
    assert exe.version == 4
    exe.save(folder)
    with open(os.path.join(folder, "executable.json"), encoding="utf-8") as f:
        doc = json.load(f)
    code = doc["functions"]["main"]["code"]

    def about_devices(path) -> bool:  # the rest of the format is the version-3 test's
        return path == ("version",) or any(isinstance(p, str) and "device" in p for p in path) or (
            path[:3] == ("functions", "main", "code") and len(path) > 3 and code[path[3]]["op"] == "to_device")

    cases, verdicts = [], {}
    changed = [m for m in mutations(doc) if about_devices(m[2])]
    for label, _, _, mutated in changed + [("version 3", "", (), {**doc, "version": 3}),
                                           ("a weight it lacks", "", (), {**doc, "constant_devices": {"w": [0]}})]:
        files = {"executable.json": json.dumps(mutated)}
        label = f"split executable.json: {label}"
        cases.append({"label": label, "kind": "build", "folder": folder, "files": files})
        verdicts[label] = python_verdict(folder, files)
    assert sum(v is not None for v in verdicts.values()) > 100, len(verdicts)
    compare(cases, verdicts, run_js(cases, tmp_path))


def test_no_escaping_path_in_a_build_is_fetched(build, tmp_path):
    folder, doc, cache = build
    module = doc["kernels"][0]["module"]  # the module a kernel names (a WASM build lists kernels-threads.wasm too)
    cases, verdicts = [], {}
    for path in ESCAPING_PATHS:
        executable = json.dumps(doc).replace(json.dumps(module), json.dumps(path))
        shard = json.dumps({**cache, "records": [{**cache["records"][0], "dataPath": path}]})
        for label, files in ((f"module {path!r}", {"executable.json": executable}),
                             (f"shard {path!r}", {"tensor-cache.json": shard})):
            cases.append({"label": label, "kind": "build", "folder": folder, "files": files})
            verdicts[label] = python_verdict(folder, files)
            assert verdicts[label] is not None, label
    compare(cases, verdicts, run_js(cases, tmp_path))


def test_bundle_json_and_chat_config_are_refused_alike(build, tmp_path):
    """bundle.json's tokenizer, chat_config, build paths and tensor caches, every field of it and of
    chat-config.json: the Python readers' verdicts are runtime-js's."""
    folder = str(tmp_path / "model")
    os.makedirs(folder)
    for name, doc in (("tokenizer.json", TOKENIZER), ("chat-config.json", CHAT_CONFIG)):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            json.dump(doc, f)
    ids = [0, 1, 2, 3]
    cases, verdicts = [], {}

    def bundle_verdict(doc):
        try:
            check_bundle(copy.deepcopy(doc))
        except BundleError as error:
            return str(error)
        return None

    for label, _, _, mutated in mutations(BUNDLE):
        label = f"bundle.json: {label}"
        cases.append({"label": label, "kind": "bundle", "folder": folder, "files": {"bundle.json": json.dumps(mutated)}})
        verdicts[label] = bundle_verdict(mutated)
    for path in ESCAPING_PATHS:
        for key in ("tokenizer", "chat_config"):
            label = f"bundle.json: {key} {path!r}"
            doc = {**BUNDLE, key: path}
            cases.append({"label": label, "kind": "bundle", "folder": folder, "files": {"bundle.json": json.dumps(doc)}})
            verdicts[label] = bundle_verdict(doc)
        for key in ("path", "tensor_cache"):
            label = f"bundle.json: build {key} {path!r}"
            doc = {**BUNDLE, "builds": [{**BUNDLE["builds"][0], key: path}]}
            cases.append({"label": label, "kind": "bundle", "folder": folder, "files": {"bundle.json": json.dumps(doc)}})
            verdicts[label] = bundle_verdict(doc)
    config_path = os.path.join(folder, "case-chat-config.json")
    for label, _, _, mutated in mutations(CHAT_CONFIG) + [("stop id past the vocabulary", "", (), {
            **CHAT_CONFIG, "stop_token_ids": [4]})]:
        label = f"chat-config.json: {label}"
        with open(config_path, "w", encoding="utf-8") as f:
            json.dump(mutated, f)
        try:
            read_chat_config(config_path, len(ids))
            verdicts[label] = None
        except ChatFilesError as error:
            verdicts[label] = str(error)
        cases.append({"label": label, "kind": "chat-config", "doc": mutated, "ids": ids})
    # The real files load in both.
    label = "bundle.json as written"
    cases.append({"label": label, "kind": "bundle", "folder": folder, "files": {"bundle.json": json.dumps(BUNDLE)}})
    verdicts[label] = None
    results = run_js(cases, tmp_path)
    compare(cases, verdicts, results)
    assert sum(v is not None for v in verdicts.values()) > 150
    assert not results[label]["refused"] and sorted(results[label]["urls"]) == [
        "http://bundle.test/models/m/bundle.json", "http://bundle.test/models/m/chat-config.json",
        "http://bundle.test/models/m/tokenizer.json"]


def test_a_plan_that_would_run_garbage_or_fail_inside_the_device_is_refused_where_python_refuses_it(build, tmp_path):
    """Each plan case of the corpus: refused at load, by the WASM VM (a DeviceError), or by a WebGPU device's
    limits, as tests/vm/test_hostile_files.py expects of the Python VM, each error one line naming the field;
    the near misses load and compute the small module's answer."""
    folder, doc, _ = build
    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(3, 16)
    expected = {}
    cases = []
    for label, where, names, mutated in plan_cases(doc):
        cases.append({"label": label, "kind": "build", "folder": folder, "files": {"executable.json": json.dumps(mutated)},
                      "fit": list(WEBGPU_DEFAULTS), "wasm": True,
                      "input": {"data": x.ravel().tolist(), "shape": list(x.shape)}})
        expected[label] = (where, names)
    wrong = []
    for label, result in run_js(cases, tmp_path).items():
        where, names = expected[label]
        if result["refused"]:
            verdict, message = LOAD, result["message"]
        elif result["vmRefused"]:
            verdict, message = EVERY_DEVICE, f"{result['vmName']}: {result['vmMessage']}"
        elif result["fitRefused"]:
            verdict, message = WEBGPU, result["fitMessage"]
        else:
            right = np.allclose(np.reshape(result["output"], (3, 8)), expected_output(x), rtol=1e-4, atol=1e-5)
            verdict, message = (NONE, "") if right else ("a wrong answer", "")
        if verdict != where or names not in message or "\n" in message or (verdict == EVERY_DEVICE and not
                                                                           message.startswith("DeviceError: ")):
            wrong.append(f"{label}: expected {where} naming {names!r}, got {verdict}: {message}")
    assert not wrong, "\n".join(wrong)
    assert len(expected) == 20
