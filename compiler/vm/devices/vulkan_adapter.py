"""Finding a Vulkan GPU for the Vulkan device: the instance, the physical device, its features and
limits, and the validation layer's messages.

Kept apart from ``vulkan.py`` (what the device does with buffers, kernels and commands) because
everything here happens once, when the device opens, and is about what the machine has.

The physical device is the one ``TESSERA_VULKAN_DEVICE`` names (an index into
``vkEnumeratePhysicalDevices`` or a substring of the device's name), else the first discrete GPU,
then integrated, virtual, CPU (Mesa's lavapipe). Only devices with a compute queue count.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ...target import SHADER_F16, TIMESTAMP_QUERY
from . import DeviceError

DEVICE_ENV = "TESSERA_VULKAN_DEVICE"
VALIDATION_ENV = "TESSERA_VULKAN_VALIDATION"
VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
SUBGROUP = "subgroup"  # the feature name kernels ask for (tessera.target.SUBGROUP_FEATURES)

# API versions (the package defines only 1.0): variant 0, major << 22, minor << 12.
VULKAN_1_0, VULKAN_1_1, VULKAN_1_2, VULKAN_1_3 = (1 << 22 | minor << 12 for minor in range(4))


class VulkanUnavailable(DeviceError):
    """No Vulkan here: the ``vulkan`` package, libvulkan, a driver or a fitting device is missing."""


def load_vulkan():
    """The ``vulkan`` cffi module; it opens libvulkan.so.1 when imported."""
    try:
        import vulkan
    except ImportError as error:
        raise VulkanUnavailable(f"the Vulkan device needs the vulkan package (pip install 'tessera[vulkan]'): "
                                f"{error}") from None
    except OSError as error:  # raised by the package when libvulkan cannot be opened
        raise VulkanUnavailable(f"no Vulkan loader (libvulkan.so.1; Debian: libvulkan1 and a driver such as "
                                f"mesa-vulkan-drivers): {error}") from None
    return vulkan


def validation_wanted(explicit: bool | None) -> bool:
    if explicit is not None:
        return explicit
    return os.environ.get(VALIDATION_ENV, "") not in ("", "0")


# -- the instance ------------------------------------------------------------------------------


def create_instance(vk, validation: bool):
    """A Vulkan 1.1+ instance (features2/properties2 are core there), with the Khronos validation
    layer and VK_EXT_debug_utils when ``validation``."""
    try:
        version = vk.vkEnumerateInstanceVersion()
    except (AttributeError, vk.ProcedureNotFoundError):  # a 1.0 loader has no such function
        version = VULKAN_1_0
    if version < VULKAN_1_1:
        raise VulkanUnavailable("the Vulkan loader is 1.0; the Vulkan device needs 1.1 or newer")
    layers, extensions, flags = [], [], 0
    if validation:
        available = {layer.layerName for layer in vk.vkEnumerateInstanceLayerProperties()}
        if VALIDATION_LAYER not in available:
            raise VulkanUnavailable(f"{VALIDATION_ENV}=1 asks for {VALIDATION_LAYER}, which is not installed "
                                    f"(Debian: vulkan-validationlayers)")
        layers.append(VALIDATION_LAYER)
        extensions.append(vk.VK_EXT_DEBUG_UTILS_EXTENSION_NAME)
    offered = {e.extensionName for e in vk.vkEnumerateInstanceExtensionProperties(None)}
    if "VK_KHR_portability_enumeration" in offered:  # MoltenVK lists its devices only with this
        extensions.append("VK_KHR_portability_enumeration")
        flags |= vk.VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
    app = vk.VkApplicationInfo(pApplicationName="tessera", pEngineName="tessera",
                               apiVersion=min(version, VULKAN_1_3))
    info = vk.VkInstanceCreateInfo(flags=flags, pApplicationInfo=app, ppEnabledLayerNames=layers,
                                   ppEnabledExtensionNames=extensions)
    try:
        return vk.vkCreateInstance(info, None)
    except vk.VkError as error:
        raise VulkanUnavailable(f"vkCreateInstance failed ({type(error).__name__}): no Vulkan driver is installed "
                                f"(Debian's mesa-vulkan-drivers gives the CPU driver lavapipe)") from None


class ValidationMessages:
    """A VK_EXT_debug_utils messenger that keeps the validation layer's warnings and errors."""

    def __init__(self, vk, instance):
        self.vk, self.instance, self.messages = vk, instance, []
        # The callback receives this object back through pUserData, so several devices (each with
        # its own messenger) do not mix their messages; the package keeps one Python callback.
        self._handle = vk.ffi.new_handle(self)
        severity = (vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
                    | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)
        kinds = (vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
                 | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT)
        info = vk.VkDebugUtilsMessengerCreateInfoEXT(messageSeverity=severity, messageType=kinds,
                                                     pfnUserCallback=_collect_message, pUserData=self._handle)
        create = vk.vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT")
        self.messenger = create(instance, info, None)

    def close(self) -> None:
        if self.messenger is not None:
            destroy = self.vk.vkGetInstanceProcAddr(self.instance, "vkDestroyDebugUtilsMessengerEXT")
            destroy(self.instance, self.messenger, None)
            self.messenger = None


