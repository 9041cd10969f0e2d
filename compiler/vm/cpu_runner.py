"""Run one kernel as native machine code on this CPU: the CPU target's counterpart of the WebGPU
kernel runner (same ``run(func, inputs, scalars)``), so tests check the c-native kernels against
numpy. Each kernel is its own ``kernels.so`` (built with the system C compiler for this machine,
cached by the kernel); the shared device loads each once.
"""

from __future__ import annotations

from .devices.cpu import CPUDevice
from .kernel_runner import KernelRunner


class CPUKernelRunner(KernelRunner):
    def __init__(self):
        device = CPUDevice()
        super().__init__(device, device.target())
