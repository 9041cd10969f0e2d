"""Run one kernel as WebAssembly through wasmtime: the WASM target's counterpart of the WebGPU
kernel runner (same ``run(func, inputs, scalars)``), so tests check C kernels against numpy.

Each kernel is its own module (built by the c-wasm backend with clang, cached by the
kernel) on a fresh WASM device sharing one engine and its compiled modules.
"""

from __future__ import annotations

from ..target import Target
from .devices.wasm import WasmDevice
from .kernel_runner import KernelRunner


class WasmKernelRunner(KernelRunner):
    def __init__(self):
        import wasmtime

        engine, modules = wasmtime.Engine(), {}
        super().__init__(lambda: WasmDevice(engine, modules), Target.preset("wasm"))
