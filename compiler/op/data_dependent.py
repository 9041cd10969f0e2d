"""Operators whose output shape depends on the data: only the rank is known."""

from __future__ import annotations

import numpy as np

from .common import result_tensor, tensor_input
from .registry import register_op


def _deduce_unique(call, ctx):
    x = tensor_input(call, 0, ctx)
    # The number of distinct values is known only at run time: coarse, not an error.
    return result_tensor(None, x.dtype, 1, x.vdevice)


def _unique_reference(x, sorted):
    values, first = np.unique(x.reshape(-1), return_index=True)
    return values if sorted else x.reshape(-1)[np.sort(first)]


register_op("unique", inputs=("x",), attrs={"sorted": True}, deduce=_deduce_unique,
            reference=_unique_reference)
