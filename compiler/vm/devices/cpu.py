"""This machine's CPU: the kernels of a ``c-native`` module (``kernels.so``) called through ctypes.

Buffers are host memory (64-byte aligned numpy arrays, zeroed like every GPU buffer). A module's
bytes (checked against their SHA-256 when the executable was loaded) are written to a private file
and loaded with dlopen, once per process for each digest; before that the ELF header must name this
machine's architecture, since loading another's fails with an unhelpful message or not at all.
A launch calls the kernel's entry over its workgroup range (docs/format.md, "c-native"); with
``threads`` > 1 the range is split across a pool (ctypes releases the GIL during the call), and
launches still run at once, in order. A bound kernel keeps its address array from bind time and the
scalar array of its last launch, so a model called at one shape builds no ctypes array per call.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...target import SHADER_F16, Target
from . import Device, DeviceError, View

ALIGN = 64
# ELF e_machine values of the architectures a c-native module may be built for (and a few others,
# to name them in a message).
ELF_MACHINES = {3: "i386", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv64"}
_KERNEL_ARGS = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int64,
                ctypes.c_int64]


class CPUBuffer:
    def __init__(self, nbytes: int):
        # Over-allocate and slice to an aligned start: kernels' vector loads like aligned rows.
        raw = np.zeros(nbytes + ALIGN, np.uint8)
        start = -raw.ctypes.data % ALIGN
        self.array = raw[start:start + nbytes]
        self.address = self.array.ctypes.data
        self.size = nbytes

    def __repr__(self) -> str:
        return f"CPUBuffer(0x{self.address:x}, {self.size})"


class CPUDevice(Device):
    kind = "cpu"
    backends = ("c-native",)
    cpu_adapter = True
    features = frozenset({SHADER_F16})  # f16 tensors are halves computed as float

    _libraries: dict[str, ctypes.CDLL] = {}  # module sha256 -> the loaded library, for every device
    _lock = threading.Lock()

    def __init__(self, threads: int | None = None):
        """``threads``: how many threads share a launch's workgroups (default: $TESSERA_CPU_THREADS, else 1)."""
        self.name = f"CPU ({_cpu_model()})"
        self.threads = max(1, threads or int(os.environ.get("TESSERA_CPU_THREADS", "1")))
        self._pool = ThreadPoolExecutor(self.threads - 1) if self.threads > 1 else None
        self.buffers_created = 0  # every allocate call: the tests count what a call allocates

    def limit(self, name: str) -> int | None:
        return {"maxBufferSize": 1 << 31, "maxStorageBufferBindingSize": 1 << 31}.get(name)

    def target(self) -> Target:
        return Target.preset("cpu")

    # -- memory --------------------------------------------------------------------------------

    def allocate(self, nbytes: int) -> CPUBuffer:
        self.buffers_created += 1
        return CPUBuffer(max(nbytes, 4))

    def upload(self, buffer: CPUBuffer, offset: int, data: bytes) -> None:
        if offset + len(data) > buffer.size:
            raise DeviceError(f"an upload of {len(data)} bytes at {offset} overruns a buffer of {buffer.size}")
        buffer.array[offset:offset + len(data)] = np.frombuffer(data, np.uint8)

    def fill_zero(self, buffer: CPUBuffer, nbytes: int) -> None:
        buffer.array[:nbytes] = 0

    def read_back(self, view: View) -> bytes:
        return view.buffer.array[view.offset:view.offset + view.nbytes].tobytes()

    def copy(self, source: View, destination: View) -> None:
        data = source.buffer.array[source.offset:source.offset + source.nbytes]
        destination.buffer.array[destination.offset:destination.offset + source.nbytes] = data

    # -- kernels -------------------------------------------------------------------------------

    def load_kernels(self, kernels: list[dict], modules: dict[str, bytes]) -> list:
        return [self._entry(self._library(k["module"], modules[k["module"]]), k) for k in kernels]

    def _library(self, path: str, data: bytes) -> ctypes.CDLL:
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            library = self._libraries.get(digest)
            if library is None:
                check_machine_code(path, data)
                library = self._libraries[digest] = _dlopen(data, digest)
        return library

    @staticmethod
    def _entry(library: ctypes.CDLL, record: dict):
        try:
            fn = getattr(library, record["entry_point"])
        except AttributeError:
            raise DeviceError(f"kernel {record['name']}: {record['module']} exports no {record['entry_point']}") \
                from None
        fn.argtypes, fn.restype = _KERNEL_ARGS, None
        return fn

    def bind(self, kernel, views: list[View]):
        addresses = (ctypes.c_void_p * max(len(views), 1))(*(v.buffer.address + v.offset for v in views))
        return _Bound(kernel, addresses, views)

    def launch(self, bound, scalars: list[int], grid: list[int]) -> None:
        key = (*scalars, *grid)
        if key != bound.last:  # a new shape: rebuild the scalar array; the same one reuses it
            x, y, z = (int(g) for g in grid)
            bound.values = (ctypes.c_int32 * max(len(scalars), 1))(*(int(s) for s in scalars))
            bound.grid, bound.last = (x, y, z, x * y * z), key
        fn, addresses, values = bound.fn, bound.addresses, bound.values
        x, y, z, total = bound.grid
        if total <= 0:
            return
        if self._pool is None or total < 2 * self.threads:
            fn(addresses, values, x, y, z, 0, total)
            return
        bounds = [total * i // self.threads for i in range(self.threads + 1)]
        pending = [self._pool.submit(fn, addresses, values, x, y, z, bounds[i], bounds[i + 1])
                   for i in range(1, self.threads)]
        fn(addresses, values, x, y, z, bounds[0], bounds[1])
        for future in pending:
            future.result()


class _Bound:
    """A kernel with its buffer addresses (built at bind time) and the scalar array of its last launch."""

    __slots__ = ("fn", "addresses", "views", "values", "grid", "last")

    def __init__(self, fn, addresses, views: list[View]):
        self.fn, self.addresses = fn, addresses
        self.views = views  # they keep their buffers alive while bound
        self.values, self.grid, self.last = None, (0, 0, 0, 0), None


def check_machine_code(path: str, data: bytes) -> None:
    """Raise DeviceError unless ``data`` is a 64-bit ELF shared object for this machine."""
    if data[:4] != b"\x7fELF" or len(data) < 20:
        raise DeviceError(f"{path} is not an ELF shared object: the cpu device loads c-native modules on Linux")
    endian = "little" if data[5] == 1 else "big"
    machine = int.from_bytes(data[18:20], endian)
    host = host_elf_machine()
    if machine != host:
        name = ELF_MACHINES.get(machine, f"ELF machine {machine}")
        raise DeviceError(f"{path} holds {name} machine code; this machine is {platform.machine()}: compile the "
                          "model for it (`tessera compile MODEL --target cpu`)")


def host_elf_machine() -> int | None:
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return next((number for number, name in ELF_MACHINES.items() if name == machine), None)


def _dlopen(data: bytes, digest: str) -> ctypes.CDLL:
    # dlopen wants a file: a private one, removed once mapped (the mapping stays valid).
    fd, path = tempfile.mkstemp(prefix=f"tessera-{digest[:16]}-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            return ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        except OSError as error:  # a CPU feature the loader checks, a missing libm ...
            raise DeviceError(f"cannot load the CPU kernels: {error}") from None
    finally:
        os.unlink(path)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()
