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


# The AArch64 cross builds tests run under qemu-user: Linux with glibc (Debian's cross gcc, run with its
# arm64 libraries) and with musl (zig cc; Debian's musl:arm64 is the loader, which also answers to
# Android's libc.so and libm.so, so it runs the kernels of the cpu-android-* presets).
CROSS_BUILDS = {
    "glibc": ("aarch64-linux-gnu", ("qemu-aarch64", "-L", "/usr/aarch64-linux-gnu")),
    "musl": ("aarch64-linux-musl", ("qemu-aarch64",)),
}


def ensure_cross_build(flavor: str, *targets: str) -> tuple[str, tuple[str, ...]]:
    """build/native/aarch64-<flavor>-tools with ``targets`` (tessera-run, tessera-conformance) up to
    date, and the command prefix that runs its programs. Not `make test-native-builds`' own AArch64
    folders: those build beside the test suite in `make test`, maybe at this moment."""
    import fcntl

    toolchain, qemu = CROSS_BUILDS[flavor]
    build = os.path.join(REPO, "build", "native", f"aarch64-{flavor}-tools")
    os.makedirs(build, exist_ok=True)
    with open(os.path.join(build, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            configure = subprocess.run(["cmake", "-S", SOURCE, "-B", build, "-DTESSERA_TESTS=OFF",
                                        f"-DCMAKE_TOOLCHAIN_FILE={SOURCE}/cmake/{toolchain}.cmake"],
                                       capture_output=True, text=True)
            if configure.returncode != 0:
                raise RuntimeError(f"configuring the {toolchain} build failed (make setup installs its cross tools "
                                   f"and packages):\n{configure.stdout[-2000:]}\n{configure.stderr[-3000:]}")
        result = subprocess.run(["cmake", "--build", build, "-j2", "--target", *targets], capture_output=True,
                                text=True)
        if result.returncode != 0:
            raise RuntimeError(f"building {', '.join(targets)} ({toolchain}) failed:\n{result.stdout[-3000:]}\n"
                               f"{result.stderr[-2000:]}")
    return build, qemu
