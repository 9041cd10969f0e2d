"""WebAssembly through wasmtime: the kernels of a ``c-wasm`` module run on this CPU.

The module imports its linear memory; every buffer lives in that one memory, above the module's
``__heap_base``, at 256-byte aligned addresses (the arena's offsets are 256-aligned too). A freed
buffer is reused by a later allocation of the same size. Launches run at once, in order: a kernel
export takes the buffers' addresses, the scalars and the grid (codegen/c), all i32.

A bound kernel holds its argument array, the addresses filled in once at bind time; a launch
writes the scalars and grid only when they differ from the last launch's and calls the export
through wasmtime's C API. wasmtime-py's ``Func.__call__`` asks for the function's type and
converts every argument on each call, which costs more than a small kernel runs (a CNN's launch
is a few microseconds). Where the wasmtime package lacks the C entry points used here, launches
take the public call.
"""

from __future__ import annotations

import ctypes

from ...target import SHADER_F16
from . import Device, DeviceError, View

PAGE = 65536
ALIGN = 256


class WasmBuffer:
    def __init__(self, address: int, size: int):
        self.address, self.size = address, size

    def __repr__(self) -> str:
        return f"WasmBuffer(0x{self.address:x}, {self.size})"


class WasmDevice(Device):
    kind = "wasm"
    backends = ("c-wasm",)
    name = "WebAssembly (wasmtime)"
    features = frozenset({SHADER_F16})  # f16 tensors are halves computed as floats (codegen/c)

    def __init__(self, engine=None, compiled: dict | None = None):
        """``engine`` and ``compiled`` (module bytes -> wasmtime.Module) may be shared by devices."""
        try:
            import wasmtime
        except ImportError as error:
            raise DeviceError(f"the wasm device needs wasmtime (pip install wasmtime): {error}") from None
        self.wt = wasmtime
        self.engine = engine or wasmtime.Engine()
        self.compiled = {} if compiled is None else compiled
        self.store = wasmtime.Store(self.engine)
        self.memory = None
        self.instances: dict[str, object] = {}  # module path -> exports
        # The module's stack pointer and where it rests between calls: a trap skips the kernel's epilogue,
        # so after one it is put back (else trap after trap it walks off the stack, and every call traps).
        self.stack_pointer, self.stack_top = None, 0
        self.end = 0  # the first free address
        self._free: dict[int, list[WasmBuffer]] = {}
        self.buffers_created = 0  # every allocate call: the tests count what a call allocates

    def limit(self, name: str) -> int | None:
        return {"maxBufferSize": 1 << 31, "maxStorageBufferBindingSize": 1 << 31}.get(name)

    # -- memory --------------------------------------------------------------------------------

    def _ensure_memory(self, pages: int = 1) -> None:
        if self.memory is None:
            wt = self.wt
            self.memory = wt.Memory(self.store, wt.MemoryType(wt.Limits(pages, None)))
            self.end = pages * PAGE

    def allocate(self, nbytes: int) -> WasmBuffer:
        self.buffers_created += 1
        size = (max(nbytes, 4) + ALIGN - 1) // ALIGN * ALIGN
        reusable = self._free.get(size)
        if reusable:  # zeroed, as fresh memory (and every WebGPU buffer) is
            buffer = reusable.pop()
            self.memory.write(self.store, bytes(size), buffer.address)
            return buffer
        self._ensure_memory()
        address = (self.end + ALIGN - 1) // ALIGN * ALIGN
        self.end = address + size
        grow = -(-self.end // PAGE) - self.memory.size(self.store)
        if grow > 0:
            if self.end > 1 << 32:
                raise DeviceError(f"the wasm device's memory cannot hold {self.end} bytes (4 GiB at most)")
            self.memory.grow(self.store, grow)
        return WasmBuffer(address, size)

    def free(self, buffer: WasmBuffer) -> None:
        self._free.setdefault(buffer.size, []).append(buffer)

    def upload(self, buffer: WasmBuffer, offset: int, data: bytes) -> None:
        if offset + len(data) > buffer.size:
            raise DeviceError(f"an upload of {len(data)} bytes at {offset} overruns a buffer of {buffer.size}")
        self.memory.write(self.store, bytes(data), buffer.address + offset)

    def read_back(self, view: View) -> bytes:
        start = view.buffer.address + view.offset
        return bytes(self.memory.read(self.store, start, start + view.nbytes))

    def copy(self, source: View, destination: View) -> None:
        self.upload(destination.buffer, destination.offset, self.read_back(source))

    # -- kernels -------------------------------------------------------------------------------

    def load_kernels(self, kernels: list[dict], modules: dict[str, bytes]) -> list:
        return [self._exports(k["module"], modules[k["module"]])[k["entry_point"]] for k in kernels]

    def _exports(self, path: str, data: bytes):
        if path not in self.instances:
            wt = self.wt
            module = self.compiled.get(data)
            if module is None:
                module = self.compiled[data] = wt.Module(self.engine, data)
            (wanted,) = [i.type for i in module.imports if i.name == "memory"]  # the pages its stack and statics need
            if self.memory is None:
                self._ensure_memory(wanted.limits.min)
            elif self.instances or self.end > PAGE:
                # Below __heap_base the module keeps its stack and statics: nothing else may live there.
                raise DeviceError("the wasm device loads one kernel module, before any buffer is allocated")
            instance = wt.Instance(self.store, module, [self.memory])
            exports = instance.exports(self.store)
            base = exports["__heap_base"].value(self.store)
            self.stack_pointer = exports.get("__stack_pointer")  # builds before it was exported have none
            if self.stack_pointer is not None:
                self.stack_top = self.stack_pointer.value(self.store)
            self.end = max(self.end, base)
            self.instances[path] = exports
        return self.instances[path]

    def bind(self, kernel, views: list[View]):
        addresses = [v.buffer.address + v.offset for v in views]
        ffi = _c_api()
        if ffi is None:
            return _PublicCall(kernel, addresses)
        return _BoundExport(ffi, self.store, kernel, addresses)

    def launch(self, bound, scalars: list[int], grid: list[int]) -> None:
        if min(grid) <= 0:
            return
        try:
            bound(self.store, scalars, grid)
        except Exception:
            if self.stack_pointer is not None:
                self.stack_pointer.set_value(self.store, self.stack_top)
            raise


class _PublicCall:
    """A launch through wasmtime-py's ``Func.__call__``: every argument converted on each call."""

    def __init__(self, kernel, addresses: list[int]):
        self.kernel, self.addresses = kernel, addresses

    def __call__(self, store, scalars, grid) -> None:
        self.kernel(store, *self.addresses, *(_i32(s) for s in scalars), *(_i32(g) for g in grid))


class _BoundExport:
    """A kernel export with its i32 argument array built once: the addresses at bind time, the scalars
    and grid rewritten when a launch's differ from the last one's."""

    def __init__(self, ffi, store, kernel, addresses: list[int]):
        params = kernel.type(store).params
        self.ffi, self.base = ffi, len(addresses)
        if self.base + 3 > len(params):
            raise DeviceError(f"a kernel export takes {len(params)} arguments, fewer than its {self.base} buffers "
                              "and a grid")
        self.count = len(params)
        self.values = (ffi.wasmtime_val_t * self.count)()
        for index in range(self.count):
            self.values[index].kind = ffi.WASMTIME_I32.value
        for index, address in enumerate(addresses):
            self.values[index].of.i32 = _i32(address)
        self.last: tuple | None = None  # the scalars and grid the array holds
        self.context = store._context()
        self.func = ctypes.byref(kernel._func)
        self.trap = ctypes.POINTER(ffi.wasm_trap_t)()
        self.trap_ref = ctypes.byref(self.trap)
        self.store = store  # the context pointer lives as long as the store

    def __call__(self, store, scalars, grid) -> None:
        key = (*scalars, *grid)
        if key != self.last:
            if self.base + len(key) != self.count:
                raise DeviceError(f"a kernel export takes {self.count} arguments; this launch gives "
                                  f"{self.base} buffers, {len(scalars)} scalars and a grid of {len(grid)}")
            values = self.values
            for index, value in enumerate(key, self.base):
                values[index].of.i32 = _i32(value)
            self.last = key
        ffi = self.ffi
        error = ffi.wasmtime_func_call(self.context, self.func, self.values, self.count, None, 0, self.trap_ref)
        if error or self.trap:
            import wasmtime

            message = str(wasmtime.WasmtimeError._from_ptr(error)) if error else \
                wasmtime.Trap._from_ptr(self.trap).message
            self.trap = ctypes.POINTER(ffi.wasm_trap_t)()
            self.trap_ref = ctypes.byref(self.trap)
            raise DeviceError(f"a WebAssembly kernel trapped: {message}")


def _i32(value: int) -> int:
    """``value`` (an address below 4 GiB, a scalar or a workgroup count) as the signed i32 wasm passes."""
    value = int(value)
    return value - (1 << 32) if value >= 1 << 31 else value


_FFI: list = []


def _c_api():
    """wasmtime's ctypes bindings when they have what ``_BoundExport`` calls, else None."""
    if not _FFI:
        try:
            from wasmtime import _ffi as ffi

            wanted = ("wasmtime_func_call", "wasmtime_val_t", "WASMTIME_I32", "wasm_trap_t")
            _FFI.append(ffi if all(hasattr(ffi, name) for name in wanted) else None)
        except ImportError:
            _FFI.append(None)
    return _FFI[0]
