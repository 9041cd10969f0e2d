"""Reading a conformance case folder and judging a runtime's outputs (tests/conformance/README.md).

Every Python-hosted adapter uses this; runner.mjs is the same for the JavaScript ones. An adapter
supplies ``open_function(folder) -> call(function, args) -> result`` and gets a ``CaseReport``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

CASE_FILE = "case.json"
INDEX_FILE = "index.json"
CASE_FORMAT, INDEX_FORMAT, VERSION = "tessera-conformance-case", "tessera-conformance-index", 1


class MissingBuild(AssertionError):
    """The folders generate.py writes are not there."""


def read_index(root: str) -> dict:
    path = os.path.join(root, INDEX_FILE)
    if not os.path.exists(path):
        raise MissingBuild(f"{path} is missing: run `python tests/conformance/generate.py` (make test-python "
                           "runs it) to build the conformance cases")
    with open(path, encoding="utf-8") as f:
        index = json.load(f)
    if index.get("format") != INDEX_FORMAT or index.get("version") != VERSION:
        raise MissingBuild(f"{path} is not a version {VERSION} conformance index: rebuild it")
    return index


def read_case(folder: str) -> dict:
    path = os.path.join(folder, CASE_FILE)
    if not os.path.exists(path):
        raise MissingBuild(f"{path} is missing: run `python tests/conformance/generate.py`")
    with open(path, encoding="utf-8") as f:
        case = json.load(f)
    if case.get("format") != CASE_FORMAT or case.get("version") != VERSION:
        raise MissingBuild(f"{path} is not a version {VERSION} conformance case: rebuild it")
    return case


def write_array(folder: str, name: str, array: np.ndarray) -> dict:
    """Raw little-endian bytes in C order (bool one byte, int64 eight), described in case.json."""
    array = np.asarray(array)  # not ascontiguousarray, which makes a 0-d array 1-d
    with open(os.path.join(folder, name), "wb") as f:
        f.write(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes(order="C"))
    return {"dtype": str(array.dtype), "shape": list(array.shape), "data": name}


def read_array(folder: str, entry: dict) -> np.ndarray:
    with open(os.path.join(folder, entry["data"]), "rb") as f:
        raw = f.read()
    return np.frombuffer(raw, np.dtype(entry["dtype"]).newbyteorder("<")).reshape(entry["shape"]).astype(entry["dtype"])


def read_args(folder: str, call: dict) -> list:
    """A call's arguments: numpy arrays for tensors, ints for prim values, tuples of them."""
    return [_read_arg(folder, a) for a in call["args"]]


def _read_arg(folder: str, entry: dict):
    if "value" in entry:
        return int(entry["value"])
    if "tuple" in entry:
        return tuple(_read_arg(folder, e) for e in entry["tuple"])
    return read_array(folder, entry)


def flatten(result) -> list:
    """A function's result as the list of its tensors, nested tuples in order."""
    if isinstance(result, (tuple, list)):
        return [leaf for item in result for leaf in flatten(item)]
    return [result]


@dataclass
class Comparison:
    passed: bool
    max_error: float  # the largest |got - expected| (0 for exact matches; inf for a wrong shape or dtype)
    message: str = ""


def compare(got, expected: np.ndarray, entry: dict) -> Comparison:
    """The one rule, as runner.mjs states it too: same shape; integers and bools exactly equal;
    floats with |got - expected| <= atol + rtol * |expected| for every element."""
    got = np.asarray(got)
    if tuple(got.shape) != tuple(entry["shape"]):
        return Comparison(False, float("inf"), f"shape {list(got.shape)}, expected {entry['shape']}")
    if got.dtype.name != entry["dtype"]:
        return Comparison(False, float("inf"), f"dtype {got.dtype.name}, expected {entry['dtype']}")
    if got.size == 0:
        return Comparison(True, 0.0)
    diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    max_error = float(np.nanmax(diff)) if not np.isnan(diff).all() else float("nan")
    if entry.get("exact"):
        bad = got != expected
    else:
        bad = ~(diff <= entry["atol"] + entry["rtol"] * np.abs(expected.astype(np.float64)))
    if not bad.any():
        return Comparison(True, max_error)
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    rule = "exact" if entry.get("exact") else f"rtol {entry['rtol']}, atol {entry['atol']}"
    return Comparison(False, max_error, f"{int(bad.sum())} of {got.size} elements differ ({rule}); first at "
                                        f"{list(first)}: got {got[first]!r}, expected {expected[first]!r}")


@dataclass
class CaseReport:
    case: str
    target: str
    passed: bool = True
    max_error: float = 0.0
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        verdict = "pass" if self.passed else "FAIL"
        return f"{verdict} {self.target}/{self.case}: max error {self.max_error:.3g}" + \
            "".join(f"\n    {f}" for f in self.failures)


def check_case(folder: str, open_function) -> CaseReport:
    """Run every call of the case in order on one runtime instance and compare each output.

    ``open_function(folder)`` loads the executable of the folder and returns ``call(function,
    args) -> result`` (a tensor or nested tuples of them); state persists between its calls."""
    case = read_case(folder)
    report = CaseReport(case["case"], case["target"])
    call_function = open_function(folder)
    for index, call in enumerate(case["calls"]):
        if "error" in call:  # the call must fail, with a message naming what the case lists
            try:
                call_function(call["function"], read_args(folder, call))
            except Exception as error:
                missing = [f for f in call["error"] if f not in str(error)]
                if missing:
                    report.passed = False
                    report.failures.append(f"call {index} ({call['function']}): the error lacks {missing}: {error}")
                continue
            report.passed = False
            report.failures.append(f"call {index} ({call['function']}): expected an error, got none")
            continue
        try:
            outputs = flatten(call_function(call["function"], read_args(folder, call)))
        except Exception as error:  # a runtime error fails this case; the report says where
            report.passed = False
            report.failures.append(f"call {index} ({call['function']}): {type(error).__name__}: {error}")
            return report
        if len(outputs) != len(call["outputs"]):
            report.passed = False
            report.failures.append(f"call {index} ({call['function']}): {len(outputs)} outputs, expected "
                                   f"{len(call['outputs'])}")
            continue
        for position, (got, entry) in enumerate(zip(outputs, call["outputs"])):
            result = compare(got, read_array(folder, entry), entry)
            report.max_error = max(report.max_error, result.max_error)
            if not result.passed:
                report.passed = False
                report.failures.append(f"call {index} ({call['function']}) output {position}: {result.message}")
    return report
