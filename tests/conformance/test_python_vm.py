"""The conformance adapter of the Python VM: every case of every target it has a device for (WGSL
on wgpu-py's WebGPU, c-wasm on wasmtime, c-native's kernels.so on this CPU through ctypes ...),
each from the folder generate.py wrote, as any runtime loads it; and the split targets
(generate.SPLIT_TARGETS: a GPU backend's kernels beside the CPU's, format version 4) on the two
devices of their kinds."""

import os

import pytest
from tessera.target import Target
from tessera.vm import Executable, VirtualMachine, device_kinds

from conformance.caseio import check_case
from conformance.cases import CASES, SPLIT_CASES
from conformance.conftest import NOT_RUN, REPORTS
from conformance.generate import DEFAULT_ROOT, SPLIT_TARGETS, TARGETS
from conformance.programs import TEST_LIBRARIES

BACKENDS = {backend for backends in device_kinds().values() for backend in backends}
RUNNABLE = sorted(t for t in TARGETS if Target.preset(TARGETS[t]).backend in BACKENDS)
NOT_RUN.update({t: f"no Python VM device runs {Target.preset(TARGETS[t]).backend} kernels"
                for t in TARGETS if t not in RUNNABLE})
SPLIT_RUNNABLE = sorted(t for t, presets in SPLIT_TARGETS.items()
                        if all(Target.preset(p).backend in BACKENDS for p in presets))
PAIRS = [(t, c) for t in RUNNABLE for c in sorted(CASES)] + [(t, c) for t in SPLIT_RUNNABLE for c in sorted(SPLIT_CASES)]


def open_function(folder):
    exe = Executable.load(folder)
    libraries = {name: TEST_LIBRARIES[name] for name in exe.libraries if name in TEST_LIBRARIES}
    vm = VirtualMachine(exe, libraries=libraries)  # on the device whose backends cover the kernels
    return lambda function, args: vm[function](*args)


@pytest.mark.parametrize("target,case", PAIRS, ids=[f"{c}-{t}" for t, c in PAIRS])
def test_case(conformance_index, target, case):
    report = check_case(os.path.join(DEFAULT_ROOT, target, case), open_function)
    REPORTS.append(report)
    assert report.passed, report.line()
