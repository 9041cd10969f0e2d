"""The WebAssembly builds of a C file of kernels (``emit_c_module``), with Debian's clang for wasm32.

Two builds of one file: ``compile_wasm`` the single-threaded module every runtime's WASM device runs,
``compile_wasm_threads`` the same kernels over a shared memory for a pool of threads (runtime-js's
Web Workers, docs/web.md).
"""

from __future__ import annotations

import os
import subprocess
import tempfile

COMMON_FLAGS = ("--target=wasm32-wasi", "--sysroot=/usr", "-isystem", "/usr/include/wasm32-wasi", "-O2", "-msimd128",
                "-fno-math-errno", "-nostartfiles", "-Wl,--no-entry", "-Wl,--import-memory", "-Wl,--export=__heap_base",
                "-Wl,--stack-first", "-L/usr/lib/wasm32-wasi")
# Each thread's stack holds its workgroup memory (up to maxComputeWorkgroupStorageSize, 64 KiB) besides
# the kernel's locals: 1 MiB leaves room. A worker's stack is as large (runtime-js allocates it).
THREAD_STACK_BYTES = 1 << 20
# The shared memory's maximum, which a shared memory must declare (wasm32's whole 4 GiB: a runtime's
# memory may not exceed what the module declares, and cannot grow past it).
THREADS_MAX_MEMORY = 1 << 32
# Shared memory needs atomics and bulk memory (wasm-ld initializes the data once, with memory.init, for
# the first instance only); the stack pointer is exported (a mutable global) so that each worker's
# instance is given a stack of its own: every instance's __stack_pointer starts at the same value.
THREADS_FLAGS = ("-matomics", "-mbulk-memory", "-mmutable-globals", "-Wl,--shared-memory",
                 f"-Wl,--max-memory={THREADS_MAX_MEMORY}", "-Wl,--export=__stack_pointer",
                 f"-Wl,-z,stack-size={THREAD_STACK_BYTES}")


class WasmBuildError(RuntimeError):
    """clang could not build the kernels (or is missing)."""


def compile_wasm(source: str) -> bytes:
    """The WebAssembly module for a C file from ``emit_c_module``: imports ``env.memory``, exports
    the kernels and ``__heap_base`` (where the runtime may start placing tensors)."""
    return _clang(source, ())


def compile_wasm_threads(source: str) -> bytes:
    """The threaded module for a C file of re-entrant range kernels: imports a shared ``env.memory``
    (maximum 4 GiB), exports the kernels, ``__heap_base`` and ``__stack_pointer``."""
    return _clang(source, THREADS_FLAGS)


def _clang(source: str, flags: tuple[str, ...]) -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        c_path, wasm_path = os.path.join(folder, "kernels.c"), os.path.join(folder, "kernels.wasm")
        with open(c_path, "w") as f:
            f.write(source)
        command = ["clang", *COMMON_FLAGS, *flags, "-o", wasm_path, c_path, "-lm"]
        try:
            result = subprocess.run(command, capture_output=True, text=True)
        except FileNotFoundError:
            raise WasmBuildError("clang is not installed (Debian: clang lld wasi-libc libclang-rt-14-dev-wasm32; "
                                 "make setup installs them)") from None
        if result.returncode != 0:
            raise WasmBuildError(f"clang failed to build the WASM kernels:\n{result.stderr[-4000:]}")
        with open(wasm_path, "rb") as f:
            return f.read()