def _collect_message(severity, kinds, data, user_data):
    from vulkan import ffi

    sink = ffi.from_handle(user_data)
    sink.messages.append(ffi.string(data.pMessage).decode(errors="replace"))
    return 0  # VK_FALSE: the call that caused the message goes on


# -- the physical device -----------------------------------------------------------------------


@dataclass
class Adapter:
    """What the chosen physical device has, and the feature structs that enable it at device creation."""

    physical: object
    name: str
    device_type: int
    queue_family: int
    features: frozenset[str]
    limits: dict[str, int]  # Tessera's (WebGPU's) limit names
    timestamp_period_ns: float
    timestamp_bits: int
    max_push_constant_bytes: int
    enabled: object = field(repr=False)  # a VkPhysicalDeviceFeatures2 chain for vkCreateDevice


def choose_adapter(vk, instance, wanted: str | None = None) -> Adapter:
    wanted = os.environ.get(DEVICE_ENV) if wanted is None else wanted
    physical = vk.vkEnumeratePhysicalDevices(instance)
    candidates = []
    for index, device in enumerate(physical):
        properties = vk.vkGetPhysicalDeviceProperties(device)
        family = _compute_queue_family(vk, device)
        candidates.append((index, device, properties, family))
    described = ", ".join(f"{i}: {p.deviceName}" + ("" if f is not None else " (no compute queue)")
                          for i, _, p, f in candidates) or "none"
    usable = [c for c in candidates if c[3] is not None and c[2].apiVersion >= VULKAN_1_1]
    if wanted:
        usable = [c for c in usable if wanted == str(c[0]) or wanted.lower() in c[2].deviceName.lower()]
        if not usable:
            raise VulkanUnavailable(f"{DEVICE_ENV}={wanted!r} matches no Vulkan 1.1 device with a compute queue; "
                                    f"the devices here: {described}")
    if not usable:
        raise VulkanUnavailable(f"no Vulkan 1.1 device with a compute queue (devices: {described}); "
                                f"Debian's mesa-vulkan-drivers gives the CPU driver lavapipe")
    preference = [vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU,
                  vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU, vk.VK_PHYSICAL_DEVICE_TYPE_CPU]
    rank = {kind: i for i, kind in enumerate(preference)}
    _, device, properties, family = min(usable, key=lambda c: (rank.get(c[2].deviceType, len(rank)), c[0]))
    return _describe(vk, device, properties, family)


def _compute_queue_family(vk, device) -> int | None:
    """A queue family with compute; one without graphics first (a dedicated compute queue)."""
    families = vk.vkGetPhysicalDeviceQueueFamilyProperties(device)
    compute = [i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT and f.queueCount]
    dedicated = [i for i in compute if not families[i].queueFlags & vk.VK_QUEUE_GRAPHICS_BIT]
    return (dedicated or compute or [None])[0]


