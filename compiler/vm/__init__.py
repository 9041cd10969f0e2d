"""Running compiled code from Python: the executable format, the WebGPU VM, the kernel runner."""

from .executable import Executable, ExecutableError


def __getattr__(name):
    # The VM imports wgpu; load it only when asked for.
    if name == "VirtualMachine":
        from .virtual_machine import VirtualMachine

        return VirtualMachine
    raise AttributeError(name)
