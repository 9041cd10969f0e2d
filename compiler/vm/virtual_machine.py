"""The Python VM: runs an Executable on WebGPU through wgpu-py.

Everything a call needs is created once, when the VM is made: the arena
buffers of each function's memory plan, a buffer per parameter sized at its
upper bounds, the weights, every pipeline, a uniform buffer and a bind group
per kernel launch, and a readback buffer per result. A call then only writes
its arguments and symbolic sizes, records the launches and reads the result
back: within the upper bounds it creates no GPU buffer at all.
"""

from __future__ import annotations

import time

import numpy as np

from .. import arith
from ..ir.errors import RuntimeCheckError, TesseraError
from .executable import Executable
from .kernel_runner import _device_bytes, _from_device, _to_device, default_runner


class DeviceError(TesseraError):
    """The device lacks a feature or limit the executable needs."""


class VirtualMachine:
    def __init__(self, exe: Executable, device: str = "webgpu", runner=None):
        if device != "webgpu" or exe.target.get("kind") != "webgpu":
            raise DeviceError(f"this VM runs webgpu executables on webgpu, got {exe.target.get('kind')!r} "
                              f"on {device!r}")
        self.exe = exe
        self.runner = runner or default_runner()
        self.device = self.runner.device
        self._check_device()
        self.buffers_created = 0
        self.profile: dict[str, float] = {}
        import wgpu

        self._wgpu = wgpu
        self._pipelines = [self.runner.pipeline_for_record(k) for k in exe.kernels]
        self._constants = {name: self._create_with_data(_to_device(array, str(array.dtype)))
                           for name, array in exe.constants.items()}
        self._functions = {name: _PreparedFunction(self, name, f) for name, f in exe.functions.items()}

    def _check_device(self) -> None:
        adapter = self.runner.adapter
        for feature in self.exe.required_features:
            if feature not in self.runner.features:
                raise DeviceError(f"the device lacks the feature {feature!r} this executable's kernels use")
        limits = {"maxComputeInvocationsPerWorkgroup": "max-compute-invocations-per-workgroup",
                  "maxStorageBuffersPerShaderStage": "max-storage-buffers-per-shader-stage",
                  "maxComputeWorkgroupStorageSize": "max-compute-workgroup-storage-size",
                  "maxBufferSize": "max-buffer-size",
                  "maxStorageBufferBindingSize": "max-storage-buffer-binding-size"}
        for key, name in limits.items():
            need = self.exe.required_limits.get(key, 0)
            have = adapter.limits[name]
            if need > have:
                raise DeviceError(f"the executable needs {key} = {need}, the device allows {have}")

    # -- buffer creation goes through here, so tests can count it --------------------------------

    def _create(self, size: int, usage) -> object:
        self.buffers_created += 1
        return self.device.create_buffer(size=max(size, 4), usage=usage)

    def _create_with_data(self, data: bytes) -> object:
        self.buffers_created += 1
        wgpu = self._wgpu
        return self.device.create_buffer_with_data(
            data=data, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)

    def __getitem__(self, name: str):
        if name not in self._functions:
            raise KeyError(f"the executable has no function '{name}' (functions: {', '.join(self._functions)})")
        return lambda *args: self._functions[name].call(args)

    def run(self, name: str, *args):
        return self[name](*args)

    def profile_kernels(self, name: str, *args) -> list[tuple[str, float]]:
        """Seconds each kernel launch of one call takes, in program order.

        With the ``timestamp-query`` feature these are GPU timestamps around each launch;
        otherwise each launch is submitted alone and timed on the host until it completes.
        """
        if name not in self._functions:
            raise KeyError(f"the executable has no function '{name}'")
        return self._functions[name].profile(args)