def _describe(vk, device, properties, family: int) -> Adapter:
    maintenance3 = vk.VkPhysicalDeviceMaintenance3Properties()
    subgroups = vk.VkPhysicalDeviceSubgroupProperties(pNext=maintenance3)
    vk.vkGetPhysicalDeviceProperties2(device, vk.VkPhysicalDeviceProperties2(pNext=subgroups))

    # shaderFloat16 and int8 (and 8-bit storage) are core only from 1.2; their structs may be chained
    # only on a device that knows them.
    has_12 = properties.apiVersion >= VULKAN_1_2
    float16_int8 = vk.VkPhysicalDeviceShaderFloat16Int8Features() if has_12 else None
    storage8 = vk.VkPhysicalDevice8BitStorageFeatures(pNext=float16_int8) if has_12 else None
    storage16 = vk.VkPhysicalDevice16BitStorageFeatures(pNext=storage8)
    supported = vk.VkPhysicalDeviceFeatures2(pNext=storage16)
    vk.vkGetPhysicalDeviceFeatures2(device, supported)

    features = set()
    if float16_int8 is not None and float16_int8.shaderFloat16 and storage16.storageBuffer16BitAccess:
        features.add(SHADER_F16)
    arithmetic = vk.VK_SUBGROUP_FEATURE_BASIC_BIT | vk.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT
    if subgroups.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT and \
            subgroups.supportedOperations & arithmetic == arithmetic:
        features.add(SUBGROUP)
    queue = vk.vkGetPhysicalDeviceQueueFamilyProperties(device)[family]
    limits = properties.limits
    if queue.timestampValidBits:  # zero: this queue cannot write timestamps
        features.add(TIMESTAMP_QUERY)

    # Enable what kernels may use and nothing more (robustBufferAccess and the like cost speed).
    core = supported.features
    enabled_core = vk.VkPhysicalDeviceFeatures(shaderInt64=core.shaderInt64, shaderInt16=core.shaderInt16)
    enabled_f16 = enabled_s8 = None
    if has_12:
        enabled_f16 = vk.VkPhysicalDeviceShaderFloat16Int8Features(shaderFloat16=float16_int8.shaderFloat16,
                                                                   shaderInt8=float16_int8.shaderInt8)
        enabled_s8 = vk.VkPhysicalDevice8BitStorageFeatures(
            pNext=enabled_f16, storageBuffer8BitAccess=storage8.storageBuffer8BitAccess)
    enabled_s16 = vk.VkPhysicalDevice16BitStorageFeatures(
        pNext=enabled_s8, storageBuffer16BitAccess=storage16.storageBuffer16BitAccess)
    enabled = vk.VkPhysicalDeviceFeatures2(pNext=enabled_s16, features=enabled_core)

    return Adapter(device, properties.deviceName, properties.deviceType, family, frozenset(features),
                   tessera_limits(limits, maintenance3.maxMemoryAllocationSize),
                   float(limits.timestampPeriod), int(queue.timestampValidBits), int(limits.maxPushConstantsSize),
                   enabled)


def tessera_limits(limits, max_allocation: int) -> dict[str, int]:
    """VkPhysicalDeviceLimits under Tessera's limit names (WebGPU's spelling, tessera.target)."""
    size, count = list(limits.maxComputeWorkGroupSize), list(limits.maxComputeWorkGroupCount)
    return {
        "maxStorageBufferBindingSize": int(limits.maxStorageBufferRange),
        # One buffer is one allocation here, so the largest allocation bounds a buffer.
        "maxBufferSize": int(max_allocation),
        "maxComputeWorkgroupStorageSize": int(limits.maxComputeSharedMemorySize),
        "maxComputeInvocationsPerWorkgroup": int(limits.maxComputeWorkGroupInvocations),
        "maxComputeWorkgroupSizeX": int(size[0]),
        "maxComputeWorkgroupSizeY": int(size[1]),
        "maxComputeWorkgroupSizeZ": int(size[2]),
        "maxStorageBuffersPerShaderStage": int(limits.maxPerStageDescriptorStorageBuffers),
        "maxBindGroups": int(limits.maxBoundDescriptorSets),
        "minStorageBufferOffsetAlignment": int(limits.minStorageBufferOffsetAlignment),
        "maxComputeWorkgroupsPerDimension": int(min(count)),
    }
