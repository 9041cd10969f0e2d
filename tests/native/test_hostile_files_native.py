"""runtime-native against the hostile files of tests/fixtures/hostile_files.py (issue 17), on a small
executable compiled for the cpu target, driven in a child process (tests/native/hostile_native_driver.py)
so that a crash would name its case:

- no case crashes it; every escaping path, symlink out of the folder, FIFO, device or directory is
  refused at load, as the Python loader refuses it;
- what the Python loader accepts (an optional member deleted), native loads too;
- what the Python loader refuses, native refuses at load, or (a member native does not read, such as a
  kernel binding's name or a target's description) loads and still computes the right answer, or stops
  with a NativeError: never a wrong answer, never a crash;
- a plan that would run garbage or fail inside a device (issue 32) is refused at load where the Python VM
  refuses it at load or when it opens a CPU device; the near misses load and compute the right answer.
"""

import json
import os
import subprocess
import sys

import pytest
from fixtures.hostile_files import (
    ESCAPING_PATHS,
    EVERY_DEVICE,
    LOAD,
    broken_texts,
    case_folder,
    mutations,
    plan_cases,
    small_build,
)
from tessera.vm import Executable, ExecutableError

from native.build import ensure_native_build

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile_native_driver.py")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    ensure_native_build()
    folder = str(tmp_path_factory.mktemp("hostile-native") / "build")
    doc = small_build("cpu", folder)
    with open(os.path.join(folder, "tensor-cache.json"), encoding="utf-8") as f:
        return folder, doc, json.load(f)


def run_native(cases, tmp_path) -> dict:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases), encoding="utf-8")
    result = subprocess.run([sys.executable, DRIVER, str(path)], capture_output=True, text=True, timeout=900,
                            cwd=os.path.dirname(os.path.dirname(DRIVER)))
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    done = {line["label"]: line for line in lines if "loaded" in line}
    if result.returncode != 0 or len(done) < len(cases):
        started = [line["starting"] for line in lines if "starting" in line]
        pytest.fail(f"runtime-native crashed (status {result.returncode}) on the case {started[-1]!r}:\n"
                    f"{result.stderr[-2000:]}")
    return done


def python_verdict(folder, case) -> str | None:
    work = case_folder(dict(case, folder=folder), "-python-case")
    try:
        Executable.load(work)
    except ExecutableError as error:
        return str(error)
    return None


def test_native_refuses_what_python_refuses_or_still_computes_the_right_answer(build, tmp_path):
    folder, doc, cache = build
    cases = []
    for name, document in (("executable.json", doc), ("tensor-cache.json", cache)):
        cases += [{"label": f"{name}: {label}", "folder": folder, "files": {name: json.dumps(mutated)}}
                  for label, _, _, mutated in mutations(document)]
        cases += [{"label": f"{name}: {label}", "folder": folder, "files": {name: text.decode("latin-1")}}
                  for label, text in broken_texts()]
    native = run_native(cases, tmp_path)
    wrong, stricter, refused_alike = [], [], 0
    for case in cases:
        result, python = native[case["label"]], python_verdict(folder, case)
        if python is None and not result["loaded"]:  # (main may still stop with a clear error, as in Python)
            stricter.append(f"{case['label']}: {result['error']}")
        elif python is not None and result["loaded"]:
            if result["ran"] and not result["correct"]:
                wrong.append(f"{case['label']}: loads and computes a wrong answer")
        elif python is not None:
            refused_alike += 1
    assert not wrong, "\n".join(wrong)
    assert not stricter, "\n".join(stricter)
    assert refused_alike > 600


def test_no_escaping_path_symlink_fifo_device_or_directory_is_read(build, tmp_path):
    folder, doc, cache = build
    module = doc["modules"][0]["path"]
    shard = cache["records"][0]["dataPath"]
    outside = str(tmp_path / "secret.bin")
    with open(outside, "wb") as f:
        f.write(b"secret" * 100)
    cases = []
    for path in ESCAPING_PATHS:
        cases.append({"label": f"module {path!r}", "folder": folder,
                      "files": {"executable.json": json.dumps(doc).replace(json.dumps(module), json.dumps(path))}})
        cases.append({"label": f"shard {path!r}", "folder": folder, "files": {"tensor-cache.json": json.dumps(
            {**cache, "records": [{**cache["records"][0], "dataPath": path}]})}})
    for name in (module, shard, "executable.json", "tensor-cache.json"):
        cases += [{"label": f"{name}: a symlink out of the folder", "folder": folder, "links": {name: outside}},
                  {"label": f"{name}: a symlink to /dev/zero", "folder": folder, "links": {name: "/dev/zero"}},
                  {"label": f"{name}: a FIFO", "folder": folder, "fifos": [name]},
                  {"label": f"{name}: a directory", "folder": folder, "dirs": [name]}]
    native = run_native(cases, tmp_path)
    for case in cases:
        assert python_verdict(folder, case) is not None, case["label"]
        result = native[case["label"]]
        assert not result["loaded"], case["label"]
        assert any(why in result["error"] for why in ("not a relative path inside the folder", "leaves the folder",
                                                      "not a regular file", "is a FIFO", "is a directory",
                                                      "holds the NUL character")), \
            (case["label"], result["error"])


def test_a_plan_that_would_run_garbage_or_fail_inside_the_device_is_refused_at_load(build, tmp_path):
    """Each plan case of the corpus: refused at load with one line naming the field where the Python VM
    refuses it (at load, or by every device: native's CPU device is known at load); a case only a WebGPU
    device refuses, or none, loads and computes the small module's answer."""
    folder, doc, _ = build
    expected = {label: (where, names) for label, where, names, _ in plan_cases(doc)}
    cases = [{"label": label, "folder": folder, "files": {"executable.json": json.dumps(mutated)}}
             for label, _, _, mutated in plan_cases(doc)]
    wrong = []
    for label, result in run_native(cases, tmp_path).items():
        where, names = expected[label]
        if where in (LOAD, EVERY_DEVICE):
            if result["loaded"] or names not in result["error"] or "\n" in result["error"]:
                wrong.append(f"{label}: expected a refusal naming {names!r}, got {result}")
        elif not (result["loaded"] and result["ran"] and result["correct"]):
            wrong.append(f"{label}: expected the right answer, got {result}")
    assert not wrong, "\n".join(wrong)
    assert len(expected) == 20
