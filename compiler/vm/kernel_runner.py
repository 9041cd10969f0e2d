"""Run one kernel (a PrimFunc) on a device, for tests, benchmarks and the reference interpreter.

The kernel is compiled by the backend its target names (the codegen registry; compiled modules
are cached per kernel), loaded on the device, bound to numpy arrays uploaded as
buffers in its ABI order (inputs, then outputs), launched over its grid and read back. The
WebGPU runner (``default_runner()``) runs WGSL through wgpu-py (Mesa's llvmpipe on a CPU-only
machine); ``tessera.vm.wasm_runner`` runs C kernels as WebAssembly through wasmtime,
``tessera.vm.vulkan_runner`` SPIR-V kernels on the Vulkan device (lavapipe on a CPU-only machine).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import arith, codegen
from ..target import Target
from ..tir.ir import PrimFunc
from .devices import Device, View
from .devices.webgpu import WebGPUDevice, WebGPUUnavailable
from .storage import device_bytes, from_device, to_device

__all__ = ["BoundKernel", "KernelRunner", "WebGPUUnavailable", "default_runner"]


class KernelRunner:
    def __init__(self, device: Device | Callable[[], Device], target: Target):
        """``device``: a device, or a factory called for each kernel (a WASM device holds one module)."""
        self._device, self.target = device, target
        self.backend = codegen.backend_for(target)
        self._compiled: dict[str, tuple] = {}

    @property
    def device(self) -> Device:
        return self._device if isinstance(self._device, Device) else self._device()

    @property
    def features(self) -> frozenset[str]:
        return self.target.features

    @property
    def adapter_name(self) -> str:
        return self.device.name

    def has(self, feature: str) -> bool:
        return feature in self.target.features

    def compile(self, func: PrimFunc) -> tuple[dict, dict[str, bytes]]:
        """The kernel record and module files of ``func``; cached by its full repr (every field)."""
        key = repr(func)
        if key not in self._compiled:
            compiled = self.backend.compile([func], self.target)
            self._compiled[key] = (compiled.kernels[0].record(func), compiled.modules)
        return self._compiled[key]

    def run(self, func: PrimFunc, inputs: list[np.ndarray], scalars: dict[str, int]) -> list[np.ndarray]:
        bound = self.bind(func, inputs, scalars)
        bound.dispatch()
        return bound.read_outputs()

    def bind(self, func: PrimFunc, inputs: list[np.ndarray], scalars: dict[str, int]) -> BoundKernel:
        """Upload ``inputs`` and allocate outputs once; dispatch as often as needed (benchmarks)."""
        record, modules = self.compile(func)
        device = self.device
        (kernel,) = device.load_kernels([record], modules)
        views = []
        for array, buf in zip(inputs, func.inputs):
            data = to_device(np.asarray(array), buf.storage_dtype)
            views.append(View(device.allocate_with(data), 0, len(data)))
        out_shapes = [tuple(arith.evaluate(d, scalars) for d in buf.shape) for buf in func.outputs]
        inplace = func.attrs.get("inplace", {})
        for index, (shape, buf) in enumerate(zip(out_shapes, func.outputs)):
            if index in inplace:  # an output that updates an input starts as that input
                data = to_device(np.asarray(inputs[inplace[index]]), buf.storage_dtype)
                views.append(View(device.allocate_with(data), 0, len(data)))
            else:
                size = device_bytes(int(np.prod(shape, dtype=np.int64)), buf.storage_dtype)
                views.append(View(device.allocate_with(bytes(size)), 0, size))
        values = [int(scalars[name]) for name in func.scalars]
        grid = [arith.evaluate(g, scalars) for g in func.grid]
        outputs = list(zip(out_shapes, func.outputs, views[len(inputs):]))
        return BoundKernel(device, device.bind(kernel, views), values, grid, outputs)


class BoundKernel:
    """A kernel with its buffers on the device."""

    def __init__(self, device: Device, bound, scalars: list[int], grid: list[int], outputs):
        self.device, self.bound, self.scalars, self.grid, self.outputs = device, bound, scalars, grid, outputs

    def dispatch(self, times: int = 1) -> None:
        for _ in range(times):
            self.device.launch(self.bound, self.scalars, self.grid)
        self.device.flush()

    def wait(self) -> None:
        self.device.synchronize()

    def read_outputs(self) -> list[np.ndarray]:
        return [from_device(self.device.read_back(view), shape, buf.storage_dtype)
                for shape, buf, view in self.outputs]


_RUNNER: KernelRunner | None = None


def default_runner() -> KernelRunner:
    """The WebGPU runner: one device per process (creating adapters is slow), kernels compiled for
    a target with the features and limits of that device."""
    global _RUNNER
    if _RUNNER is None:
        device = WebGPUDevice.shared()
        _RUNNER = KernelRunner(device, device.target())
    return _RUNNER
