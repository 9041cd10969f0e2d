"""The conformance adapter of runtime-native's AArch64 build, the path a phone's CPU takes, under
qemu-user: the cases' kernels cross-compiled for ARMv8.2-A (generate.py's ``cpu-aarch64`` folders:
the C kernels and their NEON micro-kernels as gcc builds them for a phone), loaded and run by the
cross-built runtime (tools/tessera-conformance.c, one thread), and judged by the one rule of
caseio.py against the expected outputs every runtime meets.

The runtime is built here (build/native/aarch64-conformance, the library and the one tool: about
10 s of CPU) rather than reusing `make test-native-builds`' AArch64 build, which runs beside this
suite in `make test` and may be building at the same moment."""

import fcntl
import json
import os
import subprocess

import pytest

from conformance.caseio import check_case, read_array
from conformance.cases import CASES
from conformance.conftest import REPORTS
from conformance.generate import AARCH64_HOST, DEFAULT_ROOT, REPO, generate

TARGET = "cpu-aarch64"
BUILD = os.path.join(REPO, "build", "native", "aarch64-conformance")
TOOLCHAIN = os.path.join(REPO, "runtime-native", "cmake", "aarch64-linux-gnu.cmake")
QEMU = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]
ELF_MACHINE_AARCH64 = 183

pytestmark = pytest.mark.skipif(AARCH64_HOST, reason="this machine is AArch64: test_native.py runs its cpu "
                                                      "folders, built for armv8.2-a, natively")


@pytest.fixture(scope="module")
def driver() -> str:
    """tessera-conformance for AArch64, built once (then only what changed), one process at a time."""
    os.makedirs(BUILD, exist_ok=True)
    with open(os.path.join(BUILD, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
            configure = subprocess.run(["cmake", "-S", os.path.join(REPO, "runtime-native"), "-B", BUILD,
                                        f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}", "-DTESSERA_TESTS=OFF"],
                                       capture_output=True, text=True)
            assert configure.returncode == 0, f"configuring the AArch64 build failed (make setup installs " \
                                              f"gcc-aarch64-linux-gnu and the arm64 -dev packages):\n{configure.stderr}"
        build = subprocess.run(["cmake", "--build", BUILD, "-j2", "--target", "tessera-conformance"],
                               capture_output=True, text=True)
        assert build.returncode == 0, f"building tessera-conformance for AArch64 failed:\n{build.stdout[-3000:]}"
    return os.path.join(BUILD, "tessera-conformance")


@pytest.fixture(scope="module")
def folders():
    """The cpu-aarch64 folder of every case, up to date (generate.py rebuilds what changed)."""
    generate(DEFAULT_ROOT, targets=[TARGET])
    return os.path.join(DEFAULT_ROOT, TARGET)


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
def test_case(driver, folders, case, tmp_path):
    folder = os.path.join(folders, case)
    # What runs is the phone's machine code, not this machine's.
    assert elf_machine(os.path.join(folder, "kernels.so")) == ELF_MACHINE_AARCH64
    assert elf_machine(driver) == ELF_MACHINE_AARCH64
    run = subprocess.run([*QEMU, driver, folder, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    with open(tmp_path / "results.json", encoding="utf-8") as f:
        results = [dict(r, folder=str(tmp_path)) for r in json.load(f)["calls"]]
    report = check_case(folder, replay(results))
    report.target = f"{TARGET} (native, qemu-user)"
    REPORTS.append(report)
    assert report.passed, report.line()
