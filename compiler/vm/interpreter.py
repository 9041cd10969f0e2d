"""The VM's general path: a frame-based interpreter of the whole instruction set (docs/format.md).

Functions that are one straight line over a static memory plan (the LLM's prefill, decode and
sampler) run on ``program.py``'s fast path, bound once when the VM is made. Everything else runs
here: calls between functions (each with its own frame, registers and shape heap, so recursion
works), branches, host functions through ``call_builtin``, function values, coarse parameters and
storage allocated at run time from a pool.

Registers hold run-time values: a ``Tensor`` (a device view with its shape and dtype), an int (a
prim value), a tuple, a ``ShapeValue`` or a ``FunctionRef``. A register with a location in the
function record (a weight, an arena token, a storage of this call) is materialized on first use.
Blocks from the pool belong to the frame that took them; a frame's return hands the blocks its
result reaches to the caller and gives the others back.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..ir.check import ShapeValue, bind_value, check_value
from ..ir.errors import RuntimeCheckError
from .devices import Device, View
from .executable import sinfo_from_json
from .storage import (
    Storage,
    allocate,
    arena_buffers,
    check_copy,
    check_launch,
    device_bytes,
    evaluate,
    from_device,
    to_device,
)

MAX_CALL_DEPTH = 10000  # deeper recursion is a runaway program, reported rather than exhausting memory
BIND_CACHE_SIZE = 4096  # kernel bindings kept for reuse (WebGPU bind groups cost a buffer each)
SMALLEST_BLOCK = 256  # bytes: also WebGPU's storage offset alignment


@dataclass(eq=False)
class Block:
    """Device memory from the pool."""

    buffer: object
    nbytes: int
    serial: int = 0  # the order the pool made it in
    device: int = 0  # which device of a split build holds it


class BlockPool:
    """Run-time allocations by power-of-two size class; a block given back is reused by the next take
    of its class, so a loop of calls allocates from the device only once. A take hands out the
    oldest free block of its class, so a call repeated with the same sizes gets the same blocks in
    the same places and finds its kernel bindings cached."""

    def __init__(self, device: Device):
        self.device = device
        self.free: dict[tuple[int, int], list[tuple[int, Block]]] = {}  # (device, size class) -> heap by serial
        self.device_allocations = 0  # blocks made on the device, for tests and `tessera inspect`
        self.in_use = 0

    def take(self, nbytes: int, on: int = 0) -> Block:
        """A block of at least ``nbytes`` on device ``on`` (a part of a split device)."""
        size = SMALLEST_BLOCK
        while size < nbytes:
            size *= 2
        blocks = self.free.get((on, size))
        if blocks:
            self.in_use += 1
            return heapq.heappop(blocks)[1]
        if nbytes < 0:
            raise RuntimeCheckError(f"the program asks for {nbytes} bytes at run time")
        buffer = allocate(self.device, size, "an allocation at run time", on)
        self.in_use += 1
        self.device_allocations += 1
        return Block(buffer, size, self.device_allocations, on)

    def give(self, block: Block) -> None:
        self.in_use -= 1
        heapq.heappush(self.free.setdefault((block.device, block.nbytes), []), (block.serial, block))


@dataclass(eq=False)
class Tensor:
    """A tensor value: where its bytes are, its shape and dtype; ``block`` when the pool holds it."""

    view: View
    shape: tuple
    dtype: str
    block: Block | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class FunctionRef:
    """A function of the executable used as a value."""

    name: str


class Interpreter:
    """Runs any function of an executable on a device; one per VirtualMachine."""

    def __init__(self, device: Device, exe, kernels: list, storage: Storage, libraries: dict):
        self.device, self.exe, self.kernels, self.storage = device, exe, kernels, storage
        self.libraries = libraries
        self.pool = BlockPool(device)
        self._records = {name: _Record(name, record) for name, record in exe.functions.items()}
        self._arenas: dict[str, dict[int, tuple[object, int]]] = {}
        self._bindings: OrderedDict = OrderedDict()

    # -- from the host -------------------------------------------------------------------------

    def upload(self, value, sinfo: dict, blocks: list[Block], on: int = 0):
        """A host argument as a run-time value; tensors go to pooled blocks (on device ``on``) listed in
        ``blocks``."""
        from .program import DeviceTensor  # the fast path's results may be passed in

        if isinstance(value, DeviceTensor):
            value.check_current()
            return Tensor(value.view, tuple(value.shape), str(value.dtype))
        if isinstance(value, Tensor):
            return value
        if isinstance(value, ShapeValue):  # an R.Shape argument is a value of the shape heap, not a tensor
            return value
        if isinstance(value, (tuple, list)) and sinfo.get("kind") == "shape":
            return tuple(value)  # not a tensor either: the parameter's match refuses it and says what to pass
        if isinstance(value, (tuple, list)) and sinfo.get("kind") == "tuple":
            return tuple(self.upload(v, f, blocks) for v, f in zip(value, sinfo["fields"])) + \
                tuple(self.upload(v, {}, blocks) for v in value[len(sinfo["fields"]):])
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            return int(value)
        if isinstance(value, FunctionRef):
            return value
        if isinstance(value, str) and value in self._records:
            return FunctionRef(value)
        array = np.asarray(value)
        if array.dtype == object:
            raise RuntimeCheckError(f"cannot pass {type(value).__name__} to the VM")
        dtype = str(array.dtype)
        data = to_device(array, dtype)
        block = self.pool.take(len(data), on)
        blocks.append(block)
        self.device.upload(block.buffer, 0, data)
        return Tensor(View(block.buffer, 0, len(data)), tuple(array.shape), dtype, block)

    def to_host(self, value):
        if isinstance(value, Tensor):
            if 0 in value.shape:  # nothing to read (and a device may refuse an empty read)
                return np.zeros(value.shape, value.dtype)
            return from_device(self.device.read_back(value.view), value.shape, value.dtype)
        if isinstance(value, ShapeValue):
            return value
        if isinstance(value, tuple):
            return tuple(self.to_host(v) for v in value)
        return value

    # -- a call ----------------------------------------------------------------------------------

    def call(self, name: str, args: list) -> tuple[object, list[Block]]:
        """Run ``name`` on run-time values: (its result, the pool blocks the result holds, now the caller's).

        Calls inside the program push frames on a stack of this loop rather than recursing in Python,
        so a deep recursion in the program is bounded by MAX_CALL_DEPTH, not by Python's stack."""
        stack = [self._enter(name, args)]
        try:
            while True:
                frame = stack[-1]
                op = self._run(frame)
                if op["op"] == "call":
                    if len(stack) >= MAX_CALL_DEPTH:
                        raise RuntimeCheckError(f"calls nested deeper than {MAX_CALL_DEPTH} (runaway recursion in "
                                                f"{frame.record.name}?)")
                    stack.append(self._enter(self._callee(frame, op), [self._get(frame, r) for r in op["args"]]))
                    continue
                result = self._get(frame, op["src"])  # a ret
                kept = _blocks_of(result)
                for block in frame.owned:
                    if block not in kept:
                        self.pool.give(block)
                handed = [b for b in frame.owned if b in kept]
                stack.pop()
                if not stack:
                    return result, handed
                caller = stack[-1]
                caller.owned.extend(handed)
                caller.regs[caller.record.code[caller.pc - 1]["dst"]] = result
        except BaseException:
            for frame in stack:
                for block in frame.owned:
                    self.pool.give(block)
            raise

    def _enter(self, name: str, args: list) -> _Frame:
        record = self._records.get(name)
        if record is None:
            raise RuntimeCheckError(f"the executable has no function '{name}'")
        inputs = record.inputs
        if len(args) != len(inputs):
            names = ", ".join(p["name"] for p in inputs)
            raise RuntimeCheckError(f"{name} takes {len(inputs)} arguments ({names}), got {len(args)}")
        frame = _Frame(record)
        for param, value in zip(inputs, args):
            frame.regs[param["register"]] = value
        for param in record.state:
            tensor = record.tensors[param["register"]]
            nbytes = evaluate(tensor["bytes"], record.bounds)
            buffer = self.storage.state_buffer(param["name"], nbytes, tensor.get("device", 0))
            frame.regs[param["register"]] = Tensor(View(buffer, 0, nbytes), tuple(
                evaluate(d, record.bounds) for d in tensor["shape"]), tensor["dtype"])
        return frame

    def _callee(self, frame: _Frame, op: dict) -> str:
        if "func" in op:
            return op["func"]
        ref = self._get(frame, op["callee"])
        if not isinstance(ref, FunctionRef):
            raise RuntimeCheckError(f"{frame.record.name} calls a {type(ref).__name__}, not a function")
        return ref.name

    def _run(self, frame: _Frame) -> dict:
        """Run ``frame`` from its ``pc`` up to its next ``call`` or its ``ret``, which it returns."""
        record, code = frame.record, frame.record.code
        pc = frame.pc
        while True:
            op = code[pc]
            pc += 1
            kind = op["op"]
            if kind == "launch":
                self._launch(frame, op)
            elif kind == "match":
                self._match(frame, pc - 1, op)
            elif kind == "to_device":
                source, destination = self._get(frame, op["src"]), self._get(frame, op["dst"])
                if not (isinstance(source, Tensor) and isinstance(destination, Tensor)):
                    raise RuntimeCheckError(f"{record.name}: instruction {pc - 1} copies a {type(source).__name__} "
                                            f"into a {type(destination).__name__}; to_device copies tensors")
                check_copy(source.view, destination.view, record.name)
                self.device.copy(source.view, destination.view)
            elif kind == "alloc_storage":
                block = self.pool.take(evaluate(op["size"], frame.heap), op.get("device", 0))
                frame.owned.append(block)
                frame.regs[op["dst"]] = block
            elif kind == "alloc_tensor":
                shape = tuple(evaluate(d, frame.heap) for d in op["shape"])
                nbytes = device_bytes(int(np.prod(shape, dtype=np.int64)), op["dtype"])
                block = self.pool.take(nbytes, op.get("device", 0))
                frame.owned.append(block)
                frame.regs[op["dst"]] = Tensor(View(block.buffer, 0, nbytes), shape, op["dtype"], block)
            elif kind == "call_builtin":
                self._builtin(frame, op)
            elif kind in ("call", "ret"):
                frame.pc = pc
                return op
            elif kind == "func":
                frame.regs[op["dst"]] = FunctionRef(op["name"])
            elif kind == "if":
                if not self._truth(frame, op["cond"]):
                    pc = op["else"]
            elif kind == "goto":
                pc = op["target"]
            elif kind == "prim":
                frame.regs[op["dst"]] = evaluate(op["value"], frame.heap)
            elif kind == "move":
                frame.regs[op["dst"]] = self._get(frame, op["src"])
            elif kind == "tuple":
                frame.regs[op["dst"]] = tuple(self._get(frame, r) for r in op["fields"])
            elif kind == "get":
                value = self._get(frame, op["src"])
                if not isinstance(value, tuple) or isinstance(value, ShapeValue) or op["index"] >= len(value):
                    fields = len(value) if isinstance(value, tuple) else 0
                    raise RuntimeCheckError(f"{record.name}: instruction {pc - 1} takes field {op['index']} of a "
                                            f"{type(value).__name__} of {fields} fields")
                frame.regs[op["dst"]] = value[op["index"]]
            elif kind == "shape":
                frame.regs[op["dst"]] = ShapeValue(evaluate(v, frame.heap) for v in op["values"])
            else:
                raise RuntimeCheckError(f"{record.name}: unknown instruction {kind!r} (a newer executable format?)")

    def _get(self, frame: _Frame, reg: int):
        value = frame.regs[reg]
        if value is not None:
            return value
        loc = frame.record.locations.get(reg)
        if loc is None:
            raise RuntimeCheckError(f"{frame.record.name}: register {reg} is read before it is written")
        tensor = frame.record.tensors[reg]
        shape = tuple(evaluate(d, frame.heap) for d in tensor["shape"])
        nbytes = evaluate(tensor["bytes"], frame.heap)
        block = None
        if loc["kind"] == "constant":
            view = View(self.storage.constant(loc["name"], tensor.get("device", 0)), 0,
                        self.storage.constant_bytes[loc["name"]])
        elif loc["kind"] == "arena":
            buffer, offset = self._arena(frame.record)[loc["token"]]
            view = View(buffer, offset, nbytes)
        elif loc["kind"] == "storage":
            block = frame.regs[loc["register"]]
            view = View(block.buffer, 0, nbytes)
        else:
            raise RuntimeCheckError(f"{frame.record.name}: register {reg} ({loc['kind']}) has no value")
        value = frame.regs[reg] = Tensor(view, shape, tensor["dtype"], block)
        return value

    def _arena(self, record: _Record) -> dict[int, tuple[object, int]]:
        """A function's arena, made on its first call: it is not recursive, so one serves every call."""
        arena = self._arenas.get(record.name)
        if arena is None:
            memory = record.record["memory"]
            buffers = arena_buffers(self.device, memory, f"arena buffer of {record.name}:")
            arena = self._arenas[record.name] = {
                s["index"]: (buffers[s["buffer"]], s["offset"]) for s in memory["storages"] if s["buffer"] is not None}
        return arena

    def _match(self, frame: _Frame, index: int, op: dict) -> None:
        value = self._get(frame, op["reg"])
        sinfo = frame.record.sinfo(index, op)
        bind_value(sinfo, value, frame.heap)
        check_value(value, sinfo, frame.heap, op["what"])
        for name, bound in frame.record.bounds.items():
            if bound is not None and frame.heap.get(name, 0) > bound:
                raise RuntimeCheckError(f"{frame.record.name}: {name} = {frame.heap[name]} exceeds its upper bound "
                                        f"{bound}, for which memory was planned")

    def _launch(self, frame: _Frame, op: dict) -> None:
        kernel = self.exe.kernels[op["kernel"]]
        views = []
        for reg in op["args"] + op["outs"]:
            tensor = self._get(frame, reg)
            if not isinstance(tensor, Tensor):
                raise RuntimeCheckError(f"{frame.record.name}: kernel {kernel['name']} is given a "
                                        f"{type(tensor).__name__}, not a tensor")
            view = tensor.view
            views.append(view if view.nbytes >= 4 else View(view.buffer, view.offset, 4))
        scalars = [evaluate(s, frame.heap) for s in op["scalars"]]
        env = dict(zip((s["name"] for s in kernel["abi"]["scalars"]), scalars))
        grid = [evaluate(g, env) for g in kernel["grid"]]
        check_launch(kernel, scalars, grid)
        if min(grid) <= 0:
            return
        key = (op["kernel"], tuple(views))
        bound = self._bindings.get(key)
        if bound is None:
            bound = self._bindings[key] = self.device.bind(self.kernels[op["kernel"]], views)
            if len(self._bindings) > BIND_CACHE_SIZE:
                self._bindings.popitem(last=False)
        else:
            self._bindings.move_to_end(key)
        self.device.launch(bound, scalars, grid)

    def _builtin(self, frame: _Frame, op: dict) -> None:
        """A host function in destination-passing style: inputs read back, outputs written after."""
        fn = self.libraries.get(op["name"])
        if fn is None:
            raise RuntimeCheckError(f"{frame.record.name} calls the library function '{op['name']}', which is not "
                                    "registered (VirtualMachine(exe, libraries={...}))")
        inputs = [self.to_host(self._get(frame, r)) for r in op["args"]]
        outs = [self._get(frame, r) for r in op["outs"]]
        arrays = [np.zeros(t.shape, t.dtype) for t in outs]
        scalars = [evaluate(s, frame.heap) for s in op["scalars"]]
        try:
            returned = fn(*inputs, *arrays, *scalars)
        except RuntimeCheckError:
            raise
        except Exception as error:  # a user's library: report it as the program's error, with its name
            raise RuntimeCheckError(f"library function '{op['name']}' failed: {type(error).__name__}: {error}") \
                from error
        for tensor, array in zip(outs, arrays):
            self.device.upload(tensor.view.buffer, tensor.view.offset, to_device(array, tensor.dtype))
        if op.get("dst") is not None:
            if isinstance(returned, (int, np.integer)):
                frame.regs[op["dst"]] = int(returned)
            else:
                frame.regs[op["dst"]] = self.upload(returned, {}, frame.owned)

    def _truth(self, frame: _Frame, reg: int) -> bool:
        value = self._get(frame, reg)
        if isinstance(value, Tensor):
            if int(np.prod(value.shape, dtype=np.int64)) != 1:
                raise RuntimeCheckError(f"{frame.record.name}: a branch condition must have one element, got shape "
                                        f"{value.shape}")
            value = self.to_host(value).reshape(-1)[0]
        return bool(value)


class _Record:
    """A function record with what the interpreter looks up on every call, read once."""

    def __init__(self, name: str, record: dict):
        self.name, self.record, self.code = name, record, record["code"]
        self.inputs = [p for p in record["params"] if not p.get("state")]
        self.state = [p for p in record["params"] if p.get("state")]
        self.bounds = {s: v["upper_bound"] for s, v in record["symbols"].items() if v["upper_bound"] is not None}
        self.locations = {int(r): loc for r, loc in record["locations"].items()}
        self.tensors = {int(r): t for r, t in record["tensors"].items()}
        self._sinfos: dict[int, object] = {}

    def sinfo(self, index: int, op: dict):
        sinfo = self._sinfos.get(index)
        if sinfo is None:
            sinfo = self._sinfos[index] = sinfo_from_json(op["sinfo"])
        return sinfo


class _Frame:
    def __init__(self, record: _Record):
        self.record = record
        self.regs: list = [None] * record.record["registers"]
        self.heap: dict[str, int] = {}
        self.owned: list[Block] = []
        self.pc = 0  # where the frame goes on after a call returns


def _blocks_of(value) -> set:
    if isinstance(value, Tensor):
        return {value.block} if value.block is not None else set()
    if isinstance(value, tuple) and not isinstance(value, ShapeValue):
        found: set = set()
        for item in value:
            found |= _blocks_of(item)
        return found
    return set()
