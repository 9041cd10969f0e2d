"""The Vulkan device's command stream: commands recorded in call order, submitted in batches.

Vulkan starts a queue's commands in order but lets them overlap, and a command's writes are
visible to later commands only through a barrier, within one command buffer too. So every command
is recorded after a global memory barrier from the compute and transfer stages' writes to the
compute and transfer stages' reads and writes: a launch sees what the launches and copies before it
wrote, across submissions too (a barrier's first scope is everything earlier in submission order).
A submission ends with a barrier to the host stage, because a fence alone does not make device
writes visible to host reads of mapped memory; host writes before a submission need none
(vkQueueSubmit makes them visible).

Objects that pending commands may still use are destroyed only after those commands have run:
``after_pending`` holds such work until ``wait``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Batch:
    command_buffer: object
    fence: object


class CommandStream:
    def __init__(self, vk, gpu, queue_family: int):
        self.vk, self.gpu = vk, gpu
        self.queue = vk.vkGetDeviceQueue(gpu, queue_family, 0)
        # Command buffers are reset one by one and reused, so the pool must allow it.
        self._pool = vk.vkCreateCommandPool(gpu, vk.VkCommandPoolCreateInfo(
            flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=queue_family), None)
        self._recording: _Batch | None = None
        self._submitted: list[_Batch] = []
        self._idle: list[_Batch] = []  # reset command buffers and unsignalled fences, to reuse
        self._after: list[tuple[Callable, tuple]] = []

    @property
    def pending(self) -> bool:
        """Whether a command is recorded or submitted and not yet waited for."""
        return self._recording is not None or bool(self._submitted)

    def current(self):
        """The command buffer being recorded (begun if none is), for commands that order themselves."""
        if self._recording is None:
            vk = self.vk
            if self._idle:
                batch = self._idle.pop()
            else:
                command_buffer = vk.vkAllocateCommandBuffers(self.gpu, vk.VkCommandBufferAllocateInfo(
                    commandPool=self._pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
                batch = _Batch(command_buffer, vk.vkCreateFence(self.gpu, vk.VkFenceCreateInfo(), None))
            vk.vkBeginCommandBuffer(batch.command_buffer, vk.VkCommandBufferBeginInfo(
                flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
            self._recording = batch
        return self._recording.command_buffer

    def record(self):
        """The command buffer, after a barrier that orders the next command after every earlier one."""
        vk = self.vk
        command_buffer = self.current()
        stages = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT
        writes = vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT
        barrier = vk.VkMemoryBarrier(srcAccessMask=writes, dstAccessMask=writes | vk.VK_ACCESS_SHADER_READ_BIT
                                     | vk.VK_ACCESS_TRANSFER_READ_BIT)
        vk.vkCmdPipelineBarrier(command_buffer, stages, stages, 0, 1, [barrier], 0, None, 0, None)
        return command_buffer

    def after_pending(self, work: Callable, *args) -> None:
        """``work(*args)`` now if nothing is pending, else once what is pending has run."""
        if self.pending:
            self._after.append((work, args))
        else:
            work(*args)

    def submit(self) -> None:
        batch, self._recording = self._recording, None
        if batch is None:
            return
        vk = self.vk
        barrier = vk.VkMemoryBarrier(srcAccessMask=vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                                     dstAccessMask=vk.VK_ACCESS_HOST_READ_BIT)
        vk.vkCmdPipelineBarrier(batch.command_buffer, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
                                | vk.VK_PIPELINE_STAGE_TRANSFER_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT, 0, 1, [barrier],
                                0, None, 0, None)
        vk.vkEndCommandBuffer(batch.command_buffer)
        vk.vkQueueSubmit(self.queue, 1, [vk.VkSubmitInfo(pCommandBuffers=[batch.command_buffer])], batch.fence)
        self._submitted.append(batch)

    def wait(self) -> None:
        """Submit what is recorded, wait for every submission, then run the work that waited."""
        self.submit()
        vk = self.vk
        for batch in self._submitted:
            vk.vkWaitForFences(self.gpu, 1, [batch.fence], vk.VK_TRUE, 2**64 - 1)
            vk.vkResetFences(self.gpu, 1, [batch.fence])
            vk.vkResetCommandBuffer(batch.command_buffer, 0)
            self._idle.append(batch)
        self._submitted.clear()
        after, self._after = self._after, []
        for work, args in after:
            work(*args)

    def close(self) -> None:
        self.wait()
        for batch in self._idle:
            self.vk.vkDestroyFence(self.gpu, batch.fence, None)
        self.vk.vkDestroyCommandPool(self.gpu, self._pool, None)  # frees its command buffers
