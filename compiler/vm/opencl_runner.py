"""Run one kernel as OpenCL C through pyopencl: the OpenCL target's counterpart of the WebGPU
kernel runner (same ``run(func, inputs, scalars)``), so tests check OpenCL kernels against numpy.

Kernels are compiled for the shared device's own features and limits (PoCL on a CPU-only machine).
"""

from __future__ import annotations

from .devices.opencl import OpenCLDevice
from .kernel_runner import KernelRunner


class OpenCLKernelRunner(KernelRunner):
    def __init__(self):
        device = OpenCLDevice.shared()
        super().__init__(device, device.target())
