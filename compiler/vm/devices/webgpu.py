"""WebGPU through wgpu-py (Mesa's llvmpipe on a machine without a GPU; any Vulkan, Metal or D3D12
GPU elsewhere). One wgpu device per process: creating adapters is slow.

Launches are recorded into one command encoder and compute pass; ``read_back`` and
``synchronize`` submit them. A bound kernel owns a uniform buffer for its scalars, written when it
is launched, so a function's launches each keep their own values within one submission.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from ...target import LIMIT_DEFAULTS, MESA_LOOP_BUDGET, SHADER_F16, SUBGROUP_FEATURES, TIMESTAMP_QUERY, limit_key
from . import Device, DeviceError, View


class WebGPUUnavailable(DeviceError):
    """No WebGPU adapter could be found (no Vulkan driver, or wgpu-py missing)."""


def _quiet_vulkan() -> None:
    # Vulkan loaders warn when XDG_RUNTIME_DIR is unset; a private folder silences it.
    if "XDG_RUNTIME_DIR" not in os.environ:
        path = os.path.join(tempfile.gettempdir(), f"tessera-xdg-{os.getuid()}")
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = path


WANTED_FEATURES = (SHADER_F16, *SUBGROUP_FEATURES, TIMESTAMP_QUERY)


def webgpu_adapter_infos() -> list[dict]:
    """The info of each WebGPU adapter wgpu-py finds on this machine (vendor, architecture, device,
    description, adapter_type ...): none when wgpu or a driver is missing, as the VM would find."""
    _quiet_vulkan()
    try:
        import wgpu

        return [dict(adapter.info) for adapter in wgpu.gpu.enumerate_adapters_sync()]
    except Exception:  # noqa: BLE001 - no wgpu, no driver: no adapter
        return []


class WebGPUDevice(Device):
    kind = "webgpu"
    backends = ("wgsl",)
    _shared: WebGPUDevice | None = None

    @classmethod
    def shared(cls) -> WebGPUDevice:
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def __init__(self):
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
        self.features = frozenset(f for f in WANTED_FEATURES if f in adapter.features)
        limits = {limit_key(name): adapter.limits[limit_key(name)] for name in LIMIT_DEFAULTS
                  if limit_key(name) in adapter.limits}
        self.gpu = adapter.request_device_sync(required_features=sorted(self.features), required_limits=limits)
        self.name = adapter.info.get("device", "unknown adapter")
        self.loop_budget = MESA_LOOP_BUDGET if "llvmpipe" in self.name.lower() else 0
        usage = wgpu.BufferUsage
        self.storage_usage = usage.STORAGE | usage.COPY_SRC | usage.COPY_DST
        self.buffers_created = 0
        self._pipelines: dict[tuple[str, str], tuple] = {}  # (source, entry point) -> (layout, pipeline)
        self._staging = None  # the readback buffer, grown to the largest read so far
        self._encoder = None
        self._pass = None

    def limit(self, name: str) -> int | None:
        return self.adapter.limits.get(limit_key(name))

    # -- memory --------------------------------------------------------------------------------

    def allocate(self, nbytes: int, usage=None):
        self.buffers_created += 1
        # 16 bytes at least: a shader reading vec4s needs that much bound, even for an empty tensor.
        return self.gpu.create_buffer(size=max(_align4(nbytes), 16), usage=usage or self.storage_usage)

    def allocate_with(self, data: bytes):
        self.buffers_created += 1
        padded = bytes(data) + b"\0" * (_align4(len(data)) - len(data))
        return self.gpu.create_buffer_with_data(data=padded or b"\0\0\0\0", usage=self.storage_usage)

    def upload(self, buffer, offset: int, data: bytes) -> None:
        # queue.write_buffer runs before anything recorded but not yet submitted: submit that first.
        self._submit()
        if len(data) % 4:
            data = bytes(data) + b"\0" * (4 - len(data) % 4)
        self.gpu.queue.write_buffer(buffer, offset, data)

    def read_back(self, view: View) -> bytes:
        if not view.nbytes:  # an empty tensor: nothing to map (wgpu refuses an empty mapping)
            return b""
        size = _align4(view.nbytes)
        staging = self._staging
        if staging is None or staging.size < size:
            usage = self.wgpu.BufferUsage
            staging = self._staging = self.allocate(size, usage.MAP_READ | usage.COPY_DST)
        encoder = self._recording()
        self._end_pass()
        encoder.copy_buffer_to_buffer(view.buffer, view.offset, staging, 0, size)
        self._submit()
        staging.map_sync(self.wgpu.MapMode.READ, 0, size)
        data = bytes(staging.read_mapped(0, size))
        staging.unmap()
        return data[: view.nbytes]

    def copy(self, source: View, destination: View) -> None:
        encoder = self._recording()
        self._end_pass()
        encoder.copy_buffer_to_buffer(source.buffer, source.offset, destination.buffer, destination.offset,
                                      _align4(source.nbytes))

    # -- kernels -------------------------------------------------------------------------------

    def load_kernels(self, kernels: list[dict], modules: dict[str, bytes]) -> list:
        return [self.pipeline(modules[k["module"]].decode(), k) for k in kernels]

    def pipeline(self, source: str, kernel: dict):
        """(bind group layout, compute pipeline, uniform bytes) of a kernel record; cached by source."""
        key = (source, kernel["entry_point"])
        cached = self._pipelines.get(key)
        if cached is None:
            wgpu = self.wgpu
            module = self.gpu.create_shader_module(code=source)
            storage = {"type": wgpu.BufferBindingType.storage}
            entries = [{"binding": b["index"], "visibility": wgpu.ShaderStage.COMPUTE, "buffer": storage}
                       for b in kernel["abi"]["bindings"]]
            scalars = kernel["abi"]["scalars"]
            if scalars:  # one uniform buffer of i32s, in 16-byte rows
                entries.append({"binding": scalars[0]["binding"], "visibility": wgpu.ShaderStage.COMPUTE,
                                "buffer": {"type": wgpu.BufferBindingType.uniform}})
            layout = self.gpu.create_bind_group_layout(entries=entries)
            pipeline = self.gpu.create_compute_pipeline(
                layout=self.gpu.create_pipeline_layout(bind_group_layouts=[layout]),
                compute={"module": module, "entry_point": kernel["entry_point"]})
            cached = self._pipelines[key] = (layout, pipeline, 16 * -(-len(scalars) // 4))
        return cached

    def bind(self, kernel, views: list[View]):
        layout, pipeline, uniform_bytes = kernel
        # A zero-size tensor (an empty reduction's input) is bound as its whole buffer: WebGPU refuses
        # an empty binding (wgpu-native aborts on one), and the kernel never reads it.
        entries = [(v.buffer, v.offset, _align4(v.nbytes)) if v.nbytes else (v.buffer, 0, v.buffer.size)
                   for v in views]
        uniform = None
        if uniform_bytes:
            usage = self.wgpu.BufferUsage
            uniform = self.allocate(uniform_bytes, usage.UNIFORM | usage.COPY_DST)
            entries.append((uniform, 0, uniform_bytes))
        group = self.gpu.create_bind_group(layout=layout, entries=[
            {"binding": i, "resource": {"buffer": b, "offset": offset, "size": size}}
            for i, (b, offset, size) in enumerate(entries)])
        return pipeline, group, uniform

    def launch(self, bound, scalars: list[int], grid: list[int]) -> None:
        pipeline, group, uniform = bound
        if uniform is not None:
            words = np.zeros(uniform.size // 4, np.int32)
            words[: len(scalars)] = scalars
            self.gpu.queue.write_buffer(uniform, 0, words.tobytes())
        if min(grid) <= 0:
            return
        if self._pass is None:
            self._pass = self._recording().begin_compute_pass()
        self._pass.set_pipeline(pipeline)
        self._pass.set_bind_group(0, group)
        self._pass.dispatch_workgroups(*grid)

    def flush(self) -> None:
        self._submit()

    def synchronize(self) -> None:
        """Submit what is queued and wait: wgpu-py's work-done callback is broken, a tiny readback is not."""
        if not hasattr(self, "_fence"):
            self._fence = self.allocate(4)
        self.read_back(View(self._fence, 0, 4))

    def timed_launch(self, bound, scalars: list[int], grid: list[int]) -> float:
        if TIMESTAMP_QUERY not in self.features:
            return super().timed_launch(bound, scalars, grid)
        self.synchronize()
        wgpu = self.wgpu
        if not hasattr(self, "_queries"):
            self._queries = self.gpu.create_query_set(type=wgpu.QueryType.timestamp, count=2)
            self._resolved = self.gpu.create_buffer(size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE
                                                    | wgpu.BufferUsage.COPY_SRC)
        pipeline, group, uniform = bound
        if uniform is not None:
            words = np.zeros(uniform.size // 4, np.int32)
            words[: len(scalars)] = scalars
            self.gpu.queue.write_buffer(uniform, 0, words.tobytes())
        encoder = self.gpu.create_command_encoder()
        compute = encoder.begin_compute_pass(timestamp_writes={
            "query_set": self._queries, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1})
        if min(grid) > 0:
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, group)
            compute.dispatch_workgroups(*grid)
        compute.end()
        encoder.resolve_query_set(self._queries, 0, 2, self._resolved, 0)
        start = time.perf_counter()
        self.gpu.queue.submit([encoder.finish()])
        stamps = np.frombuffer(self.gpu.queue.read_buffer(self._resolved), np.uint64)
        return float(stamps[1] - stamps[0]) * 1e-9 if stamps[1] > stamps[0] else time.perf_counter() - start

    # -- recording -----------------------------------------------------------------------------

    def _recording(self):
        if self._encoder is None:
            self._encoder = self.gpu.create_command_encoder()
        return self._encoder

    def _end_pass(self) -> None:
        if self._pass is not None:
            self._pass.end()
            self._pass = None

    def _submit(self) -> None:
        self._end_pass()
        if self._encoder is not None:
            self.gpu.queue.submit([self._encoder.finish()])
            self._encoder = None


def _align4(value: int) -> int:
    return (value + 3) // 4 * 4
