"""The conformance adapter of the native runtime (runtime-native's libtessera, through
tessera.native's ctypes binding over its C API): every case of every target whose kernels its
devices run, from the folders generate.py wrote, each on the device of its backends: the cpu folder
on the CPU device (two threads), vulkan on the Vulkan device (lavapipe here), opencl on the OpenCL
device (PoCL here); a split target (generate.SPLIT_TARGETS: a GPU backend's kernels beside c-native's,
format version 4) on its GPU device beside the CPU device.

The Vulkan cases run under the Khronos validation layer (tests/conftest.py sets
TESSERA_VULKAN_VALIDATION=1 for the whole run): any message it gives fails the next device operation
with TESSERA_ERROR_DEVICE naming it, so fails the case. Compiled pipelines and programs go to a cache
folder of this session, not into the shared conformance folders."""

import os

import pytest
from native.build import ensure_native_build
from tessera.native import NativeModel
from tessera.target import Target

from conformance.caseio import check_case
from conformance.cases import CASES, SPLIT_CASES
from conformance.conftest import NOT_RUN, REPORTS
from conformance.generate import DEFAULT_ROOT, SPLIT_TARGETS, TARGETS
from conformance.programs import TEST_LIBRARIES

# The device of runtime-native that runs each kernel backend (runtime-native/src/devices.c's table).
DEVICE_OF_BACKEND = {"c-native": "cpu", "spirv": "vulkan", "opencl": "opencl"}


def target_backends(target: str) -> set[str]:
    """The kernel backends of a target's folders: its preset's, or each device's of a split target."""
    if target in SPLIT_TARGETS:
        return {Target.preset(p).backend for p in SPLIT_TARGETS[target]}
    return {Target.preset(TARGETS[target]).backend}


def native_device(target: str) -> str | None:
    """The device a target's folders run on: the GPU device of its backends (a split build's CPU
    kernels run beside it), else the CPU; None when some backend has no device here."""
    backends = target_backends(target)
    if not backends <= DEVICE_OF_BACKEND.keys():
        return None
    devices = {DEVICE_OF_BACKEND[b] for b in backends} - {"cpu"}
    return devices.pop() if len(devices) == 1 else "cpu" if not devices else None


ALL_TARGETS = [*TARGETS, *SPLIT_TARGETS]
RUNNABLE = sorted(t for t in ALL_TARGETS if native_device(t))
NOT_RUN.update({f"{t} (native)": f"runtime-native has no device for {', '.join(sorted(target_backends(t)))} kernels "
                                 "(the Python VM and runtime-js run them)" for t in ALL_TARGETS if t not in RUNNABLE})
PAIRS = [(t, case) for t in RUNNABLE for case in sorted(SPLIT_CASES if t in SPLIT_TARGETS else CASES)]


@pytest.fixture(scope="module")
def native_build():
    return ensure_native_build()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("native-pipeline-cache"))


def opener(device: str, cache_dir: str):
    def open_function(folder):
        model = NativeModel(folder, n_threads=2, device=device, libraries=TEST_LIBRARIES, cache_dir=cache_dir)

        def call(function, args):
            outputs = model.call(function, *args)
            return outputs[0] if len(outputs) == 1 else tuple(outputs)

        return call

    return open_function


@pytest.mark.parametrize("target,case", PAIRS, ids=[f"{t}-{c}" for t, c in PAIRS])
def test_case(conformance_index, native_build, cache_dir, target, case):
    report = check_case(os.path.join(DEFAULT_ROOT, target, case), opener(native_device(target), cache_dir))
    report.target = f"{report.target} (native)"
    REPORTS.append(report)
    assert report.passed, report.line()
