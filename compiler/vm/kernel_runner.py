"""Run one kernel on a real WebGPU device through wgpu-py (Mesa's llvmpipe on a CPU-only machine).

The runner compiles the kernel's WGSL, binds numpy arrays as storage buffers
in the binding layout of ``codegen/wgsl`` (inputs, outputs, then the scalar
uniform), dispatches the kernel's grid and reads the outputs back. Pipelines
are cached by source text. Tests and the reference interpreter use it to check
kernels against numpy.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from .. import arith
from ..tir.ir import PrimFunc
from ..tir.lower import element_bytes, host_dtype, lower_kernel


class WebGPUUnavailable(RuntimeError):
    """No WebGPU adapter could be found (no Vulkan driver, or wgpu-py missing)."""


def _quiet_vulkan() -> None:
    # Vulkan loaders warn when XDG_RUNTIME_DIR is unset; a private folder silences it.
    if "XDG_RUNTIME_DIR" not in os.environ:
        path = os.path.join(tempfile.gettempdir(), f"tessera-xdg-{os.getuid()}")
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = path


class KernelRunner:
    def __init__(self, features=("shader-f16", "subgroup", "timestamp-query")):
        _quiet_vulkan()
        try:
            import wgpu
        except ImportError as error:  # pragma: no cover - wgpu is a dependency
            raise WebGPUUnavailable(f"wgpu-py is not installed: {error}") from None
        self.wgpu = wgpu
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        if adapter is None:
            raise WebGPUUnavailable("no WebGPU adapter (install mesa-vulkan-drivers for llvmpipe)")
        self.adapter = adapter
        self.features = {f for f in features if f in adapter.features}
        limits = {key: adapter.limits[key] for key in (
            "max-compute-invocations-per-workgroup", "max-compute-workgroup-storage-size",
            "max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size",
            "max-buffer-size", "max-compute-workgroup-size-x")}
        self.device = adapter.request_device_sync(required_features=sorted(self.features),
                                                  required_limits=limits)
        self._pipelines: dict[str, tuple] = {}

    @property
    def adapter_name(self) -> str:
        return self.adapter.info.get("device", "unknown adapter")

    def has(self, feature: str) -> bool:
        return feature in self.features

    def pipeline(self, func: PrimFunc):
        from tessera.codegen.wgsl import LOWERING, emit_wgsl

        kernel = emit_wgsl(lower_kernel(func, LOWERING))
        layout, pipeline = self.compile(kernel.source, kernel.entry_point, kernel.bindings, len(func.inputs))
        return kernel, layout, pipeline

    def pipeline_for_record(self, record: dict):
        """The pipeline of a kernel from an executable's kernel table."""
        layout, pipeline = self.compile(record["wgsl"], record["entry_point"], record["bindings"],
                                        len(record["inputs"]))
        return record, layout, pipeline

    def compile(self, source: str, entry_point: str, bindings, num_inputs: int):
        """(bind group layout, compute pipeline) for WGSL in the codegen's binding layout; cached."""
        cached = self._pipelines.get(source)
        if cached is None:
            wgpu = self.wgpu
            module = self.device.create_shader_module(code=source)
            entries = []
            for index, name in enumerate(bindings):
                if name == "params":
                    kind = wgpu.BufferBindingType.uniform
                else:  # see codegen/wgsl: every storage binding is read_write
                    kind = wgpu.BufferBindingType.storage
                entries.append({"binding": index, "visibility": wgpu.ShaderStage.COMPUTE,
                                "buffer": {"type": kind}})
            layout = self.device.create_bind_group_layout(entries=entries)
            pipeline = self.device.create_compute_pipeline(
                layout=self.device.create_pipeline_layout(bind_group_layouts=[layout]),
                compute={"module": module, "entry_point": entry_point})
            cached = (layout, pipeline)
            self._pipelines[source] = cached
        return cached

    def run(self, func: PrimFunc, inputs: list[np.ndarray], scalars: dict[str, int]) -> list[np.ndarray]:
        bound = self.bind(func, inputs, scalars)
        bound.dispatch()
        return bound.read_outputs()

    def bind(self, func: PrimFunc, inputs: list[np.ndarray], scalars: dict[str, int]) -> BoundKernel:
        """Upload ``inputs`` and allocate outputs once; dispatch as often as needed (benchmarks)."""
        wgpu = self.wgpu
        kernel, layout, pipeline = self.pipeline(func)
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        buffers = [self.device.create_buffer_with_data(data=_to_device(array, buf.storage_dtype), usage=usage)
                   for array, buf in zip(inputs, func.inputs)]
        out_shapes = [tuple(arith.evaluate(d, scalars) for d in buf.shape) for buf in func.outputs]
        inplace = func.attrs.get("inplace", {})
        for index, (shape, buf) in enumerate(zip(out_shapes, func.outputs)):
            if index in inplace:  # an output that updates an input starts as that input
                data = _to_device(inputs[inplace[index]], buf.storage_dtype)
                buffers.append(self.device.create_buffer_with_data(data=data, usage=usage))
                continue
            size = _device_bytes(int(np.prod(shape, dtype=np.int64)), buf.storage_dtype)
            buffers.append(self.device.create_buffer(size=size, usage=usage))
        if func.scalars:
            values = np.zeros(max(4, -(-len(func.scalars) // 4) * 4), np.int32)
            values[: len(func.scalars)] = [scalars[name] for name in func.scalars]
            buffers.append(self.device.create_buffer_with_data(
                data=values.tobytes(), usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST))
        bind_group = self.device.create_bind_group(layout=layout, entries=[
            {"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}} for i, b in enumerate(buffers)])
        grid = [arith.evaluate(g, scalars) for g in func.grid]
        outputs = list(zip(out_shapes, func.outputs, buffers[len(inputs):]))
        return BoundKernel(self.device, pipeline, bind_group, grid, outputs)


class BoundKernel:
    """A kernel with its buffers on the device."""

    def __init__(self, device, pipeline, bind_group, grid, outputs):
        self.device, self.pipeline, self.bind_group, self.grid, self.outputs = (
            device, pipeline, bind_group, grid, outputs)
        self._sync = None

    def dispatch(self, times: int = 1) -> None:
        if min(self.grid) <= 0:
            return
        encoder = self.device.create_command_encoder()
        for _ in range(times):
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(self.pipeline)
            compute.set_bind_group(0, self.bind_group)
            compute.dispatch_workgroups(*self.grid)
            compute.end()
        self.device.queue.submit([encoder.finish()])

    def wait(self) -> None:
        """Block until submitted work is done: read back one word written after it."""
        if self._sync is None:
            import wgpu

            self._sync = self.device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC)
        encoder = self.device.create_command_encoder()
        encoder.copy_buffer_to_buffer(self.outputs[0][2], 0, self._sync, 0, 4)
        self.device.queue.submit([encoder.finish()])
        self.device.queue.read_buffer(self._sync)

    def read_outputs(self) -> list[np.ndarray]:
        return [_from_device(self.device.queue.read_buffer(device_buffer), shape, buf.storage_dtype)
                for shape, buf, device_buffer in self.outputs]


def _device_bytes(count: int, dtype: str) -> int:
    return max(4, -(-count * element_bytes(dtype) // 4) * 4)  # WebGPU buffers are whole 4-byte words


def _to_device(array: np.ndarray, dtype: str) -> bytes:
    array = np.ascontiguousarray(array)
    data = array.astype(host_dtype(dtype), copy=False).tobytes()
    padding = _device_bytes(array.size, dtype) - len(data)
    return data + b"\0" * padding


def _from_device(raw, shape, dtype: str) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(raw, host_dtype(dtype), count).reshape(shape).astype(dtype)


_RUNNER: KernelRunner | None = None


def default_runner() -> KernelRunner:
    """One device per process: creating adapters is slow."""
    global _RUNNER
    if _RUNNER is None:
        _RUNNER = KernelRunner()
    return _RUNNER
