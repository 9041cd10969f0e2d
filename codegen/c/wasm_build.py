"""The WebAssembly build of a C file of kernels (``emit_c_module``), with Debian's clang for wasm32."""

from __future__ import annotations

import os
import subprocess
import tempfile


class WasmBuildError(RuntimeError):
    """clang could not build the kernels (or is missing)."""


def compile_wasm(source: str) -> bytes:
    """The WebAssembly module for a C file from ``emit_c_module``: imports ``env.memory``, exports
    the kernels and ``__heap_base`` (where the runtime may start placing tensors)."""
    with tempfile.TemporaryDirectory() as folder:
        c_path, wasm_path = os.path.join(folder, "kernels.c"), os.path.join(folder, "kernels.wasm")
        with open(c_path, "w") as f:
            f.write(source)
        command = ["clang", "--target=wasm32-wasi", "--sysroot=/usr", "-isystem", "/usr/include/wasm32-wasi",
                   "-O2", "-msimd128", "-fno-math-errno", "-nostartfiles", "-Wl,--no-entry", "-Wl,--import-memory",
                   "-Wl,--export=__heap_base", "-Wl,--stack-first", "-L/usr/lib/wasm32-wasi", "-o", wasm_path,
                   c_path, "-lm"]
        try:
            result = subprocess.run(command, capture_output=True, text=True)
        except FileNotFoundError:
            raise WasmBuildError("clang is not installed (Debian: clang lld wasi-libc libclang-rt-14-dev-wasm32; "
                                 "make setup installs them)") from None
        if result.returncode != 0:
            raise WasmBuildError(f"clang failed to build the WASM kernels:\n{result.stderr[-4000:]}")
        with open(wasm_path, "rb") as f:
            return f.read()
