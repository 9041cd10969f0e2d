"""The conformance adapter of the native runtime (runtime-native's libtessera, through
tessera.native's ctypes binding over its C API): every case of every target whose kernels its CPU
device runs (backend c-native), from the folders generate.py wrote, on two threads."""

import os

import pytest
from native.build import ensure_native_build
from tessera.native import NativeModel
from tessera.target import Target

from conformance.caseio import check_case
from conformance.cases import CASES
from conformance.conftest import NOT_RUN, REPORTS
from conformance.generate import DEFAULT_ROOT, TARGETS
from conformance.programs import TEST_LIBRARIES

NATIVE_BACKENDS = {"c-native"}
RUNNABLE = sorted(t for t in TARGETS if Target.preset(TARGETS[t]).backend in NATIVE_BACKENDS)
NOT_RUN.update({f"{t} (native)": f"runtime-native has no device for {Target.preset(TARGETS[t]).backend} kernels yet"
                for t in TARGETS if t not in RUNNABLE})


@pytest.fixture(scope="module")
def native_build():
    return ensure_native_build()


def open_function(folder):
    model = NativeModel(folder, n_threads=2, libraries=TEST_LIBRARIES)

    def call(function, args):
        outputs = model.call(function, *args)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    return call


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("target", RUNNABLE)
def test_case(conformance_index, native_build, target, case):
    report = check_case(os.path.join(DEFAULT_ROOT, target, case), open_function)
    report.target = f"{report.target} (native)"
    REPORTS.append(report)
    assert report.passed, report.line()
