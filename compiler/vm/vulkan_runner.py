"""Run one kernel as SPIR-V on the Vulkan device: the Vulkan target's counterpart of the WebGPU
kernel runner (same ``run(func, inputs, scalars)``), so tests check SPIR-V kernels against numpy.

The runner compiles for the device it runs on: a ``vulkan`` target with that device's features
and limits, as ``default_runner()`` does for WebGPU. On a machine without a GPU the device is
Mesa's lavapipe, a CPU adapter.
"""

from __future__ import annotations

from .devices.vulkan import VulkanDevice, VulkanUnavailable
from .kernel_runner import KernelRunner

__all__ = ["VulkanKernelRunner", "VulkanUnavailable"]


class VulkanKernelRunner(KernelRunner):
    def __init__(self, device: VulkanDevice | None = None):
        """``device``: the process's shared Vulkan device unless given (e.g. one under validation)."""
        device = device or VulkanDevice.shared()
        super().__init__(device, device.target())
