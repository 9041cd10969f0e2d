"""OpenCL through pyopencl (PoCL on a machine without a GPU; the vendor's driver on a phone or GPU).

One device per process (``OpenCLDevice.shared()``): building programs is slow, so they are cached
by source. ``TESSERA_OPENCL_DEVICE`` picks a device by index (in the order of platforms, then their
devices) or by a substring of its or its platform's name; otherwise a GPU is preferred to a CPU.

Launches go to one in-order command queue (with profiling, for ``timed_launch``). A buffer view at
an offset is a sub-buffer, which OpenCL allows only at offsets that are multiples of the device's
base address alignment (``minStorageBufferOffsetAlignment``, which the memory plan honours). A
bound kernel is its own ``cl.Kernel``: arguments live on the kernel object, so each binding owns
one with its buffers set once, and a launch sets only the scalars (the arguments after them).
"""

from __future__ import annotations

import os

import numpy as np

from ...target import SHADER_F16
from . import Device, DeviceError, View

FP16_EXTENSION = "cl_khr_fp16"
BUILD_OPTIONS = ["-cl-std=CL1.2"]
INSTALL_HINT = "pip install 'tessera[opencl]' and an OpenCL driver (Debian: pocl-opencl-icd for the CPU)"


class OpenCLUnavailable(DeviceError):
    """No OpenCL device could be opened: pyopencl or a driver (ICD) is missing, or none matches."""


def _pick_device(cl, wanted: str | None):
    try:
        platforms = cl.get_platforms()
    except cl.Error as error:  # the ICD loader finds no platform at all
        raise OpenCLUnavailable(f"no OpenCL platform ({error}); {INSTALL_HINT}") from None
    devices = [d for p in platforms for d in p.get_devices()]
    if not devices:
        raise OpenCLUnavailable(f"no OpenCL device on platforms {', '.join(p.name for p in platforms)}")
    if wanted:
        if wanted.isdigit():
            if int(wanted) >= len(devices):
                raise OpenCLUnavailable(f"TESSERA_OPENCL_DEVICE={wanted}: there are {len(devices)} OpenCL devices")
            return devices[int(wanted)]
        matching = [d for d in devices if wanted.lower() in f"{d.platform.name} {d.name}".lower()]
        if not matching:
            raise OpenCLUnavailable(f"TESSERA_OPENCL_DEVICE={wanted!r} names no OpenCL device; there are: "
                                    + "; ".join(f"{i}: {d.name} ({d.platform.name})" for i, d in enumerate(devices)))
        return matching[0]
    gpus = [d for d in devices if d.type & cl.device_type.GPU]
    return (gpus or devices)[0]


def _limits(d) -> dict[str, int]:
    """The device's limits under their WebGPU names (docs/format.md)."""
    sizes = d.max_work_item_sizes
    return {
        "maxComputeInvocationsPerWorkgroup": d.max_work_group_size,
        "maxComputeWorkgroupSizeX": sizes[0],
        "maxComputeWorkgroupSizeY": sizes[1],
        "maxComputeWorkgroupSizeZ": sizes[2],
        "maxComputeWorkgroupStorageSize": d.local_mem_size,
        "maxBufferSize": d.max_mem_alloc_size,
        "maxStorageBufferBindingSize": d.max_mem_alloc_size,
        "minStorageBufferOffsetAlignment": d.mem_base_addr_align // 8,  # stated in bits
        # No binding slots: the kernel's argument bytes (a pointer per buffer) are the bound.
        "maxStorageBuffersPerShaderStage": d.max_parameter_size // 8,
    }


class OpenCLBuffer:
    """A cl.Buffer with the sub-buffers made of it, one per (offset, size) a binding viewed."""

    __slots__ = ("memory", "size", "sub_buffers")

    def __init__(self, memory):
        self.memory, self.size, self.sub_buffers = memory, memory.size, {}

    def __repr__(self) -> str:
        return f"OpenCLBuffer({self.size} bytes)"


