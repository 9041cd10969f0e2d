"""OpenCL C kernels under oclgrind, a simulator that checks every memory access and barrier: the
layout kernels (index math) and the reduction kernels (workgroup memory, barriers) at small sizes
read and write only inside their buffers and race on nothing."""

import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "oclgrind_kernels.py")
# What oclgrind writes to stderr when a kernel misbehaves.
FINDINGS = ("Invalid read", "Invalid write", "out-of-bounds", "out of bounds", "data race", "OCLGRIND FATAL")


def under_oclgrind(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TESSERA_OPENCL_DEVICE="oclgrind")
    return subprocess.run(["oclgrind", "--data-races", "--max-errors", "20", sys.executable, SCRIPT, *args],
                          capture_output=True, text=True, env=env, timeout=300)


def findings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if any(f in line for f in FINDINGS)]


def test_the_check_catches_a_write_past_the_end():
    result = under_oclgrind("out-of-bounds")
    assert "Oclgrind" in result.stdout, result.stdout + result.stderr
    assert any("Invalid write" in line for line in findings(result.stderr)), result.stderr


def test_layout_and_reduction_kernels_stay_inside_their_buffers():
    result = under_oclgrind()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ran gemv for pocl" in result.stdout
    assert findings(result.stderr) == [], result.stderr
