"""SPIR-V for Vulkan: binary modules written directly from lowered tir, no shader compiler.

A kernel is one SPIR-V 1.3 module (what Vulkan 1.1 consumes) with one GLCompute entry point,
``entry_name(func)``, whose LocalSize is the kernel's workgroup size. What a Vulkan device binds:

- descriptor set 0, binding i: the kernel's i-th parameter (inputs, then outputs, as
  ``kernel_abi`` numbers them), a storage buffer of its element type: f32, f16, i32 or u32, or
  vectors of them where the kernel reads the buffer as vectors. No buffer is Restrict or
  NonWritable: the VM binds views of one arena buffer to several bindings;
- push constants: the kernel's scalars as i32, scalar i at byte offset 4 * i.

Kernels come lowered for ``LOWERING`` (as for WGSL): a storage buffer holds f32, f16, i32 or u32,
and tensors of other dtypes (bool, int64) are already 32-bit words in the tir. Capabilities are
declared as the kernel uses them: Float16 for f16 values, StorageBuffer16BitAccess for f16
buffers, GroupNonUniform(Arithmetic) for subgroup reductions.

Layout of the folder: ``spec.py`` the specification's numbers, ``builder.py`` the module builder,
``types.py`` tir dtypes as types and constants, ``expressions.py`` and ``kernel.py`` the walk of
the tir, ``backend.py`` the backend and its targets.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.tir.ir import PrimFunc
from tessera.tir.lower import LoweringNeeds

from .. import entry_name
from .errors import SPIRVError
from .kernel import KernelEmitter

# Storage buffers hold f32, f16, i32 and u32 (Vulkan 1.1 devices need not have 8- or 64-bit
# storage); a workgroup's threads run in parallel, so barriers stay barriers.
LOWERING = LoweringNeeds(storage_types={"float32", "float16", "int32", "uint32"}, unroll=True)


@dataclass(frozen=True)
class SPIRVKernel:
    """A kernel ready for ``vkCreateShaderModule``: the module's bytes and its entry point."""

    binary: bytes
    entry_point: str
    workgroup_size: tuple[int, int, int]


def emit_spirv(func: PrimFunc) -> SPIRVKernel:
    """The SPIR-V module of ``func``, which must be lowered for ``LOWERING`` (a SPIRVError if it
    holds what SPIR-V cannot)."""
    for buf in func.params:
        if buf.storage_dtype not in LOWERING.storage_types:
            raise SPIRVError(f"kernel {func.name}: {buf.name} holds {buf.storage_dtype} tensors, which SPIR-V "
                             "buffers cannot hold: lower the kernel first (tessera.tir.lower.lower_kernel)")
    try:
        binary = KernelEmitter(func).emit()
    except SPIRVError as error:  # raised where the problem is found, which does not know the kernel
        raise SPIRVError(f"kernel {func.name}: {error}") from None
    return SPIRVKernel(binary, entry_name(func), func.workgroup_size)


from .backend import SPIRVBackend  # noqa: E402  (registers the backend and its targets)