class OpenCLDevice(Device):
    kind = "opencl"
    backends = ("opencl",)
    _shared: OpenCLDevice | None = None

    @classmethod
    def shared(cls) -> OpenCLDevice:
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def __init__(self):
        try:
            import pyopencl as cl
        except ImportError as error:
            raise OpenCLUnavailable(f"the OpenCL device needs pyopencl ({error}); {INSTALL_HINT}") from None
        self.cl = cl
        self.device = _pick_device(cl, os.environ.get("TESSERA_OPENCL_DEVICE"))
        self.name = f"{self.device.name.strip()} ({self.device.platform.name.strip()})"
        try:
            self.context = cl.Context([self.device])
            self.queue = cl.CommandQueue(self.context, self.device,
                                         properties=cl.command_queue_properties.PROFILING_ENABLE)
        except cl.Error as error:
            raise OpenCLUnavailable(f"could not open the OpenCL device {self.name}: {error}") from None
        extensions = self.device.extensions.split()
        # vload_half/vstore_half are core: f16 tensors work everywhere, computed in float without the extension.
        self.features = frozenset({SHADER_F16} | ({FP16_EXTENSION} & set(extensions)))
        self.cpu_adapter = bool(self.device.type & cl.device_type.CPU)
        self.buffers_created = 0
        self._programs: dict[str, object] = {}  # source -> built cl.Program
        self._limits = _limits(self.device)

    def limit(self, name: str) -> int | None:
        return self._limits.get(name)

    # -- memory --------------------------------------------------------------------------------

    def allocate(self, nbytes: int):
        cl = self.cl
        self.buffers_created += 1
        size = max(nbytes, 4)
        buffer = OpenCLBuffer(cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size))
        # Fresh buffers read as zeros on every device (WebGPU guarantees it; OpenCL does not).
        self.fill_zero(buffer, size)
        return buffer

    def allocate_with(self, data: bytes):
        cl = self.cl
        self.buffers_created += 1
        host = np.frombuffer(bytes(data) or bytes(4), np.uint8)
        return OpenCLBuffer(cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                                      hostbuf=host))

    def free(self, buffer: OpenCLBuffer) -> None:
        # Dropped, not released: a binding may still hold the memory (pyopencl frees it with the last one).
        buffer.sub_buffers.clear()

    def upload(self, buffer, offset: int, data: bytes) -> None:
        self.cl.enqueue_copy(self.queue, buffer.memory, np.frombuffer(bytes(data), np.uint8), dst_offset=offset,
                             is_blocking=True)

    def fill_zero(self, buffer, nbytes: int) -> None:
        self.cl.enqueue_fill_buffer(self.queue, buffer.memory, np.uint8(0), 0, nbytes)

    def read_back(self, view: View) -> bytes:
        out = np.empty(view.nbytes, np.uint8)
        if view.nbytes:
            self.cl.enqueue_copy(self.queue, out, view.buffer.memory, src_offset=view.offset, is_blocking=True)
        return out.tobytes()

    def copy(self, source: View, destination: View) -> None:
        if source.nbytes:
            self.cl.enqueue_copy(self.queue, destination.buffer.memory, source.buffer.memory, byte_count=source.nbytes,
                                 src_offset=source.offset, dst_offset=destination.offset)

    def _memory(self, view: View):
        """The cl.Buffer a kernel argument names: the buffer itself, or a sub-buffer of the view."""
        buffer = view.buffer
        if view.offset == 0 and view.nbytes >= buffer.size:
            return buffer.memory
        # Exactly the view's bytes, so that a kernel reading past its tensor is caught (oclgrind).
        key = (view.offset, max(view.nbytes, 4))
        if key not in buffer.sub_buffers:
            align = self.limit("minStorageBufferOffsetAlignment")
            if view.offset % align:
                raise DeviceError(f"a buffer view at offset {view.offset} is not a multiple of this OpenCL "
                                  f"device's {align}-byte base address alignment")
            if view.offset + key[1] > buffer.size:
                raise DeviceError(f"a view of {key[1]} bytes at offset {view.offset} overruns a buffer of "
                                  f"{buffer.size} bytes")
            buffer.sub_buffers[key] = buffer.memory.get_sub_region(*key)
        return buffer.sub_buffers[key]

    # -- kernels -------------------------------------------------------------------------------

    def load_kernels(self, kernels: list[dict], modules: dict[str, bytes]) -> list:
        for record in kernels:
            backend = record.get("backend")
            if backend not in self.backends:
                raise DeviceError(f"the OpenCL device runs OpenCL C kernels; kernel {record.get('name')!r} is "
                                  f"{backend or 'of no backend (its record has none)'}")
            # Before building: a cl_khr_fp16 kernel on a device without it fails to build with a
            # compiler log that does not say why.
            missing = sorted(set(record.get("requirements", {}).get("features", [])) - self.features)
            if missing:
                raise DeviceError(f"kernel {record['name']!r} needs {', '.join(missing)}, which the OpenCL device "
                                  f"{self.name} lacks (it has {', '.join(sorted(self.features))})")
        return [(self.program(modules[k["module"]].decode(), k["module"]), k["entry_point"],
                 tuple(int(w) for w in k["workgroup_size"]), k["name"], k["module"]) for k in kernels]

    def program(self, source: str, path: str = "<kernel>"):
        """The built program of a module's source, cached; a DeviceError with the build log if it fails."""
        program = self._programs.get(source)
        if program is None:
            cl = self.cl
            try:
                program = cl.Program(self.context, source).build(options=BUILD_OPTIONS)
            except cl.Error as error:  # RuntimeError subclasses carry the compiler's log in their text
                raise DeviceError(f"OpenCL could not build {path} on {self.name}:\n{error}") from None
            self._programs[source] = program
        return program

    def bind(self, kernel, views: list[View]):
        program, entry, workgroup_size, name, path = kernel
        try:
            bound = self.cl.Kernel(program, entry)
        except self.cl.Error:  # CL_INVALID_KERNEL_NAME: the record's entry point is not in the module
            found = program.get_info(self.cl.program_info.KERNEL_NAMES).replace(";", ", ")
            raise DeviceError(f"kernel {name!r}: {path} has no entry point {entry!r} (it has {found})") from None
        memory = [self._memory(view) for view in views]
        for index, buffer in enumerate(memory):
            bound.set_arg(index, buffer)
        # clSetKernelArg does not retain a buffer: the binding keeps them alive as long as it lives.
        return bound, memory, workgroup_size

    def launch(self, bound, scalars: list[int], grid: list[int]):
        kernel, memory, local = bound
        for index, value in enumerate(scalars):
            kernel.set_arg(len(memory) + index, np.int32(value))
        if min(grid) <= 0:
            return None
        global_size = tuple(int(g) * w for g, w in zip(grid, local))
        try:
            return self.cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, local)
        except self.cl.Error as error:
            raise DeviceError(f"OpenCL could not launch {kernel.function_name} over {list(grid)} workgroups of "
                              f"{list(local)}: {error}") from None

    def flush(self) -> None:
        self.queue.flush()

    def synchronize(self) -> None:
        self.queue.finish()

    def timed_launch(self, bound, scalars: list[int], grid: list[int]) -> float:
        self.synchronize()
        event = self.launch(bound, scalars, grid)
        if event is None:
            return 0.0
        event.wait()
        return (event.profile.end - event.profile.start) * 1e-9
