"""tir -> tir lowering that every language shares: after it, a renderer only spells.

Each pass is a function ``PrimFunc -> PrimFunc``; ``lower_kernel(func, needs)`` applies the ones a
language asks for in its ``LoweringNeeds`` (a row of data a backend declares):

- ``legalize_storage``: tensors the language cannot hold (bool, int64) become 32-bit words;
- ``unroll_loops``: loops marked for unrolling with constant bounds become straight-line code;
- ``split_workgroups``: for CPUs, the body split at barriers into per-workgroup code and thread loops.
"""

from .needs import LoweringNeeds, lower_kernel
from .storage import WORD_STORAGE, WordStorage, element_bytes, host_dtype, legalize_storage
from .unroll import MAX_UNROLL, unroll_loops
from .workgroup import split_workgroups
