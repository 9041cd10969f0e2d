"""Run one kernel as SPIR-V on the Vulkan device: the Vulkan target's counterpart of the WebGPU
kernel runner (same ``run(func, inputs, scalars)``), so tests check SPIR-V kernels against numpy.

The runner compiles for the device it runs on: a ``vulkan`` target with that device's features
and limits, as ``default_runner()`` does for WebGPU. On a machine without a GPU the device is
Mesa's lavapipe, a CPU adapter.
"""

from __future__ import annotations

from ..target import LIMIT_DEFAULTS, Target
from .devices.vulkan import VulkanDevice, VulkanUnavailable
from .kernel_runner import KernelRunner

__all__ = ["VulkanKernelRunner", "VulkanUnavailable", "vulkan_target"]


def vulkan_target(device: VulkanDevice) -> Target:
    """The ``vulkan`` target with what ``device`` has (the spirv backend registers the kind)."""
    limits = {name: device.limit(name) for name in LIMIT_DEFAULTS if device.limit(name)}
    return Target("vulkan", device.features, limits, name=device.name, cpu_adapter=device.cpu_adapter)


class VulkanKernelRunner(KernelRunner):
    def __init__(self, device: VulkanDevice | None = None):
        """``device``: the process's shared Vulkan device unless given (e.g. one under validation)."""
        device = device or VulkanDevice.shared()
        super().__init__(device, vulkan_target(device))
