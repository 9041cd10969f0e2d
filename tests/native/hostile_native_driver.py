"""Loads each case of tests/native/test_hostile_files_native.py with runtime-native (tessera.native) and runs
its main, one JSON line per case on stdout, written before the next starts: should the library crash on a
case, the test sees which.

    python tests/native/hostile_native_driver.py CASES.json

A case: {"label", "folder", "files": {name: text}, "links": {name: target}, "fifos": [name], "dirs": [name]}:
``folder``'s files with those in place (a symlink, a FIFO or a directory where the file was), in a work
folder beside it. A line: {"label", "loaded", "error", "ran", "correct", "run_error"}: ``correct`` when
main's output is the small module's (tests/fixtures/hostile_files.py).
"""

import json
import os
import shutil
import sys

import numpy as np
from tessera.native import NativeError, NativeModel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fixtures.hostile_files import expected_output  # noqa: E402


def main(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(3, 16)
    for case in cases:
        work = case["folder"] + "-native-case"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(case["folder"], work, symlinks=True)
        for name, text in case.get("files", {}).items():
            with open(os.path.join(work, name), "wb") as f:
                f.write(text.encode("latin-1"))
        for name in [*case.get("links", {}), *case.get("fifos", []), *case.get("dirs", [])]:
            if os.path.lexists(os.path.join(work, name)):
                os.unlink(os.path.join(work, name))
        for name, target in case.get("links", {}).items():
            os.symlink(target, os.path.join(work, name))
        for name in case.get("fifos", []):
            os.mkfifo(os.path.join(work, name))
        for name in case.get("dirs", []):
            os.mkdir(os.path.join(work, name))
        line = {"label": case["label"], "loaded": False, "error": None, "ran": False, "correct": False,
                "run_error": None}
        print(json.dumps({"starting": case["label"]}), flush=True)
        try:
            model = NativeModel(work, n_threads=1)
            line["loaded"] = True
        except NativeError as error:
            line["error"] = str(error)
        if line["loaded"]:
            try:
                (y,) = model.call("main", x)
                line["ran"] = True
                line["correct"] = bool(np.allclose(y, expected_output(x), rtol=1e-4, atol=1e-5))
            except NativeError as error:
                line["run_error"] = str(error)
            model.close()
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
