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
                "-Wl,--stack-first", "-L/usr/lib/wasm32-wasi", "-mmutable-globals", "-Wl,--export=__stack_pointer")
# __stack_pointer is exported (a mutable global) so that a runtime can put it back after a trap, which skips
# the kernel's epilogue and would leave it lowered by the frame: trap after trap, every call would trap.
# Each thread's stack holds its workgroup memory (up to maxComputeWorkgroupStorageSize, 64 KiB) besides
# the kernel's locals: 1 MiB leaves room. A worker's stack is as large (runtime-js allocates it).
THREAD_STACK_BYTES = 1 << 20
# The shared memory's maximum, which a shared memory must declare (wasm32's whole 4 GiB: a runtime's
# memory may not exceed what the module declares, and cannot grow past it).
THREADS_MAX_MEMORY = 1 << 32
# Shared memory needs atomics and bulk memory (wasm-ld initializes the data once, with memory.init, for
# the first instance only); each worker's instance is given a stack of its own through the exported
# __stack_pointer: every instance's starts at the same value.
THREADS_FLAGS = ("-matomics", "-mbulk-memory", "-Wl,--shared-memory", f"-Wl,--max-memory={THREADS_MAX_MEMORY}",
                 f"-Wl,-z,stack-size={THREAD_STACK_BYTES}")


class WasmBuildError(RuntimeError):
    """clang could not build the kernels (or is missing)."""


def compile_wasm(source: str) -> bytes:
    """The WebAssembly module for a C file from ``emit_c_module``: imports ``env.memory``, exports
    the kernels, ``__heap_base`` (where the runtime may start placing tensors) and ``__stack_pointer``."""
    (module,) = _clang_all([("kernels.wasm", source, ())])
    return module


def compile_wasm_threads(source: str) -> bytes:
    """The threaded module for a C file of re-entrant range kernels: imports a shared ``env.memory``
    (maximum 4 GiB), exports the kernels, ``__heap_base`` and ``__stack_pointer``."""
    (module,) = _clang_all([("kernels-threads.wasm", source, THREADS_FLAGS)])
    return module


def compile_wasm_pair(source: str, threads_source: str) -> tuple[bytes, bytes]:
    """``compile_wasm(source)`` and ``compile_wasm_threads(threads_source)`` by two clang processes at
    once: one after the other doubled every WASM build's time (the kernel tests build hundreds)."""
    single, threaded = _clang_all([("kernels.wasm", source, ()),
                                   ("kernels-threads.wasm", threads_source, THREADS_FLAGS)])
    return single, threaded


def _clang_all(builds: list[tuple[str, str, tuple[str, ...]]]) -> list[bytes]:
    """Each (module name, C source, extra flags) built by its own clang, all started before any is
    awaited; the first failure (by the order given) names its module, and no clang outlives the call."""
    with tempfile.TemporaryDirectory() as folder:
        running = []
        try:
            for index, (name, source, flags) in enumerate(builds):
                c_path, wasm_path = os.path.join(folder, f"{index}.c"), os.path.join(folder, f"{index}.wasm")
                with open(c_path, "w") as f:
                    f.write(source)
                command = ["clang", *COMMON_FLAGS, *flags, "-o", wasm_path, c_path, "-lm"]
                # stderr to a file: a clang whose pipe nobody reads yet would stall on a long report.
                with open(os.path.join(folder, f"{index}.err"), "w") as err:
                    try:
                        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
                    except FileNotFoundError:
                        raise WasmBuildError("clang is not installed (Debian: clang lld wasi-libc "
                                             "libclang-rt-14-dev-wasm32; make setup installs them)") from None
                running.append((name, process, wasm_path, err.name))
            modules = []
            for name, process, wasm_path, err_path in running:
                if process.wait() != 0:
                    with open(err_path) as f:
                        raise WasmBuildError(f"clang failed to build the WASM kernels ({name}):\n{f.read()[-4000:]}")
                with open(wasm_path, "rb") as f:
                    modules.append(f.read())
            return modules
        finally:
            for _, process, _, _ in running:
                if process.poll() is None:
                    process.kill()
                    process.wait()
