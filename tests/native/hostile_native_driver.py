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
import sys

import numpy as np
from tessera.native import NativeError, NativeModel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fixtures.hostile_files import case_folder, expected_output  # noqa: E402


def main(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(3, 16)
    for case in cases:
        work = case_folder(case, "-native-case")
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
