"""Operators whose output shape depends on the data: only the rank is known."""

from __future__ import annotations

import numpy as np

from ..ir.library import register_library_function
from .common import result_tensor, tensor_input
from .cross_level import call_pure_packed
from .registry import register_op


def _deduce_unique(call, ctx):
    x = tensor_input(call, 0, ctx)
    # The number of distinct values is known only at run time: coarse, not an error.
    return result_tensor(None, x.dtype, 1, x.vdevice)


def _unique_reference(x, sorted):
    values, first = np.unique(x.reshape(-1), return_index=True)
    return values if sorted else x.reshape(-1)[np.sort(first)]


# The output size is known only after looking at the data: a runtime library call.
UNIQUE_FUNCTIONS = {True: "tessera.builtin.unique", False: "tessera.builtin.unique_unsorted"}


def _legalize_unique(call, ctx):
    return call_pure_packed(UNIQUE_FUNCTIONS[bool(call.attr("sorted"))], call.args[0],
                            sinfo_args=call.struct_info)


register_op("unique", inputs=("x",), attrs={"sorted": True}, deduce=_deduce_unique,
            reference=_unique_reference, legalize=_legalize_unique)
for _sorted, _name in UNIQUE_FUNCTIONS.items():
    register_library_function(_name, lambda x, _sorted=_sorted: _unique_reference(x, _sorted))
