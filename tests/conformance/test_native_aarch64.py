"""The conformance adapter of runtime-native's AArch64 builds, the path a phone's CPU takes, under
qemu-user: the cases' kernels cross-compiled for ARMv8.2-A (the C kernels and their NEON
micro-kernels as gcc builds them for a phone), loaded and run by a cross-built runtime
(tools/tessera-conformance.c, one thread), and judged by the one rule of caseio.py against the
expected outputs every runtime meets. Two flavors:

- ``glibc``: generate.py's ``cpu-aarch64`` folders (kernels for AArch64 Linux) on the build of
  cmake/aarch64-linux-gnu.cmake (Debian's cross gcc), run with Debian's arm64 libraries (-L);
- ``musl``: the ``cpu-android-aarch64`` folders (kernels linked as for Android's arm64-v8a: no C
  library, bionic's unversioned libc.so and libm.so named) on the musl build of
  cmake/aarch64-linux-musl.cmake (zig cc), whose loader takes those names as its own: no glibc
  anywhere, as on a phone.

The runtimes are built by tests/native/build.py (build/native/aarch64-<flavor>-tools), not taken
from `make test-native-builds`' AArch64 builds, which run beside this suite in `make test` and may be
building at the same moment."""

import json
import os
import subprocess

import pytest
from native.build import ensure_cross_build

from conformance.caseio import check_case, read_array
from conformance.cases import CASES
from conformance.conftest import REPORTS
from conformance.generate import AARCH64_HOST, DEFAULT_ROOT, generate

ELF_MACHINE_AARCH64 = 183
# Flavor -> generate.py's folder of kernels it runs.
FLAVORS = {"glibc": "cpu-aarch64", "musl": "cpu-android-aarch64"}

pytestmark = pytest.mark.skipif(AARCH64_HOST, reason="this machine is AArch64: test_native.py runs its cpu "
                                                      "folders, built for armv8.2-a, natively")


@pytest.fixture(scope="module", params=sorted(FLAVORS))
def flavor(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def driver(flavor) -> list:
    """tessera-conformance for AArch64 (built once, then only what changed) and how qemu runs it."""
    build, qemu = ensure_cross_build(flavor, "tessera-conformance")
    return [*qemu, os.path.join(build, "tessera-conformance")]


@pytest.fixture(scope="module")
def folders(flavor):
    """The flavor's folder of every case, up to date (generate.py rebuilds what changed)."""
    generate(DEFAULT_ROOT, targets=[FLAVORS[flavor]])
    return os.path.join(DEFAULT_ROOT, FLAVORS[flavor])


def elf_machine(path: str) -> int:
    with open(path, "rb") as f:
        header = f.read(20)
    assert header[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return int.from_bytes(header[18:20], "little")


def replay(results: list):
    """``open_function`` for check_case over what the driver wrote: each call's outputs in turn, or
    its error raised, so the judging is caseio's, as for every other adapter."""
    calls = iter(results)

    def open_function(folder):
        def call(function, args):
            result = next(calls)
            if "error" in result:
                raise RuntimeError(result["error"])
            return [read_array(result["folder"], entry) for entry in result["outputs"]]
        return call

    return open_function


@pytest.mark.parametrize("case", sorted(CASES))
def test_case(flavor, driver, folders, case, tmp_path):
    folder = os.path.join(folders, case)
    # What runs is the phone's machine code, not this machine's.
    assert elf_machine(os.path.join(folder, "kernels.so")) == ELF_MACHINE_AARCH64
    assert elf_machine(driver[-1]) == ELF_MACHINE_AARCH64
    run = subprocess.run([*driver, folder, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    with open(tmp_path / "results.json", encoding="utf-8") as f:
        results = [dict(r, folder=str(tmp_path)) for r in json.load(f)["calls"]]
    report = check_case(folder, replay(results))
    report.target = f"{FLAVORS[flavor]} (native {flavor}, qemu-user)"
    REPORTS.append(report)
    assert report.passed, report.line()
