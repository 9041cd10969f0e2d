"""The native runtime's release build (build/native/release), made here when a test needs it and
`make native` has not run: CMake configures once, then builds only what changed."""

from __future__ import annotations

import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(REPO, "runtime-native")
BUILD = os.path.join(REPO, "build", "native", "release")


def ensure_native_build() -> str:
    """The build folder, with libtessera.so and tessera-run up to date. One process at a time: two
    pytest workers building into one folder would race."""
    import fcntl

    os.makedirs(BUILD, exist_ok=True)
    with open(os.path.join(os.path.dirname(BUILD), ".release.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build()


def _build() -> str:
    if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
        subprocess.run(["cmake", "-S", SOURCE, "-B", BUILD, "-DCMAKE_BUILD_TYPE=Release"], check=True,
                       capture_output=True)
    result = subprocess.run(["cmake", "--build", BUILD, "-j2"], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building runtime-native failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return BUILD
