"""Devices behind one small interface: what the VM's storage and program layers ask of hardware.

A device allocates buffers, uploads and reads back bytes, copies between buffers, loads the
kernels of an executable from their module files, binds a kernel to buffer views once, and
launches bound kernels with scalar values and a grid. Launches are queued in order; ``read_back``
and ``synchronize`` wait for what was queued. A device kind registers a factory here; the VM
opens one whose kind runs the executable's backends (docs/architecture.md).

    class MyDevice(Device):
        kind = "numpy"
        backends = ("numpy",)
        ...
    register_device("numpy", MyDevice)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...ir.errors import TesseraError
from ...target import LIMIT_DEFAULTS, REQUIRED_LIMITS, Target
from ..plan_checks import MOST_WORKGROUPS, WORD_BYTES, DeviceFit, check_device_fit


class DeviceError(TesseraError):
    """The device lacks a feature or limit the executable needs, or none can run it."""


@dataclass(frozen=True)
class View:
    """Bytes ``offset`` .. ``offset + nbytes`` of a device buffer."""

    buffer: object
    offset: int
    nbytes: int


class Device:
    kind: str = ""
    backends: tuple[str, ...] = ()  # codegen backends whose modules it runs
    name: str = ""  # the adapter or machine, for people
    features: frozenset[str] = frozenset()
    cpu_adapter: bool = False  # a CPU standing in for a GPU (llvmpipe, lavapipe, PoCL)
    loop_budget: int = 0  # the most loop iterations an invocation may run (Target.loop_budget); 0: no bound

    # -- what the executable needs -------------------------------------------------------------

    def limit(self, name: str) -> int | None:
        """The device's value of a limit (docs/format.md names), None when it has no such limit."""
        return None

    def target(self) -> Target:
        """The target whose kernels this device runs best: its kind with the device's own features
        and limits (the kernel runners compile for it)."""
        limits = {name: self.limit(name) for name in LIMIT_DEFAULTS if self.limit(name)}
        return Target(self.kind, self.features, limits, name=self.name, cpu_adapter=self.cpu_adapter,
                      loop_budget=self.loop_budget)

    def fit(self) -> list[DeviceFit]:
        """What this device asks of a plan and its launches, per device of an executable (one here). A device
        that states no storage alignment still reads words; one that states no workgroup limit takes a grid
        as 32-bit integers."""
        return [DeviceFit(self.limit("minStorageBufferOffsetAlignment") or WORD_BYTES,
                          self.limit("maxComputeWorkgroupsPerDimension") or MOST_WORKGROUPS, f"{self.kind} device")]

    def check(self, exe) -> None:
        """Raise DeviceError naming the first backend, feature or limit ``exe`` needs and this lacks, or the
        first storage offset or launch grid of its plan this device cannot take."""
        self.check_requirements(exe)
        check_device_fit(exe, self.fit(), "executable.json", DeviceError)

    def check_requirements(self, exe) -> None:
        """Raise DeviceError naming the first backend, feature or limit ``exe`` needs and this lacks."""
        for backend in exe.backends:
            if backend not in self.backends:
                raise DeviceError(f"the {self.kind} device runs {', '.join(self.backends)} kernels; this executable's "
                                  f"are {backend} (built for target {exe.target.get('name')!r})")
        for feature in exe.required_features:
            if feature not in self.features:
                raise DeviceError(f"the device lacks the feature {feature!r} this executable's kernels use")
        for key in REQUIRED_LIMITS:
            need, have = exe.required_limits.get(key, 0), self.limit(key)
            if have is not None and need > have:
                raise DeviceError(f"the executable needs {key} = {need}, the device allows {have}")

    # -- memory --------------------------------------------------------------------------------

    def allocate(self, nbytes: int) -> object:
        raise NotImplementedError

    def allocate_with(self, data: bytes) -> object:
        buffer = self.allocate(len(data))
        self.upload(buffer, 0, data)
        return buffer

    def free(self, buffer) -> None:
        """Give a buffer back (devices with a garbage-collected API may do nothing)."""

    def upload(self, buffer, offset: int, data: bytes) -> None:
        raise NotImplementedError

    def fill_zero(self, buffer, nbytes: int) -> None:
        self.upload(buffer, 0, bytes(nbytes))

    def read_back(self, view: View) -> bytes:
        """The bytes of ``view`` once every queued launch and copy has run."""
        raise NotImplementedError

    def copy(self, source: View, destination: View) -> None:
        raise NotImplementedError

    # -- kernels -------------------------------------------------------------------------------

    def load_kernels(self, kernels: list[dict], modules: dict[str, bytes]) -> list:
        """A handle per kernel record of the executable, from the module files."""
        raise NotImplementedError

    def bind(self, kernel, views: list[View]) -> object:
        """``kernel`` bound to the views of its bindings (in ABI order), reusable across launches."""
        raise NotImplementedError

    def launch(self, bound, scalars: list[int], grid: list[int]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Start what is queued without waiting for it (a call ends with this)."""

    def synchronize(self) -> None:
        """Wait until everything queued has run."""

    def timed_launch(self, bound, scalars: list[int], grid: list[int]) -> float:
        """Seconds one launch takes; devices with GPU timestamps measure on the device."""
        import time

        self.synchronize()
        start = time.perf_counter()
        self.launch(bound, scalars, grid)
        self.synchronize()
        return time.perf_counter() - start


_DEVICES: dict[str, tuple[Callable[[], Device], tuple[str, ...]]] = {}


def register_device(kind: str, factory: Callable[[], Device], backends: tuple[str, ...]) -> None:
    """``factory()`` opens a device of ``kind``, which runs the modules of ``backends``."""
    _DEVICES[kind] = (factory, tuple(backends))


def device_kinds() -> dict[str, tuple[str, ...]]:
    """Every registered device kind with the backends it runs."""
    return {kind: backends for kind, (_, backends) in _DEVICES.items()}


def open_device(kind: str) -> Device:
    if kind not in _DEVICES:
        raise DeviceError(f"no device of kind {kind!r} is registered; known: {', '.join(sorted(_DEVICES))}")
    return _DEVICES[kind][0]()


def device_for(exe, kind: str | None = None) -> Device:
    """A device that runs every kernel of ``exe``: ``kind`` if given, else the first registered kind
    whose backends cover the executable's. A build split across devices (format version 4) gets one
    device per entry of its ``devices``, behind a SplitDevice (``kind``, if given, must be one of them)."""
    if getattr(exe, "devices", None):
        from .split import SplitDevice

        names = [d["vdevices"][0] for d in exe.devices]
        if kind is not None and kind not in [d["kind"] for d in exe.devices]:
            raise DeviceError(f"this executable is split across {', '.join(names)}, not a {kind} device: the VM "
                              "opens one device of each kind")
        return SplitDevice([open_device(d["kind"]) for d in exe.devices], names)
    if kind is not None:
        return open_device(kind)
    needed = set(exe.backends)
    for candidate, (_, backends) in _DEVICES.items():
        if needed <= set(backends):
            return open_device(candidate)
    raise DeviceError(f"no device here runs {', '.join(sorted(needed))} kernels (devices: "
                      + ", ".join(f"{k} runs {', '.join(b)}" for k, (_, b) in _DEVICES.items()) + ")")


def _register_builtin() -> None:
    # Opened lazily: wgpu, wasmtime, libvulkan, pyopencl and kernel libraries load only when a device of
    # their kind is asked for.
    def webgpu():
        from .webgpu import WebGPUDevice

        return WebGPUDevice.shared()

    def wasm():
        from .wasm import WasmDevice

        return WasmDevice()

    def vulkan():
        from .vulkan import VulkanDevice

        return VulkanDevice.shared()

    def opencl():
        from .opencl import OpenCLDevice

        return OpenCLDevice.shared()

    def cpu():
        from .cpu import CPUDevice

        return CPUDevice()

    register_device("webgpu", webgpu, ("wgsl",))
    register_device("wasm", wasm, ("c-wasm",))
    register_device("vulkan", vulkan, ("spirv",))
    register_device("opencl", opencl, ("opencl",))
    register_device("cpu", cpu, ("c-native",))


_register_builtin()
