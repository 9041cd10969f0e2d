"""Running compiled code from Python: the executable format, the WebGPU VM, the kernel runner."""

from .executable import Executable, ExecutableError


def __getattr__(name):
    # The VM imports wgpu; load it only when asked for.
    if name in ("VirtualMachine", "DeviceTensor"):
        from . import virtual_machine

        return getattr(virtual_machine, name)
    raise AttributeError(name)
