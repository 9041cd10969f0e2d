"""What a language needs done to tir before its renderer can spell it, and the driver that does it."""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import PrimFunc
from .storage import legalize_storage
from .unroll import unroll_loops
from .workgroup import split_workgroups


@dataclass(frozen=True)
class LoweringNeeds:
    """A backend's row in the lowering table.

    ``storage_types``: tensor dtypes a global buffer of the language holds as they are; the others
    become 32-bit words (``legalize_storage``). ``unroll``: expand loops marked for unrolling
    (``unroll_loops``). ``split_workgroups``: the language runs a workgroup's threads one after
    another, so the body is split at barriers into thread loops (``split_workgroups``).
    """

    storage_types: frozenset[str]  # any iterable; kept as a frozenset
    unroll: bool = True
    split_workgroups: bool = False

    def __post_init__(self):
        object.__setattr__(self, "storage_types", frozenset(self.storage_types))


def lower_kernel(func: PrimFunc, needs: LoweringNeeds) -> PrimFunc:
    """``func`` in the form a renderer with these ``needs`` spells as it is. The passes run in this
    order: storage first (its temporaries are ordinary locals for the later passes), then unrolling
    (an unrolled loop with a barrier is split like straight-line code), then the split."""
    func = legalize_storage(func, needs.storage_types)
    if needs.unroll:
        func = unroll_loops(func)
    if needs.split_workgroups:
        func = split_workgroups(func)
    return func
