"""The Python VM: runs an Executable on WebGPU through wgpu-py.

When every symbolic variable of a function has an upper bound, everything a
call needs is created once, when the VM is made: the arena buffers of the
memory plan, a buffer per parameter sized at its upper bounds, the weights,
every pipeline, a uniform buffer and a bind group per kernel launch, and a
readback buffer per result. A call then only writes its arguments and sizes,
records the launches and reads the result back: within the upper bounds it
creates no GPU buffer. Without bounds the storages of the plan, the parameter
buffers and the bind groups are created per call, at the sizes of that call.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from .. import arith
from ..ir.errors import RuntimeCheckError, TesseraError
from .executable import Executable
from .kernel_runner import _device_bytes, _from_device, _to_device, default_runner


class DeviceError(TesseraError):
    """The device lacks a feature or limit the executable needs."""


LIMIT_NAMES = {"maxComputeInvocationsPerWorkgroup": "max-compute-invocations-per-workgroup",
               "maxStorageBuffersPerShaderStage": "max-storage-buffers-per-shader-stage",
               "maxComputeWorkgroupStorageSize": "max-compute-workgroup-storage-size",
               "maxBufferSize": "max-buffer-size",
               "maxStorageBufferBindingSize": "max-storage-buffer-binding-size"}


class VirtualMachine:
    def __init__(self, exe: Executable, device: str = "webgpu", runner=None):
        if device != "webgpu" or exe.target.get("kind") != "webgpu":
            raise DeviceError(f"this VM runs webgpu executables on webgpu, got {exe.target.get('kind')!r} "
                              f"on {device!r}")
        import wgpu

        self._wgpu = wgpu
        self.exe = exe
        self.runner = runner or default_runner()
        self.device = self.runner.device
        self._check_device()
        self.buffers_created = 0
        self.profile: dict[str, float] = {}
        self._pipelines = [self.runner.pipeline_for_record(k) for k in exe.kernels]
        self._constants = {name: self._create_with_data(_to_device(array, str(array.dtype)))
                           for name, array in exe.constants.items()}
        self._functions = {name: _Function(self, name, f) for name, f in exe.functions.items()}

    def _check_device(self) -> None:
        for feature in self.exe.required_features:
            if feature not in self.runner.features:
                raise DeviceError(f"the device lacks the feature {feature!r} this executable's kernels use")
        for key, name in LIMIT_NAMES.items():
            need, have = self.exe.required_limits.get(key, 0), self.runner.adapter.limits[name]
            if need > have:
                raise DeviceError(f"the executable needs {key} = {need}, the device allows {have}")

    def _state_buffer(self, name: str, size: int):
        """State is shared by name across functions: prefill and decode write one KV cache."""
        if not hasattr(self, "_state"):
            self._state = {}
        if name not in self._state:
            self._state[name] = self._create(size, self._storage_usage)
        elif self._state[name].size < size:
            raise DeviceError(f"state '{name}' is declared with different sizes by different functions")
        return self._state[name]

    # Buffer creation goes through here, so that tests can count it.
    def _create(self, size: int, usage) -> object:
        self.buffers_created += 1
        return self.device.create_buffer(size=max(_align4(size), 4), usage=usage)

    def _create_with_data(self, data: bytes) -> object:
        self.buffers_created += 1
        return self.device.create_buffer_with_data(data=data, usage=self._storage_usage)

    @property
    def _storage_usage(self):
        usage = self._wgpu.BufferUsage
        return usage.STORAGE | usage.COPY_SRC | usage.COPY_DST

    def __getitem__(self, name: str):
        if name not in self._functions:
            raise KeyError(f"the executable has no function '{name}' (functions: {', '.join(self._functions)})")
        return lambda *args: self._functions[name].call(args)

    def run(self, name: str, *args):
        return self[name](*args)

    def call_on_device(self, name: str, *args):
        """Like ``vm[name](*args)``, but results stay on the device as DeviceTensors (nothing is read
        back). Pass one to another function to use it there without a trip through the host: the
        LLM's logits go from ``decode`` to ``sample`` this way. A result lives in the function's own
        memory, so it is valid until that function is called again."""
        if name not in self._functions:
            raise KeyError(f"the executable has no function '{name}' (functions: {', '.join(self._functions)})")
        return self._functions[name].call(args, to_host=False)

    def reset_state(self) -> None:
        """Zero every state tensor (a KV cache, for a new conversation)."""
        for buffer in getattr(self, "_state", {}).values():
            self.device.queue.write_buffer(buffer, 0, bytes(buffer.size))

    def profile_kernels(self, name: str, *args) -> list[tuple[str, float]]:
        """Seconds each kernel launch of one call takes, in program order.

        With the ``timestamp-query`` feature these are GPU timestamps around each launch;
        otherwise each launch is submitted alone and timed on the host until it completes.
        """
        if name not in self._functions:
            raise KeyError(f"the executable has no function '{name}'")
        return self._functions[name].profile(args)


class _Function:
    def __init__(self, vm: VirtualMachine, name: str, record: dict):
        self.vm, self.name, self.record = vm, name, record
        self.static = record["memory"]["static"]
        self.bounds = {s: v["upper_bound"] for s, v in record["symbols"].items()}
        self.tokens = {s["index"]: s for s in record["memory"]["storages"]}
        wgpu = vm._wgpu
        self.uniforms = {}
        for index, op in enumerate(record["code"]):
            kernel = vm.exe.kernels[op["kernel"]] if op["op"] == "launch" else None
            if kernel is not None and kernel["scalars"]:
                self.uniforms[index] = vm._create(16 * ((len(kernel["scalars"]) + 3) // 4),
                                                  wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        self.fixed = None
        self.generation = 0  # calls so far: a DeviceTensor from an earlier call is stale
        if self.static:
            self.fixed = self._allocate(self.bounds)
            self.fixed_groups = self._bind_groups(self.fixed, self.bounds)

    # -- resources ---------------------------------------------------------------------------

    def _allocate(self, sizes: dict[str, int]) -> dict:
        """Parameter, storage and readback buffers for calls up to ``sizes``."""
        vm, record = self.vm, self.record
        resources = {"params": {}, "storages": {}, "readback": {}}
        for param in record["params"]:
            tensor = record["tensors"].get(str(param["register"]))
            if tensor is not None and param.get("state"):
                resources["params"][param["register"]] = vm._state_buffer(param["name"], _bytes(tensor, sizes))
            elif tensor is not None:
                resources["params"][param["register"]] = vm._create(_bytes(tensor, sizes), vm._storage_usage)
        memory = record["memory"]
        if self.static:
            arena = [vm._create(size, vm._storage_usage) for size in memory["buffers"]]
            for index, token in self.tokens.items():
                resources["storages"][index] = (arena[token["buffer"]], token["offset"])
        for op in record["code"]:
            if op["op"] == "alloc_storage":  # without bounds: at this call's sizes
                size = _evaluate(op["size"], sizes)
                resources["storages"][op["token"]] = (vm._create(size, vm._storage_usage), 0)
        wgpu = vm._wgpu
        for reg in self._result_registers():
            resources["readback"][reg] = vm._create(_bytes(record["tensors"][str(reg)], sizes),
                                                    wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        return resources

    def _location(self, reg: int, resources: dict, sizes: dict[str, int]):
        """(buffer, offset, bytes) of a tensor register: bytes at ``sizes`` (the bounds when static)."""
        record = self.record
        loc = record["locations"][str(reg)]
        size = _align4(_bytes(record["tensors"][str(reg)], sizes))
        if loc["kind"] == "param":
            return resources["params"][reg], 0, size
        if loc["kind"] == "constant":
            buffer = self.vm._constants[loc["name"]]
            return buffer, 0, buffer.size
        token = loc["token"] if loc["kind"] == "arena" else self._token_of_storage(loc["register"])
        buffer, offset = resources["storages"][token]
        return buffer, offset, size

    def _token_of_storage(self, reg: int) -> int:
        return next(op["token"] for op in self.record["code"] if op["op"] == "alloc_storage" and op["dst"] == reg)

    def _bind_groups(self, resources: dict, sizes: dict[str, int]) -> dict[int, object]:
        groups = {}
        for index, op in enumerate(self.record["code"]):
            if op["op"] != "launch":
                continue
            layout = self.vm._pipelines[op["kernel"]][1]
            entries = [self._location(reg, resources, sizes) for reg in op["args"] + op["outs"]]
            if index in self.uniforms:
                entries.append((self.uniforms[index], 0, self.uniforms[index].size))
            groups[index] = self.vm.device.create_bind_group(layout=layout, entries=[
                {"binding": i, "resource": {"buffer": b, "offset": offset, "size": size}}
                for i, (b, offset, size) in enumerate(entries)])
        return groups

    def _result_registers(self, reg: int | None = None) -> list[int]:
        if reg is None:
            reg = self.record["code"][-1]["src"]
        for op in self.record["code"]:
            if op["op"] == "tuple" and op["dst"] == reg:
                return [r for f in op["fields"] for r in self._result_registers(f)]
        return [reg] if str(reg) in self.record["tensors"] else []

    # -- a call ------------------------------------------------------------------------------

    def _prepare(self, args):
        """Run the checks, bind the sizes, upload the arguments: (heap, resources, bind groups).

        State parameters (a KV cache) live on the device across calls: callers do not pass them."""
        record, vm = self.record, self.vm
        inputs = [p for p in record["params"] if not p.get("state")]
        if len(args) != len(inputs):
            names = ", ".join(p["name"] for p in inputs)
            raise RuntimeCheckError(f"{self.name} takes {len(inputs)} arguments ({names}), got {len(args)}")
        values = {param["register"]: value for param, value in zip(inputs, args)}
        heap: dict[str, int] = {}
        for op in record["code"]:
            if op["op"] == "match":
                value = values.get(op["reg"])
                if value is None and op["sinfo"]["kind"] == "prim":
                    continue
                if value is None:  # a tensor the program or the state holds: its shape is known symbolically
                    tensor = record["tensors"][str(op["reg"])]
                    value = _ShapeOnly(tuple(_evaluate(d, heap) for d in tensor["shape"]),
                                       tensor["dtype"])
                _bind(op["sinfo"], value, heap)
                _check(op["sinfo"], value, heap, op["what"])
        for name, bound in self.bounds.items():
            if bound is not None and name in heap and heap[name] > bound:
                raise RuntimeCheckError(f"{self.name}: {name} = {heap[name]} exceeds its upper bound {bound}, "
                                        "for which memory was planned")
        if self.static:
            resources, groups = self.fixed, self.fixed_groups
        else:
            resources = self._allocate(heap)
            groups = self._bind_groups(resources, heap)
        copies = []  # (source buffer, offset, destination, bytes) for arguments already on the device
        for param in inputs:
            buffer = resources["params"].get(param["register"])
            value = values[param["register"]]
            if buffer is not None and isinstance(value, DeviceTensor):
                value.check_current()
                copies.append((value.buffer, value.offset, buffer, value.nbytes))
            elif buffer is not None:
                data = _to_device(np.asarray(value), param["sinfo"]["dtype"])
                vm.device.queue.write_buffer(buffer, 0, data)
        return heap, resources, groups, copies

    def _launches(self, heap: dict[str, int], groups: dict):
        """(pipeline, bind group, grid, kernel name) per launch, uniforms written."""
        vm = self.vm
        for index, op in enumerate(self.record["code"]):
            if op["op"] != "launch":
                continue
            kernel = vm.exe.kernels[op["kernel"]]
            values = [_evaluate(s, heap) for s in op["scalars"]]
            if index in self.uniforms:
                words = np.zeros(self.uniforms[index].size // 4, np.int32)
                words[: len(values)] = values
                vm.device.queue.write_buffer(self.uniforms[index], 0, words.tobytes())
            env = dict(zip(kernel["scalars"], values))
            grid = [_evaluate(g, env) for g in kernel["grid"]]
            yield vm._pipelines[op["kernel"]][2], groups[index], grid, kernel["name"]

    def call(self, args, to_host: bool = True):
        vm, record = self.vm, self.record
        heap, resources, groups, copies = self._prepare(args)
        self.generation += 1
        encoder = vm.device.create_command_encoder()
        for source, offset, destination, size in copies:
            encoder.copy_buffer_to_buffer(source, offset, destination, 0, size)
        compute = encoder.begin_compute_pass()
        for pipeline, group, grid, _ in self._launches(heap, groups):
            if min(grid) > 0:
                compute.set_pipeline(pipeline)
                compute.set_bind_group(0, group)
                compute.dispatch_workgroups(*grid)
        compute.end()
        registers = self._result_registers()
        if not to_host:
            vm.device.queue.submit([encoder.finish()])
            return self._result(record["code"][-1]["src"], {reg: self._device_tensor(reg, resources, heap)
                                                            for reg in registers})
        for reg in registers:
            buffer, offset, _ = self._location(reg, resources, heap)
            size = _align4(_bytes(record["tensors"][str(reg)], heap))
            encoder.copy_buffer_to_buffer(buffer, offset, resources["readback"][reg], 0, size)
        start = time.perf_counter()
        vm.device.queue.submit([encoder.finish()])
        results = {}
        for reg in registers:
            tensor = record["tensors"][str(reg)]
            shape = tuple(_evaluate(d, heap) for d in tensor["shape"])
            readback = resources["readback"][reg]
            readback.map_sync(vm._wgpu.MapMode.READ)
            raw = readback.read_mapped(0, _device_bytes(int(np.prod(shape, dtype=np.int64)), tensor["dtype"]))
            readback.unmap()
            results[reg] = _from_device(raw, shape, tensor["dtype"])
        vm.profile[self.name] = time.perf_counter() - start
        return self._result(record["code"][-1]["src"], results)

    def _device_tensor(self, reg: int, resources: dict, heap: dict[str, int]) -> DeviceTensor:
        tensor = self.record["tensors"][str(reg)]
        buffer, offset, _ = self._location(reg, resources, heap)
        shape = tuple(_evaluate(d, heap) for d in tensor["shape"])
        return DeviceTensor(self, self.generation, buffer, offset, shape, tensor["dtype"],
                            _align4(_bytes(tensor, heap)))

    def profile(self, args) -> list[tuple[str, float]]:
        vm = self.vm
        wgpu = vm._wgpu
        heap, _, groups, copies = self._prepare(args)
        if copies:
            encoder = vm.device.create_command_encoder()
            for source, offset, destination, size in copies:
                encoder.copy_buffer_to_buffer(source, offset, destination, 0, size)
            vm.device.queue.submit([encoder.finish()])
        use_timestamps = "timestamp-query" in vm.runner.features
        if use_timestamps:
            query_set = vm.device.create_query_set(type=wgpu.QueryType.timestamp, count=2)
            usage = wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
            resolved = vm.device.create_buffer(size=16, usage=usage)
        timings = []
        for pipeline, group, grid, name in self._launches(heap, groups):
            encoder = vm.device.create_command_encoder()
            writes = {"query_set": query_set, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1} \
                if use_timestamps else None
            compute = encoder.begin_compute_pass(timestamp_writes=writes) if writes else encoder.begin_compute_pass()
            if min(grid) > 0:
                compute.set_pipeline(pipeline)
                compute.set_bind_group(0, group)
                compute.dispatch_workgroups(*grid)
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
            timings.append((name, seconds))
        return timings

    def _result(self, reg: int, results: dict):
        for op in self.record["code"]:
            if op["op"] == "tuple" and op["dst"] == reg:
                return tuple(self._result(f, results) for f in op["fields"])
        return results[reg]


class DeviceTensor:
    """A function's result left in device memory (``VirtualMachine.call_on_device``).

    It views the producing function's memory, so the next call of that function overwrites it;
    using it after that is an error rather than silently reading the newer values."""

    def __init__(self, function: _Function, generation: int, buffer, offset: int, shape: tuple[int, ...],
                 dtype: str, nbytes: int):
        self._function, self._generation = function, generation
        self.buffer, self.offset, self.shape, self.nbytes = buffer, offset, shape, nbytes
        self.ndim, self.dtype = len(shape), np.dtype(dtype)

    def check_current(self) -> None:
        if self._function.generation != self._generation:
            raise RuntimeCheckError(f"this result of {self._function.name} was overwritten by a later call of "
                                    f"{self._function.name}; use it before calling that function again")

    def numpy(self) -> np.ndarray:
        """Read it back to the host."""
        self.check_current()
        device = self._function.vm.device
        raw = device.queue.read_buffer(self.buffer, self.offset, self.nbytes)
        count = int(np.prod(self.shape, dtype=np.int64))
        return _from_device(bytes(raw)[: _device_bytes(count, str(self.dtype))], self.shape, str(self.dtype))

    def __repr__(self) -> str:
        return f"DeviceTensor(shape={self.shape}, dtype={self.dtype}, from {self._function.name})"


class _ShapeOnly:
    """A tensor made by the program, seen by a match: its shape and dtype are all a check needs."""

    def __init__(self, shape, dtype):
        self.shape, self.ndim = shape, len(shape)
        self.dtype = np.dtype(dtype)


@functools.cache
def _parsed(text: str):
    return arith.parse_expr(text)


def _evaluate(text: str, env: dict[str, int]) -> int:
    """A shape expression of the executable, parsed once however often a call evaluates it."""
    return arith.evaluate(_parsed(text), env)


def _bytes(tensor: dict, sizes: dict[str, int]) -> int:
    return int(_evaluate(tensor["bytes"], sizes))


def _wait(vm: VirtualMachine) -> None:
    """Block until the queue is idle: wgpu-py's work-done callback is broken, a tiny readback is not."""
    if not hasattr(vm, "_fence"):
        usage = vm._wgpu.BufferUsage
        vm._fence = vm.device.create_buffer(size=4, usage=usage.COPY_SRC | usage.COPY_DST)
    vm.device.queue.read_buffer(vm._fence)


