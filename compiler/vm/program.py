"""The VM's program layer: runs the functions of an executable, device-independent.

A call checks its arguments against the function's struct info (binding the symbolic variables of
the shape heap), uploads them, launches the kernels in program order on the device, and reads the
results back (or leaves them on the device as DeviceTensors). A straight-line function whose every
symbolic variable has an upper bound (the LLM's prefill, decode and sampler) runs on the fast
path: its memory and every kernel binding are made once, when the VM is made, and within the
bounds a call creates no device buffer. Every other function (calls, branches, library calls,
coarse parameters, sizes without bounds) runs in ``interpreter.py``. Storage is in ``storage.py``,
devices behind ``devices.Device``.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np

from ..ir.check import ShapeValue, bind_value, check_value
from ..ir.errors import RuntimeCheckError
from .builtins import BUILTINS
from .devices import Device, DeviceError, View, device_for
from .executable import Executable, sinfo_from_json
from .interpreter import Interpreter, Tensor
from .storage import FunctionMemory, Storage, check_copy, check_launch, evaluate, from_device, to_device

STEP_CACHE_SIZE = 8  # sizes whose launch arguments a straight-line function keeps


class VirtualMachine:
    def __init__(self, exe: Executable, device: Device | str | None = None, libraries: dict | None = None):
        """``device``: a Device, a device kind ("webgpu", "wasm"), or None for the first kind here that
        runs the executable's kernels. ``libraries``: host functions by name for ``R.call_dps_library``
        and ``R.call_pure_packed``, in destination-passing style (inputs, then outputs to fill, then
        scalars) or returning their result (docs/format.md, "Libraries")."""
        self.exe = exe
        self.libraries = {**BUILTINS, **(libraries or {})}
        missing = [name for name in exe.libraries if name not in self.libraries]
        if missing:
            raise RuntimeCheckError(f"the executable calls the library function '{missing[0]}', which is not "
                                    "registered: pass it as VirtualMachine(exe, libraries={'" + missing[0] +
                                    "': fn})")
        self.device = device if isinstance(device, Device) else device_for(exe, device)
        self.device.check(exe)
        self.profile: dict[str, float] = {}
        self.kernels = self.device.load_kernels(exe.kernels, exe.modules)  # first: a WASM module places its statics
        self.storage = Storage(self.device, exe.constants, exe.constant_devices)
        self.interpreter = Interpreter(self.device, exe, self.kernels, self.storage, self.libraries)
        self._functions = {name: (_Function if straight_line(f) else _InterpretedFunction)(self, name, f)
                           for name, f in exe.functions.items()}

    @property
    def copies(self) -> int:
        """``to_device`` copies between the devices of a split build so far."""
        return getattr(self.device, "copies", 0)

    @property
    def buffers_created(self) -> int:
        return getattr(self.device, "buffers_created", 0)

    def __getitem__(self, name: str):
        return lambda *args: self._function(name).call(args)

    def _function(self, name: str) -> _Function:
        if name not in self._functions:
            raise RuntimeCheckError(f"the executable has no function '{name}' (functions: "
                                    f"{', '.join(self._functions) or 'none'})")
        return self._functions[name]

    def run(self, name: str, *args):
        return self[name](*args)

    def call_on_device(self, name: str, *args):
        """Like ``vm[name](*args)``, but results stay on the device as DeviceTensors (nothing is read
        back). Pass one to another function to use it there without a trip through the host: the
        LLM's logits go from ``decode`` to ``sample`` this way. A result lives in the function's own
        memory, so it is valid until that function is called again."""
        return self._function(name).call(args, to_host=False)

    def reset_state(self) -> None:
        """Zero every state tensor (a KV cache, for a new conversation)."""
        self.storage.reset_state()

    def profile_kernels(self, name: str, *args) -> list[tuple[str, float]]:
        """Seconds each kernel launch of one call takes, in program order (GPU timestamps where the
        device has them, else each launch timed alone on the host)."""
        return self._function(name).profile(args)


class _Function:
    """The fast path: a straight-line function over a static plan, every binding made once, here."""

    def __init__(self, vm: VirtualMachine, name: str, record: dict):
        self.vm, self.name, self.record = vm, name, record
        self.bounds = {s: v["upper_bound"] for s, v in record["symbols"].items()}
        self.tokens = {s["index"]: s for s in record["memory"]["storages"]}
        self.launches = [(index, op) for index, op in enumerate(record["code"]) if op["op"] == "launch"]
        # Launches and the copies between them (a split build), in program order.
        self.steps = [(index, op) for index, op in enumerate(record["code"]) if op["op"] in ("launch", "to_device")]
        self.inputs = [p for p in record["params"] if not p.get("state")]
        self.results = self._result_registers()
        # The struct info of each match, read once.
        self.checks = {index: sinfo_from_json(op["sinfo"]) for index, op in enumerate(record["code"])
                       if op["op"] == "match"}
        # Shapes the program computes from the heap (check_reshapes compares element counts with them).
        self.shapes = {op["dst"]: op["values"] for op in record["code"] if op["op"] == "shape"}
        self.generation = 0  # calls so far: a DeviceTensor from an earlier call is stale
        self.memory = FunctionMemory(vm.storage, record, self.bounds, self.tokens)
        self.bound = self._bind(self.memory, self.bounds)
        # Each launch's scalars and grid (and each copy's views) by the sizes of a call: a model called
        # at one shape evaluates its expressions once, not on every call.
        self._steps_by_sizes: OrderedDict[tuple, list] = OrderedDict()

    def _bind(self, memory: FunctionMemory, sizes: dict[str, int]) -> dict[int, object]:
        device, kernels = self.vm.device, self.vm.kernels
        return {index: device.bind(kernels[op["kernel"]], [memory.view(r, sizes) for r in op["args"] + op["outs"]])
                for index, op in self.launches}

    def _result_registers(self, reg: int | None = None) -> list[int]:
        if reg is None:
            reg = self.record["code"][-1]["src"]
        for op in self.record["code"]:
            if op["op"] == "tuple" and op["dst"] == reg:
                return [r for f in op["fields"] for r in self._result_registers(f)]
        return [reg] if str(reg) in self.record["tensors"] else []

    # -- a call ------------------------------------------------------------------------------

    def _prepare(self, args):
        """Check the arguments, bind the sizes, upload: (heap, memory, bindings).

        State parameters (a KV cache) live on the device across calls: callers do not pass them."""
        record, device = self.record, self.vm.device
        if len(args) != len(self.inputs):
            names = ", ".join(p["name"] for p in self.inputs)
            raise RuntimeCheckError(f"{self.name} takes {len(self.inputs)} arguments ({names}), got {len(args)}")
        values = {param["register"]: value for param, value in zip(self.inputs, args)}
        heap: dict[str, int] = {}
        for index, sinfo in self.checks.items():
            op = record["code"][index]
            value = values.get(op["reg"])
            if value is None and op["reg"] in self.shapes:  # checked here, before any kernel runs
                value = ShapeValue(evaluate(d, heap) for d in self.shapes[op["reg"]])
            if value is None and (op["sinfo"]["kind"] == "prim" or str(op["reg"]) not in record["tensors"]):
                continue  # a tuple of the program's own tensors (the result): each field was checked
            if value is None:  # a tensor the program or the state holds: its shape is known symbolically
                tensor = record["tensors"][str(op["reg"])]
                value = _ShapeOnly(tuple(evaluate(d, heap) for d in tensor["shape"]), tensor["dtype"])
            bind_value(sinfo, value, heap)
            check_value(value, sinfo, heap, op["what"])
        for name, bound in self.bounds.items():
            if bound is not None and name in heap and heap[name] > bound:
                raise RuntimeCheckError(f"{self.name}: {name} = {heap[name]} exceeds its upper bound {bound}, "
                                        "for which memory was planned")
        memory, bound = self.memory, self.bound
        # Host values first: a device write after a recorded copy would have to submit the copy alone.
        on_device = []
        for param in self.inputs:
            buffer = memory.params.get(param["register"])
            if buffer is None:
                continue
            value = values[param["register"]]
            if isinstance(value, DeviceTensor):
                value.check_current()
                on_device.append((value.view, View(buffer, 0, value.view.nbytes)))
            else:
                device.upload(buffer, 0, to_device(np.asarray(value), param["sinfo"]["dtype"]))
        for source, destination in on_device:
            device.copy(source, destination)
        return heap, memory, bound

    def _launch_arguments(self, heap: dict[str, int], copies: bool = False):
        """(launch index, kernel record, scalar values, grid) per launch; with ``copies``, also
        (index, None, source view, destination view) per ``to_device``, in program order."""
        kernels = self.vm.exe.kernels
        for index, op in self.steps:
            if op["op"] == "to_device":
                if copies:
                    yield index, None, self.memory.view(op["src"], heap), self.memory.view(op["dst"], heap)
                continue
            kernel = kernels[op["kernel"]]
            values = [evaluate(s, heap) for s in op["scalars"]]
            env = dict(zip((s["name"] for s in kernel["abi"]["scalars"]), values))
            grid = [evaluate(g, env) for g in kernel["grid"]]
            check_launch(kernel, values, grid)
            yield index, kernel, values, grid

    def _steps_for(self, heap: dict[str, int]) -> list:
        """``_launch_arguments(heap, copies=True)``, kept for the last few sizes (decode's position changes
        every call, so the cache is small)."""
        key = tuple(heap.items())
        steps = self._steps_by_sizes.get(key)
        if steps is None:
            steps = self._steps_by_sizes[key] = list(self._launch_arguments(heap, copies=True))
            if len(self._steps_by_sizes) > STEP_CACHE_SIZE:
                self._steps_by_sizes.popitem(last=False)
        return steps

    def call(self, args, to_host: bool = True):
        device = self.vm.device
        heap, memory, bound = self._prepare(args)
        self.generation += 1
        for index, kernel, scalars, grid in self._steps_for(heap):
            if kernel is None:  # to_device: scalars and grid are the two views
                check_copy(scalars, grid, self.name)
                device.copy(scalars, grid)
            else:
                device.launch(bound[index], scalars, grid)
        result_src = self.record["code"][-1]["src"]
        if not to_host:
            device.flush()
            return self._result(result_src, {reg: self._device_tensor(reg, memory, heap) for reg in self.results})
        start = time.perf_counter()
        results = {}
        for reg in self.results:
            tensor = self.record["tensors"][str(reg)]
            shape = tuple(evaluate(d, heap) for d in tensor["shape"])
            raw = device.read_back(memory.view(reg, heap))
            results[reg] = from_device(raw, shape, tensor["dtype"])
        device.flush()
        self.vm.profile[self.name] = time.perf_counter() - start
        return self._result(result_src, results)

    def _device_tensor(self, reg: int, memory: FunctionMemory, heap: dict[str, int]) -> DeviceTensor:
        tensor = self.record["tensors"][str(reg)]
        shape = tuple(evaluate(d, heap) for d in tensor["shape"])
        return DeviceTensor(self, self.generation, memory.view(reg, heap), shape, tensor["dtype"])

    def profile(self, args) -> list[tuple[str, float]]:
        heap, _, bound = self._prepare(args)
        self.generation += 1
        return [(kernel["name"], self.vm.device.timed_launch(bound[index], scalars, grid))
                for index, kernel, scalars, grid in self._launch_arguments(heap)]

    def _result(self, reg: int, results: dict):
        for op in self.record["code"]:
            if op["op"] == "tuple" and op["dst"] == reg:
                return tuple(self._result(f, results) for f in op["fields"])
        return results[reg]


class _InterpretedFunction:
    """A function with calls, branches, builtins, coarse parameters or run-time allocation: run by the
    interpreter. Results left on the device stay valid until this function is called again."""

    def __init__(self, vm: VirtualMachine, name: str, record: dict):
        self.vm, self.name, self.record = vm, name, record
        self.generation = 0
        self._held: list = []  # pool blocks of the last call's results

    def call(self, args, to_host: bool = True):
        interpreter = self.vm.interpreter
        inputs = [p for p in self.record["params"] if not p.get("state")]
        if len(args) != len(inputs):
            names = ", ".join(p["name"] for p in inputs)
            raise RuntimeCheckError(f"{self.name} takes {len(inputs)} arguments ({names}), got {len(args)}")
        uploaded: list = []
        try:
            # The last call's results stay alive during this one: one of them may be an argument.
            values = [interpreter.upload(a, p["sinfo"], uploaded, p.get("device", 0)) for a, p in zip(args, inputs)]
            self.generation += 1
            result, held = interpreter.call(self.name, values)
        finally:
            for block in uploaded:
                interpreter.pool.give(block)
        self._release()
        self._held = held
        if not to_host:
            self.vm.device.flush()
            return self._on_device(result)
        start = time.perf_counter()
        value = interpreter.to_host(result)
        self.vm.device.flush()
        self._release()
        self.vm.profile[self.name] = time.perf_counter() - start
        return value

    def _on_device(self, value):
        if isinstance(value, Tensor):
            return DeviceTensor(self, self.generation, value.view, value.shape, value.dtype)
        if isinstance(value, tuple) and not isinstance(value, ShapeValue):
            return tuple(self._on_device(v) for v in value)
        return value

    def _release(self) -> None:
        for block in self._held:
            self.vm.interpreter.pool.give(block)
        self._held = []

    def profile(self, args) -> list[tuple[str, float]]:
        raise RuntimeCheckError(f"{self.name} has calls or branches: profile its kernels with a straight-line "
                                "function")


# What the fast path runs: launches and plumbing over a static plan, every parameter of known shape.
_STRAIGHT_LINE_OPS = {"match", "launch", "to_device", "move", "tuple", "get", "shape", "ret"}


def straight_line(record: dict) -> bool:
    """Whether the fast path can run ``record``: a static plan, no control flow, and every tensor a launch
    binds, a parameter is or the result holds has a known shape and a place (as runtime-js's isStraightLine)."""
    if not record["memory"]["static"] or record.get("runtime_allocations") or record["unbounded_symbols"]:
        return False
    code = record["code"]
    if any(op["op"] not in _STRAIGHT_LINE_OPS for op in code):
        return False
    known = lambda reg: str(reg) in record["tensors"] and str(reg) in record["locations"]  # noqa: E731
    if any(op["op"] == "launch" and not all(map(known, op["args"] + op["outs"])) for op in code):
        return False
    if any(op["op"] == "to_device" and not (known(op["src"]) and known(op["dst"])) for op in code):
        return False
    if not all(p["sinfo"]["kind"] == "prim" or known(p["register"]) for p in record["params"]):
        return False
    tuples = {}
    for op in code:
        if op["op"] == "tuple":
            tuples.setdefault(op["dst"], op["fields"])
    pending, seen = [code[-1]["src"]], set()  # the loader refused tuples that hold themselves
    while pending:
        reg = pending.pop()
        if reg in tuples:
            pending += [f for f in tuples[reg] if f not in seen]
            seen.update(tuples[reg])
        elif not known(reg):
            return False
    return True


class DeviceTensor:
    """A function's result left in device memory (``VirtualMachine.call_on_device``).

    It views the producing function's memory, so the next call of that function overwrites it;
    using it after that is an error rather than silently reading the newer values."""

    def __init__(self, function: _Function, generation: int, view: View, shape: tuple[int, ...], dtype: str):
        self._function, self._generation = function, generation
        self.view, self.shape = view, shape
        self.ndim, self.dtype = len(shape), np.dtype(dtype)

    @property
    def nbytes(self) -> int:
        return self.view.nbytes

    def check_current(self) -> None:
        if self._function.generation != self._generation:
            raise RuntimeCheckError(f"this result of {self._function.name} was overwritten by a later call of "
                                    f"{self._function.name}; use it before calling that function again")

    def numpy(self) -> np.ndarray:
        """Read it back to the host."""
        self.check_current()
        return from_device(self._function.vm.device.read_back(self.view), self.shape, str(self.dtype))

    def __repr__(self) -> str:
        return f"DeviceTensor(shape={self.shape}, dtype={self.dtype}, from {self._function.name})"


class _ShapeOnly:
    """A tensor made by the program, seen by a match: its shape and dtype are all a check needs."""

    def __init__(self, shape, dtype):
        self.shape, self.ndim = shape, len(shape)
        self.dtype = np.dtype(dtype)


__all__ = ["DeviceError", "DeviceTensor", "VirtualMachine"]
