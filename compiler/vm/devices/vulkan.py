"""Vulkan through the ``vulkan`` cffi package: SPIR-V compute kernels on any Vulkan GPU, or on Mesa's
CPU driver lavapipe on a machine without one. One Vulkan device per process (``shared()``):
creating an instance and a device is slow and each holds memory.

Memory. A buffer is one VkBuffer (storage, transfer source and destination) bound to its own
allocation. Where the device offers memory that is device-local, host-visible and host-coherent
in its main heap (unified memory: lavapipe, integrated GPUs, resizable BAR), buffers live there
and stay mapped: an upload is a memcpy when no command is pending, a read back is a memcpy after
waiting. Otherwise buffers are device-local and bytes travel through host-visible staging
buffers copied in the command stream. A buffer is destroyed when it is freed or garbage
collected (the kernel runner, like wgpu-py's users, just drops its buffers), a bound kernel's
descriptor set when the bound kernel is collected; either waits until no pending command can
still use it. Descriptor sets come from pools of 256, the one with room that was opened last; a
pool left empty is destroyed unless it is the newest.

Synchronization. Launches, copies and staged uploads are recorded, in call order, into one
command buffer, each after a memory barrier that orders it after every earlier command
(vulkan_commands.py says which and why); ``flush`` submits the buffer with a fence,
``synchronize`` and ``read_back`` submit and wait for every fence.

Kernels. A module file becomes a VkShaderModule (cached by its sha256), a kernel record a
compute pipeline with one descriptor set of storage buffers (binding = the ABI's index) and one
push-constant range holding its i32 scalars at offset 4*i (codegen/spirv). ``bind`` writes a
descriptor set once; ``launch`` records bind, push constants and vkCmdDispatch.
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import time
import weakref
from dataclasses import dataclass

import numpy as np

from ...target import MESA_LOOP_BUDGET, TIMESTAMP_QUERY
from . import Device, DeviceError, View
from .vulkan_adapter import (
    ValidationMessages,
    VulkanUnavailable,
    choose_adapter,
    create_instance,
    load_vulkan,
    validation_wanted,
)
from .vulkan_commands import CommandStream

__all__ = ["VulkanDevice", "VulkanUnavailable"]

SPIRV_MAGIC = 0x07230203
SETS_PER_POOL = 256
BUFFERS_PER_SET = 8  # a pool's storage-buffer descriptors: SETS_PER_POOL * this


class VulkanBuffer:
    """A VkBuffer with its own memory; ``mapped`` is a writable view of it when host-visible.
    ``release`` destroys both (once): on ``free``, at garbage collection, or when the device closes."""

    __slots__ = ("handle", "size", "mapped", "release", "__weakref__")

    def __init__(self, handle, size: int, mapped):
        self.handle, self.size, self.mapped, self.release = handle, size, mapped, None

    def __repr__(self) -> str:
        return f"VulkanBuffer({self.size} bytes{', mapped' if self.mapped is not None else ''})"


@dataclass
class VulkanKernel:
    name: str
    pipeline: object
    layout: object  # VkPipelineLayout
    set_layout: object
    binding_indices: list[int]
    push_bytes: int


@dataclass(eq=False)
class DescriptorPool:
    """A VkDescriptorPool and how many of its sets are live (allocated and not yet freed)."""

    handle: object
    live_sets: int = 0


@dataclass(eq=False)
class BoundVulkanKernel:
    kernel: VulkanKernel
    descriptor_set: object
    buffers: list[VulkanBuffer]  # kept referenced: the set points at them


class VulkanDevice(Device):
    kind = "vulkan"
    backends = ("spirv",)
    _shared: VulkanDevice | None = None

    @classmethod
    def shared(cls) -> VulkanDevice:
        if cls._shared is None:
            cls._shared = cls()
            atexit.register(cls._shared.close)
        return cls._shared

    def __init__(self, validation: bool | None = None, physical_device: str | None = None):
        """``validation``: run under VK_LAYER_KHRONOS_validation and keep its messages in
        ``validation_messages`` (default: ``TESSERA_VULKAN_VALIDATION=1``); ``physical_device``: an
        index or a name substring choosing the GPU (default: ``TESSERA_VULKAN_DEVICE``)."""
        self.vk = vk = load_vulkan()
        self._closed = True
        validation = validation_wanted(validation)
        self.instance = create_instance(vk, validation)
        self._validation = ValidationMessages(vk, self.instance) if validation else None
        try:
            self.adapter = adapter = choose_adapter(vk, self.instance, physical_device)
        except Exception:
            self._destroy_instance()
            raise
        self.name, self.features, self._limits = adapter.name, adapter.features, adapter.limits
        queue_info = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=adapter.queue_family, queueCount=1,
                                                pQueuePriorities=[1.0])
        # Features go in the pNext chain (VkPhysicalDeviceFeatures2), so pEnabledFeatures stays NULL.
        info = vk.VkDeviceCreateInfo(pNext=adapter.enabled, pQueueCreateInfos=[queue_info])
        try:
            self.gpu = vk.vkCreateDevice(adapter.physical, info, None)
        except vk.VkError as error:
            self._destroy_instance()
            raise VulkanUnavailable(f"vkCreateDevice failed on {self.name} ({type(error).__name__})") from None
        self._closed = False
        self.commands = CommandStream(vk, self.gpu, adapter.queue_family)
        self._memory_types, self._main_heap = _memory_properties(vk, adapter.physical)
        self._unified = self._memory_type(~0, "unified") is not None
        self.buffers_created = 0
        self._owned: dict[int, weakref.finalize] = {}  # what releases each live buffer and descriptor set
        self._keys = itertools.count()
        self._modules: dict[str, object] = {}  # sha256 -> VkShaderModule
        self._kernels: dict[tuple[str, str], VulkanKernel] = {}
        self._descriptor_pools: list[DescriptorPool] = []  # the newest last
        self._timestamps = None

    # -- what the device has -------------------------------------------------------------------

    def limit(self, name: str) -> int | None:
        return self._limits.get(name)

    @property
    def cpu_adapter(self) -> bool:
        return self.adapter.device_type == self.vk.VK_PHYSICAL_DEVICE_TYPE_CPU

    @property
    def loop_budget(self) -> int:
        """lavapipe shares llvmpipe's loop limiter (tessera.target.MESA_LOOP_BUDGET)."""
        return MESA_LOOP_BUDGET if self.cpu_adapter and "llvmpipe" in self.name.lower() else 0

    @property
    def validation_messages(self) -> list[str]:
        """The validation layer's warnings and errors so far (empty when it is off)."""
        return self._validation.messages if self._validation is not None else []

    # -- memory --------------------------------------------------------------------------------

    def allocate(self, nbytes: int) -> VulkanBuffer:
        # Vulkan forbids zero-sized buffers, and storage arrays are read in 4-byte words.
        self.buffers_created += 1
        size = max(_align4(nbytes), 4)
        if size > self._limits["maxBufferSize"]:
            raise DeviceError(f"a buffer of {nbytes} bytes exceeds the Vulkan device's maxBufferSize "
                              f"({self._limits['maxBufferSize']})")
        vk = self.vk
        usage = vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT \
            | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
        return self._create_buffer(size, usage, "unified" if self._unified else "device")

    def free(self, buffer: VulkanBuffer) -> None:
        buffer.handle = buffer.mapped = None
        if buffer.release is not None:
            buffer.release()

    def upload(self, buffer: VulkanBuffer, offset: int, data: bytes) -> None:
        nbytes = len(data)
        if offset < 0 or offset + nbytes > buffer.size:
            raise DeviceError(f"an upload of {nbytes} bytes at {offset} overruns a buffer of {buffer.size} bytes")
        if nbytes == 0:
            return
        if buffer.mapped is not None and not self.commands.pending:
            buffer.mapped[offset: offset + nbytes] = bytes(data)
            return
        # Pending commands may read or write the buffer: the bytes go in the command stream, in order.
        staging = self._staging(nbytes)
        staging.mapped[:nbytes] = bytes(data)
        self._record_copy(staging, 0, buffer, offset, nbytes)
        self.free(staging)  # once the copy has run

    def fill_zero(self, buffer: VulkanBuffer, nbytes: int) -> None:
        size = min(_align4(nbytes), buffer.size)
        if size == 0:
            return
        if buffer.mapped is not None and not self.commands.pending:
            buffer.mapped[0:size] = bytes(size)
            return
        command_buffer = self.commands.record()
        self.vk.vkCmdFillBuffer(command_buffer, buffer.handle, 0, size, 0)  # size: a multiple of 4

    def read_back(self, view: View) -> bytes:
        buffer, nbytes = view.buffer, view.nbytes
        if view.offset + nbytes > buffer.size:
            raise DeviceError(f"a read of {nbytes} bytes at {view.offset} overruns a buffer of {buffer.size} bytes")
        if nbytes == 0:
            return b""
        if buffer.mapped is not None:
            self.synchronize()
            return bytes(buffer.mapped[view.offset: view.offset + nbytes])
        staging = self._staging(nbytes, readback=True)
        self._record_copy(buffer, view.offset, staging, 0, nbytes)
        self.synchronize()
        data = bytes(staging.mapped[:nbytes])
        self.free(staging)
        return data

    def copy(self, source: View, destination: View) -> None:
        if destination.nbytes < source.nbytes:
            raise DeviceError(f"a copy of {source.nbytes} bytes into a view of {destination.nbytes}")
        if source.nbytes:
            self._record_copy(source.buffer, source.offset, destination.buffer, destination.offset, source.nbytes)

    def _create_buffer(self, size: int, usage: int, purpose: str) -> VulkanBuffer:
        """``purpose``: "unified", "device", "upload" or "readback" (see ``_memory_type``)."""
        vk = self.vk
        handle = vk.vkCreateBuffer(self.gpu, vk.VkBufferCreateInfo(
            size=size, usage=usage, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
        needs = vk.vkGetBufferMemoryRequirements(self.gpu, handle)
        index = self._memory_type(needs.memoryTypeBits, purpose)
        try:
            if index is None:
                raise vk.VkErrorOutOfDeviceMemory()
            memory = vk.vkAllocateMemory(self.gpu, vk.VkMemoryAllocateInfo(
                allocationSize=needs.size, memoryTypeIndex=index), None)
        except vk.VkError as error:
            vk.vkDestroyBuffer(self.gpu, handle, None)
            raise DeviceError(f"the Vulkan device {self.name} cannot allocate {size} bytes "
                              f"({type(error).__name__})") from None
        vk.vkBindBufferMemory(self.gpu, handle, memory, 0)
        mapped = vk.vkMapMemory(self.gpu, memory, 0, size, 0) if purpose != "device" else None
        buffer = VulkanBuffer(handle, size, mapped)
        buffer.release = self._own(buffer, self._destroy_buffer, handle, memory, mapped is not None)
        return buffer

    def _destroy_buffer(self, handle, memory, mapped: bool) -> None:
        vk = self.vk
        if mapped:
            vk.vkUnmapMemory(self.gpu, memory)
        vk.vkDestroyBuffer(self.gpu, handle, None)
        vk.vkFreeMemory(self.gpu, memory, None)

    def _own(self, owner, destroy, *handles) -> weakref.finalize:
        """Call ``destroy(*handles)`` when ``owner`` is collected or the returned finalizer is called,
        once no pending command can use them. Never at interpreter exit: ``close`` does that."""
        key = next(self._keys)

        def release():
            del self._owned[key]
            self.commands.after_pending(destroy, *handles)

        finalizer = self._owned[key] = weakref.finalize(owner, release)
        finalizer.atexit = False
        return finalizer

    def _staging(self, nbytes: int, readback: bool = False) -> VulkanBuffer:
        vk = self.vk
        usage = vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT if readback else vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
        return self._create_buffer(max(_align4(nbytes), 4), usage, "readback" if readback else "upload")

    def _memory_type(self, allowed_bits: int, purpose: str) -> int | None:
        """The index of a memory type among ``allowed_bits`` for a buffer's ``purpose``: "unified"
        (device-local, host-visible and coherent, in the largest device-local heap), "device"
        (device-local if any), "upload" (host-visible and coherent), "readback" (also host-cached
        if any: the CPU reads it)."""
        vk = self.vk
        local = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        host = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        wanted = {"unified": [local | host], "device": [local, 0], "upload": [host],
                  "readback": [host | vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT, host]}[purpose]
        for flags in wanted:
            for index, (properties, heap) in enumerate(self._memory_types):
                if not (allowed_bits >> index & 1 and properties & flags == flags):
                    continue
                # A discrete GPU's small host-visible window (256 MiB of BAR) is no place for every buffer.
                if purpose == "unified" and heap != self._main_heap:
                    continue
                return index
        return None

    # -- kernels -------------------------------------------------------------------------------
    def load_kernels(self, kernels: list[dict], modules: dict[str, bytes]) -> list[VulkanKernel]:
        return [self._kernel(record, modules[record["module"]]) for record in kernels]

    def _kernel(self, record: dict, code: bytes) -> VulkanKernel:
        name = record.get("name", record["entry_point"])
        backend = record.get("backend", "spirv")
        if backend not in self.backends:
            raise DeviceError(f"kernel {name} is a {backend} kernel; the Vulkan device runs {', '.join(self.backends)}")
        for feature in record.get("requirements", {}).get("features", []):
            if feature not in self.features:
                raise DeviceError(f"kernel {name} needs the feature {feature!r}, which the Vulkan device "
                                  f"{self.name} lacks (it has: {', '.join(sorted(self.features)) or 'none'})")
        digest = hashlib.sha256(code).hexdigest()
        key = (digest, record["entry_point"])
        if key not in self._kernels:
            self._kernels[key] = self._create_pipeline(name, record, self._shader_module(name, code, digest))
        return self._kernels[key]

    def _shader_module(self, name: str, code: bytes, digest: str):
        if digest not in self._modules:
            if len(code) % 4 or len(code) < 20 or int.from_bytes(code[:4], "little") != SPIRV_MAGIC:
                raise DeviceError(f"kernel {name}: the module is not SPIR-V ({len(code)} bytes, no magic number)")
            broken = _broken_instruction(code)
            if broken is not None:
                raise DeviceError(f"kernel {name}: the SPIR-V module ({len(code)} bytes) is truncated or corrupt: "
                                  f"{broken}")
            vk = self.vk
            info = vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code)
            try:
                self._modules[digest] = vk.vkCreateShaderModule(self.gpu, info, None)
            except vk.VkError as error:
                raise DeviceError(f"kernel {name}: the Vulkan driver refused its SPIR-V module ({len(code)} bytes, "
                                  f"{type(error).__name__})") from None
        return self._modules[digest]

    def _create_pipeline(self, name: str, record: dict, module) -> VulkanKernel:
        vk = self.vk
        abi = record["abi"]
        not_pushed = [s["name"] for s in abi["scalars"] if s.get("passed", "push_constant") != "push_constant"]
        if not_pushed:
            raise DeviceError(f"kernel {name}: the Vulkan device passes scalars as push constants, not "
                              f"{', '.join(not_pushed)}")
        push_bytes = 4 * len(abi["scalars"])
        if push_bytes > self.adapter.max_push_constant_bytes:
            raise DeviceError(f"kernel {name} has {len(abi['scalars'])} scalars; the device's push constants hold "
                              f"{self.adapter.max_push_constant_bytes // 4}")
        indices = [b["index"] for b in abi["bindings"]]
        compute = vk.VK_SHADER_STAGE_COMPUTE_BIT
        set_layout = vk.vkCreateDescriptorSetLayout(self.gpu, vk.VkDescriptorSetLayoutCreateInfo(pBindings=[
            vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                            descriptorCount=1, stageFlags=compute) for i in indices]), None)
        ranges = [vk.VkPushConstantRange(stageFlags=compute, offset=0, size=push_bytes)] if push_bytes else None
        layout = vk.vkCreatePipelineLayout(self.gpu, vk.VkPipelineLayoutCreateInfo(
            pSetLayouts=[set_layout], pPushConstantRanges=ranges), None)
        # The stage info owns the entry point's C string, which the pipeline info points at but
        # does not own: ``stage`` must stay alive until vkCreateComputePipelines returns.
        stage = vk.VkPipelineShaderStageCreateInfo(stage=compute, module=module, pName=record["entry_point"])
        info = vk.VkComputePipelineCreateInfo(stage=stage, layout=layout)
        try:
            (pipeline,) = vk.vkCreateComputePipelines(self.gpu, vk.VK_NULL_HANDLE, 1, [info], None)
        except vk.VkError as error:
            vk.vkDestroyPipelineLayout(self.gpu, layout, None)
            vk.vkDestroyDescriptorSetLayout(self.gpu, set_layout, None)
            raise DeviceError(f"kernel {name}: the Vulkan driver could not build its pipeline "
                              f"({type(error).__name__})") from None
        del stage
        return VulkanKernel(name, pipeline, layout, set_layout, indices, push_bytes)

    def bind(self, kernel: VulkanKernel, views: list[View]) -> BoundVulkanKernel:
        if len(views) != len(kernel.binding_indices):
            raise DeviceError(f"kernel {kernel.name} has {len(kernel.binding_indices)} bindings, given {len(views)}")
        vk = self.vk
        alignment = self._limits["minStorageBufferOffsetAlignment"]
        infos = []
        for index, view in zip(kernel.binding_indices, views):
            buffer = view.buffer
            if view.offset % alignment:  # the memory plan aligns tensors to storage_alignment
                raise DeviceError(f"kernel {kernel.name}, binding {index}: offset {view.offset} is not a multiple "
                                  f"of the device's minStorageBufferOffsetAlignment ({alignment})")
            if view.offset >= buffer.size:
                raise DeviceError(f"kernel {kernel.name}, binding {index}: offset {view.offset} is past the end of "
                                  f"a buffer of {buffer.size} bytes")
            extent = min(max(_align4(view.nbytes), 4), buffer.size - view.offset)
            if extent > self._limits["maxStorageBufferBindingSize"]:
                raise DeviceError(f"kernel {kernel.name}, binding {index}: a view of {view.nbytes} bytes exceeds the "
                                  f"device's maxStorageBufferBindingSize "
                                  f"({self._limits['maxStorageBufferBindingSize']})")
            infos.append(vk.VkDescriptorBufferInfo(buffer=buffer.handle, offset=view.offset, range=extent))
        pool, descriptor_set = self._allocate_set(kernel.set_layout)
        writes = [vk.VkWriteDescriptorSet(dstSet=descriptor_set, dstBinding=index, descriptorCount=1,
                                          descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, pBufferInfo=[info])
                  for index, info in zip(kernel.binding_indices, infos)]
        if writes:
            vk.vkUpdateDescriptorSets(self.gpu, len(writes), writes, 0, None)
        bound = BoundVulkanKernel(kernel, descriptor_set, [v.buffer for v in views])
        self._own(bound, self._free_set, pool, descriptor_set)
        return bound

    def _free_set(self, pool: DescriptorPool, descriptor_set) -> None:
        """Frees a set (once no command can use it); a pool left empty is destroyed unless it is the
        newest, so a long run of bind-and-drop (the kernel runner's) keeps one or two pools."""
        vk = self.vk
        vk.vkFreeDescriptorSets(self.gpu, pool.handle, 1, [descriptor_set])
        pool.live_sets -= 1
        if pool.live_sets == 0 and pool is not self._descriptor_pools[-1]:
            self._descriptor_pools.remove(pool)
            vk.vkDestroyDescriptorPool(self.gpu, pool.handle, None)

    def _allocate_set(self, set_layout) -> tuple[DescriptorPool, object]:
        """(pool, a descriptor set from it): from a pool with room, the newest first, opening a new pool
        when none has. The VM binds each (kernel, views) once and launches it many times, so sets are few."""
        vk = self.vk

        def allocate(pool: DescriptorPool):
            info = vk.VkDescriptorSetAllocateInfo(descriptorPool=pool.handle, descriptorSetCount=1,
                                                  pSetLayouts=[set_layout])
            return vk.vkAllocateDescriptorSets(self.gpu, info)[0]

        for pool in reversed(self._descriptor_pools):
            if pool.live_sets < SETS_PER_POOL:
                try:
                    descriptor_set = allocate(pool)
                except (vk.VkErrorOutOfPoolMemory, vk.VkErrorFragmentedPool):
                    continue  # room for sets, not for this one's buffers
                pool.live_sets += 1
                return pool, descriptor_set
        sizes = [vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                         descriptorCount=SETS_PER_POOL * BUFFERS_PER_SET)]
        pool = DescriptorPool(vk.vkCreateDescriptorPool(self.gpu, vk.VkDescriptorPoolCreateInfo(
            flags=vk.VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT, maxSets=SETS_PER_POOL, pPoolSizes=sizes), None))
        self._descriptor_pools.append(pool)
        try:
            descriptor_set = allocate(pool)
        except (vk.VkErrorOutOfPoolMemory, vk.VkErrorFragmentedPool):
            raise DeviceError("a kernel needs more storage buffers than a descriptor pool holds") from None
        pool.live_sets += 1
        return pool, descriptor_set

    def launch(self, bound: BoundVulkanKernel, scalars: list[int], grid: list[int]) -> None:
        kernel = bound.kernel
        words = _push_constants(kernel, scalars)
        if min(grid, default=1) <= 0:
            return  # nothing to run; push constants live in the command, so nothing else to keep
        groups = [int(g) for g in grid] + [1] * (3 - len(grid))
        most = self._limits["maxComputeWorkgroupsPerDimension"]
        if max(groups) > most:
            raise DeviceError(f"kernel {kernel.name}: a grid of {groups} workgroups exceeds the device's "
                              f"{most} per dimension")
        vk = self.vk
        command_buffer = self.commands.record()
        point = vk.VK_PIPELINE_BIND_POINT_COMPUTE
        vk.vkCmdBindPipeline(command_buffer, point, kernel.pipeline)
        vk.vkCmdBindDescriptorSets(command_buffer, point, kernel.layout, 0, 1, [bound.descriptor_set], 0, None)
        if kernel.push_bytes:
            vk.vkCmdPushConstants(command_buffer, kernel.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0,
                                  kernel.push_bytes, vk.ffi.from_buffer(words))
        vk.vkCmdDispatch(command_buffer, *groups)

    def timed_launch(self, bound: BoundVulkanKernel, scalars: list[int], grid: list[int]) -> float:
        if TIMESTAMP_QUERY not in self.features:
            return super().timed_launch(bound, scalars, grid)
        vk = self.vk
        self.synchronize()
        if self._timestamps is None:
            self._timestamps = vk.vkCreateQueryPool(self.gpu, vk.VkQueryPoolCreateInfo(
                queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=2), None)
        command_buffer = self.commands.current()
        vk.vkCmdResetQueryPool(command_buffer, self._timestamps, 0, 2)
        vk.vkCmdWriteTimestamp(command_buffer, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, self._timestamps, 0)
        start = time.perf_counter()
        self.launch(bound, scalars, grid)
        vk.vkCmdWriteTimestamp(self.commands.current(), vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self._timestamps, 1)
        self.synchronize()
        wall = time.perf_counter() - start
        stamps = vk.ffi.new("uint64_t[2]")
        vk.vkGetQueryPoolResults(self.gpu, self._timestamps, 0, 2, 16, stamps, 8,
                                 vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        mask = (1 << self.adapter.timestamp_bits) - 1 if self.adapter.timestamp_bits < 64 else (1 << 64) - 1
        ticks = (stamps[1] - stamps[0]) & mask
        return ticks * self.adapter.timestamp_period_ns * 1e-9 if ticks else wall

    # -- recording and submission --------------------------------------------------------------

    def flush(self) -> None:
        self.commands.submit()

    def synchronize(self) -> None:
        self.commands.wait()

    def _record_copy(self, source: VulkanBuffer, source_offset: int, destination: VulkanBuffer,
                     destination_offset: int, nbytes: int) -> None:
        vk = self.vk
        region = vk.VkBufferCopy(srcOffset=source_offset, dstOffset=destination_offset, size=nbytes)
        vk.vkCmdCopyBuffer(self.commands.record(), source.handle, destination.handle, 1, [region])

    # -- teardown ------------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for the queue, then destroy every object the device made (buffers included)."""
        if self._closed:
            return
        vk, gpu = self.vk, self.gpu
        self._closed = True
        if VulkanDevice._shared is self:
            VulkanDevice._shared = None
        self.commands.close()  # waits for every command: each release below runs at once
        for release in list(self._owned.values()):
            release()
        for kernel in self._kernels.values():
            vk.vkDestroyPipeline(gpu, kernel.pipeline, None)
            vk.vkDestroyPipelineLayout(gpu, kernel.layout, None)
            vk.vkDestroyDescriptorSetLayout(gpu, kernel.set_layout, None)
        for module in self._modules.values():
            vk.vkDestroyShaderModule(gpu, module, None)
        for pool in self._descriptor_pools:
            vk.vkDestroyDescriptorPool(gpu, pool.handle, None)
        self._descriptor_pools.clear()
        if self._timestamps is not None:
            vk.vkDestroyQueryPool(gpu, self._timestamps, None)
        vk.vkDestroyDevice(gpu, None)
        self._kernels.clear()
        self._modules.clear()
        self._destroy_instance()

    def _destroy_instance(self) -> None:
        if self._validation is not None:
            self._validation.close()
        self.vk.vkDestroyInstance(self.instance, None)


def _push_constants(kernel: VulkanKernel, scalars: list[int]) -> np.ndarray:
    """The scalars as the i32 words of the push-constant range (u32 values keep their bits)."""
    if 4 * len(scalars) != kernel.push_bytes:
        raise DeviceError(f"kernel {kernel.name} takes {kernel.push_bytes // 4} scalars, given {len(scalars)}")
    values = [int(s) for s in scalars]
    bad = [v for v in values if not -(1 << 31) <= v < 1 << 32]
    if bad:
        raise DeviceError(f"kernel {kernel.name}: scalar {bad[0]} does not fit the 32-bit push constant")
    return np.array([v & 0xFFFFFFFF for v in values], np.uint32)


def _broken_instruction(code: bytes) -> str | None:
    """Where the instruction stream of a SPIR-V module does not add up, or None. Drivers need not
    check (lavapipe creates a module from any bytes), and the validation layer aborts the process
    on an instruction whose word count runs past the end."""
    words = np.frombuffer(code, "<u4").tolist()
    at = 5  # after the header
    while at < len(words):
        count = words[at] >> 16
        if count == 0 or at + count > len(words):
            return f"the instruction at word {at} claims {count} words, {len(words) - at} remain"
        at += count
    return None


def _memory_properties(vk, physical) -> tuple[list[tuple[int, int]], int]:
    """Each memory type's (property flags, heap index), and the largest device-local heap."""
    memory = vk.vkGetPhysicalDeviceMemoryProperties(physical)
    types = [(memory.memoryTypes[i].propertyFlags, memory.memoryTypes[i].heapIndex)
             for i in range(memory.memoryTypeCount)]
    heaps = [(memory.memoryHeaps[i].size, i) for i in range(memory.memoryHeapCount)
             if memory.memoryHeaps[i].flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT]
    return types, max(heaps)[1] if heaps else -1


def _align4(value: int) -> int:
    return (value + 3) // 4 * 4