def _align4(value: int) -> int:
    return (value + 3) // 4 * 4


def _bind(sinfo: dict, value, heap: dict[str, int]) -> None:
    if sinfo["kind"] == "prim" and sinfo["value"] is not None and sinfo["value"].isidentifier():
        heap.setdefault(sinfo["value"], int(value))
        return
    if sinfo["kind"] == "tensor" and sinfo["shape"] is not None and hasattr(value, "shape"):
        if len(sinfo["shape"]) == len(value.shape):
            for dim, size in zip(sinfo["shape"], value.shape):
                if dim.isidentifier() and dim not in heap:
                    heap[dim] = int(size)


def _check(sinfo: dict, value, heap: dict[str, int], what: str) -> None:
    if sinfo["kind"] == "prim" and sinfo["value"] is not None:
        expected = _evaluate(sinfo["value"], heap)
        if int(value) != expected:
            raise RuntimeCheckError(f"{what}: expected {sinfo['value']} = {expected}, got {value}")
        return
    if sinfo["kind"] != "tensor":
        return
    if not hasattr(value, "shape"):
        raise RuntimeCheckError(f"{what}: expected a tensor, got {type(value).__name__}")
    if sinfo["dtype"] and np.dtype(value.dtype).name != sinfo["dtype"]:
        raise RuntimeCheckError(f"{what}: expected dtype {sinfo['dtype']}, got {np.dtype(value.dtype).name}")
    if sinfo["shape"] is None:
        return
    if len(sinfo["shape"]) != len(value.shape):
        raise RuntimeCheckError(f"{what}: expected rank {len(sinfo['shape'])}, got shape {tuple(value.shape)}")
    for axis, (dim, size) in enumerate(zip(sinfo["shape"], value.shape)):
        expected = _evaluate(dim, heap)
        if expected != size:
            raise RuntimeCheckError(f"{what}: dimension {axis} is {size}, not {dim} = {expected}")