class _PreparedFunction:
    def __init__(self, vm: VirtualMachine, name: str, record: dict):
        self.vm, self.name, self.record = vm, name, record
        wgpu = vm._wgpu
        if record["unbounded_symbols"]:
            raise DeviceError(f"function {name}: symbolic variables {', '.join(record['unbounded_symbols'])} have "
                              "no upper bound; build with upper_bounds={...} so that memory is planned ahead")
        self.bounds = {s: v["upper_bound"] for s, v in record["symbols"].items()}
        storage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        memory = record["memory"]
        self.arena = [vm._create(size, storage) for size in memory["buffers"]]
        self.tokens = {s["index"]: s for s in memory["storages"]}
        self.params = []
        for index, param in enumerate(record["params"]):
            sinfo = param["sinfo"]
            if sinfo["kind"] == "tensor":
                size = self._upper_bytes(record["tensors"][str(self._param_register(index))]["bytes"])
                self.params.append(vm._create(size, storage))
            else:
                self.params.append(None)
        self.launches = []
        for op in record["code"]:
            if op["op"] == "launch":
                kernel = vm.exe.kernels[op["kernel"]]
                _, layout, pipeline = vm._pipelines[op["kernel"]]
                resources = [self._location(reg) for reg in op["args"] + [op["out"]]]
                uniform = None
                if kernel["scalars"]:
                    uniform = vm._create(16 * ((len(kernel["scalars"]) + 3) // 4),
                                         wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
                    resources.append((uniform, 0, uniform.size))
                group = vm.device.create_bind_group(layout=layout, entries=[
                    {"binding": i, "resource": {"buffer": b, "offset": offset, "size": size}}
                    for i, (b, offset, size) in enumerate(resources)])
                self.launches.append((op, kernel, pipeline, group, uniform))
        ret = record["code"][-1]["src"]
        self.result_registers = self._tensor_registers(ret)
        self.readback = {reg: vm._create(self._upper_bytes(record["tensors"][str(reg)]["bytes"]),
                                         wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
                         for reg in self.result_registers}

    def _param_register(self, index: int) -> int:
        return [op["reg"] for op in self.record["code"] if op["op"] == "match"][index]

    def _upper_bytes(self, expr: str) -> int:
        return int(arith.evaluate(arith.parse_expr(expr), self.bounds))

    def _tensor_registers(self, reg: int) -> list[int]:
        for op in self.record["code"]:
            if op["op"] == "tuple" and op["dst"] == reg:
                return [r for f in op["fields"] for r in self._tensor_registers(f)]
        return [reg] if str(reg) in self.record["tensors"] else []

    def _location(self, reg: int):
        """(buffer, offset, size at the upper bounds) of a tensor register."""
        loc = self.record["locations"][str(reg)]
        size = _align4(self._upper_bytes(self.record["tensors"][str(reg)]["bytes"]))
        if loc["kind"] == "param":
            return self.params[loc["index"]], 0, size
        if loc["kind"] == "constant":
            buffer = self.vm._constants[loc["name"]]
            return buffer, 0, buffer.size
        token = self.tokens[loc["token"]]
        return self.arena[token["buffer"]], token["offset"], max(size, 4)

    # -- a call -----------------------------------------------------------------------------

    def profile(self, args) -> list[tuple[str, float]]:
        vm = self.vm
        heap = self._start(args)
        timings = []
        wgpu = vm._wgpu
        use_timestamps = "timestamp-query" in vm.runner.features
        if use_timestamps:
            query_set = vm.device.create_query_set(type=wgpu.QueryType.timestamp, count=2)
            usage = wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
            resolved = vm.device.create_buffer(size=16, usage=usage)
        for launch in self.launches:
            encoder = vm.device.create_command_encoder()
            writes = ({"query_set": query_set, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
                      if use_timestamps else None)
            compute = encoder.begin_compute_pass(timestamp_writes=writes) if writes else encoder.begin_compute_pass()
            self._record_launch(compute, launch, heap)
            compute.end()
            if use_timestamps:
                encoder.resolve_query_set(query_set, 0, 2, resolved, 0)
            start = time.perf_counter()
            vm.device.queue.submit([encoder.finish()])
            if use_timestamps:
                stamps = np.frombuffer(vm.device.queue.read_buffer(resolved), np.uint64)
                seconds = float(stamps[1] - stamps[0]) * 1e-9 if stamps[1] > stamps[0] else time.perf_counter() - start
            else:
                _wait(vm)
                seconds = time.perf_counter() - start
            timings.append((launch[1]["name"], seconds))
        return timings

    def _start(self, args) -> dict[str, int]:
        """Check the arguments, bind the symbolic sizes and upload the data."""
        record, vm = self.record, self.vm
        if len(args) != len(record["params"]):
            raise RuntimeCheckError(f"{self.name} takes {len(record['params'])} arguments, got {len(args)}")
        heap: dict[str, int] = {}
        for param, value in zip(record["params"], args):
            _bind(param["sinfo"], value, heap)
        for param, value in zip(record["params"], args):
            _check(param["sinfo"], value, heap, f"argument '{param['name']}' of {self.name}")
        for name, bound in self.bounds.items():
            if name in heap and heap[name] > bound:
                raise RuntimeCheckError(f"{self.name}: {name} = {heap[name]} exceeds its upper bound {bound}, "
                                        "for which memory was planned")
        for value, buffer, param in zip(args, self.params, record["params"]):
            if buffer is not None:
                vm.device.queue.write_buffer(buffer, 0, _to_device(np.asarray(value), param["sinfo"]["dtype"]))
        return heap

    def _record_launch(self, compute, launch, heap) -> None:
        op, kernel, pipeline, group, uniform = launch
        if uniform is not None:
            values = np.zeros(uniform.size // 4, np.int32)
            values[: len(op["scalars"])] = [arith.evaluate(arith.parse_expr(s), heap) for s in op["scalars"]]
            self.vm.device.queue.write_buffer(uniform, 0, values.tobytes())
        grid = [arith.evaluate(arith.parse_expr(g), _kernel_env(kernel, op, heap)) for g in kernel["grid"]]
        if min(grid) <= 0:
            return
        compute.set_pipeline(pipeline)
        compute.set_bind_group(0, group)
        compute.dispatch_workgroups(*grid)

    def call(self, args):
        record, vm = self.record, self.vm
        heap = self._start(args)
        encoder = vm.device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        for launch in self.launches:
            self._record_launch(compute, launch, heap)
        compute.end()
        results = {}
        for reg in self.result_registers:
            buffer, offset, _ = self._location(reg)
            tensor = record["tensors"][str(reg)]
            count_bytes = _align4(int(arith.evaluate(arith.parse_expr(tensor["bytes"]), heap)))
            encoder.copy_buffer_to_buffer(buffer, offset, self.readback[reg], 0, count_bytes)
        start = time.perf_counter()
        vm.device.queue.submit([encoder.finish()])
        for reg in self.result_registers:
            tensor = record["tensors"][str(reg)]
            shape = tuple(arith.evaluate(arith.parse_expr(d), heap) for d in tensor["shape"])
            readback = self.readback[reg]
            readback.map_sync(vm._wgpu.MapMode.READ)
            count = int(np.prod(shape, dtype=np.int64))
            raw = readback.read_mapped(0, _device_bytes(count, tensor["dtype"]), copy=True)
            readback.unmap()
            results[reg] = _from_device(raw, shape, tensor["dtype"])
        vm.profile[self.name] = time.perf_counter() - start
        return self._result(record["code"][-1]["src"], results)

    def _result(self, reg: int, results: dict):
        for op in self.record["code"]:
            if op["op"] == "tuple" and op["dst"] == reg:
                return tuple(self._result(f, results) for f in op["fields"])
        return results[reg]


def _wait(vm: VirtualMachine) -> None:
    """Block until the queue is idle: wgpu-py's work-done callback is broken, a tiny readback is not."""
    if not hasattr(vm, "_fence"):
        wgpu = vm._wgpu
        vm._fence = vm.device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
    vm.device.queue.read_buffer(vm._fence)


def _kernel_env(kernel: dict, op: dict, heap: dict[str, int]) -> dict[str, int]:
    """The kernel's grid is written over its own scalar names; the call passes their values."""
    values = [arith.evaluate(arith.parse_expr(s), heap) for s in op["scalars"]]
    return dict(zip(kernel["scalars"], values))


def _align4(value: int) -> int:
    return (value + 3) // 4 * 4


def _bind(sinfo: dict, value, heap: dict[str, int]) -> None:
    if sinfo["kind"] == "tensor" and sinfo["shape"] is not None and isinstance(value, np.ndarray):
        if len(sinfo["shape"]) == value.ndim:
            for dim, size in zip(sinfo["shape"], value.shape):
                if dim.isidentifier() and dim not in heap:
                    heap[dim] = int(size)


def _check(sinfo: dict, value, heap: dict[str, int], what: str) -> None:
    if sinfo["kind"] != "tensor":
        return
    if not isinstance(value, np.ndarray):
        raise RuntimeCheckError(f"{what}: expected a tensor, got {type(value).__name__}")
    if sinfo["dtype"] and value.dtype.name != sinfo["dtype"]:
        raise RuntimeCheckError(f"{what}: expected dtype {sinfo['dtype']}, got {value.dtype.name}")
    if sinfo["shape"] is None:
        return
    if len(sinfo["shape"]) != value.ndim:
        raise RuntimeCheckError(f"{what}: expected rank {len(sinfo['shape'])}, got shape {value.shape}")
    for axis, (dim, size) in enumerate(zip(sinfo["shape"], value.shape)):
        expected = arith.evaluate(arith.parse_expr(dim), heap)
        if expected != size:
            raise RuntimeCheckError(f"{what}: dimension {axis} is {size}, not {dim} = {expected}")
