"""WebAssembly through wasmtime: the kernels of a ``c-wasm`` module run on this CPU.

The module imports its linear memory; every buffer lives in that one memory, above the module's
``__heap_base``, at 256-byte aligned addresses (the arena's offsets are 256-aligned too). A freed
buffer is reused by a later allocation of the same size. Launches run at once, in order: a kernel
export takes the buffers' addresses, the scalars and the grid (codegen/c).
"""

from __future__ import annotations

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
            self.end = max(self.end, base)
            self.instances[path] = exports
        return self.instances[path]

    def bind(self, kernel, views: list[View]):
        return kernel, [v.buffer.address + v.offset for v in views]

    def launch(self, bound, scalars: list[int], grid: list[int]) -> None:
        kernel, addresses = bound
        if min(grid) <= 0:
            return
        kernel(self.store, *addresses, *(int(s) for s in scalars), *(int(g) for g in grid))
