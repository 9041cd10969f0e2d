"""Operators whose output shape depends on the data: only the rank is known.

Each legalizes to ``R.call_pure_packed`` of a runtime function returning its result. The VM's
pipeline then splits that call in two (``tessera.transform.data_dependent``): a size function,
whose value a ``match_cast`` binds to a new symbolic variable, then the computation into a tensor
of that size (the Dynamic Dimensions RFC). The reference interpreter runs the one-step form.
"""

from __future__ import annotations

import numpy as np

from ..ir.errors import DeductionError
from ..ir.library import register_library_function
from .common import operands_vdevice, result_tensor, tensor_input
from .cross_level import call_pure_packed
from .registry import register_op


def _deduce_unique(call, ctx):
    x = tensor_input(call, 0, ctx)
    # The number of distinct values is known only at run time: coarse, not an error.
    return result_tensor(None, x.dtype, 1, x.vdevice)


def _unique_reference(x, sorted):
    values, first = np.unique(x.reshape(-1), return_index=True)
    return values if sorted else x.reshape(-1)[np.sort(first)]


UNIQUE_FUNCTIONS = {True: "tessera.builtin.unique", False: "tessera.builtin.unique_unsorted"}


def _legalize_unique(call, ctx):
    return call_pure_packed(UNIQUE_FUNCTIONS[bool(call.attr("sorted"))], call.args[0],
                            sinfo_args=call.struct_info)


register_op("unique", inputs=("x",), attrs={"sorted": True}, deduce=_deduce_unique,
            reference=_unique_reference, legalize=_legalize_unique)


def _deduce_nonzero(call, ctx):
    x = tensor_input(call, 0, ctx)
    if x.ndim < 0:
        raise DeductionError("unknown rank", "nonzero needs the rank of its input")
    # One row of indices per axis; the number of nonzero elements is known only at run time.
    return result_tensor(None, "int64", 2, x.vdevice)


def _nonzero_reference(x):
    return np.stack(np.nonzero(x)).astype(np.int64).reshape(x.ndim, -1)


def _legalize_nonzero(call, ctx):
    return call_pure_packed("tessera.builtin.nonzero", call.args[0], sinfo_args=call.struct_info)


register_op("nonzero", inputs=("x",), deduce=_deduce_nonzero, reference=_nonzero_reference,
            legalize=_legalize_nonzero)


def _deduce_masked_select(call, ctx):
    x, mask = tensor_input(call, 0, ctx), tensor_input(call, 1, ctx)
    if mask.dtype and mask.dtype != "bool":
        raise DeductionError("type mismatch", f"masked_select needs a bool mask, got {mask.dtype}")
    if x.ndim >= 0 and mask.ndim >= 0 and x.ndim != mask.ndim:
        raise DeductionError("shape mismatch", f"masked_select needs a mask of the input's rank {x.ndim}, "
                             f"got rank {mask.ndim}")
    return result_tensor(None, x.dtype, 1, operands_vdevice(call, ctx))


def _masked_select_reference(x, mask):
    return x[mask.astype(bool)]


def _legalize_masked_select(call, ctx):
    return call_pure_packed("tessera.builtin.mask_select", call.args[0], call.args[1], sinfo_args=call.struct_info)


register_op("masked_select", inputs=("x", "mask"), deduce=_deduce_masked_select, reference=_masked_select_reference,
            legalize=_legalize_masked_select)


def _deduce_arange_dynamic(call, ctx):
    end = tensor_input(call, 0, ctx)
    if end.dtype and not end.dtype.startswith("int"):
        raise DeductionError("type mismatch", f"arange_dynamic needs an integer end, got {end.dtype}")
    if end.shape is not None and len(end.shape) != 0:
        raise DeductionError("shape mismatch", "arange_dynamic needs its end as a 0-d tensor")
    if int(call.attr("step")) == 0:
        raise DeductionError("invalid attribute", "arange_dynamic needs a non-zero step")
    return result_tensor(None, "int64", 1, end.vdevice)


def _arange_dynamic_reference(end, start, step):
    return np.arange(start, int(end), step, dtype=np.int64)


def _legalize_arange_dynamic(call, ctx):
    from ..ir.expr import PrimValue

    return call_pure_packed("tessera.builtin.arange", PrimValue(int(call.attr("start"))), call.args[0],
                            PrimValue(int(call.attr("step"))), sinfo_args=call.struct_info)


# ``R.arange`` takes its end as a (symbolic) attribute; this one reads it from a tensor at run time.
# Its values are int64 (as nonzero's indices): cast them once their length is named by a match_cast.
register_op("arange_dynamic", inputs=("end",), attrs={"start": 0, "step": 1},
            deduce=_deduce_arange_dynamic, reference=_arange_dynamic_reference, legalize=_legalize_arange_dynamic)


def _arange_values(start, end, step):
    return np.arange(int(np.asarray(start).reshape(-1)[0]), int(np.asarray(end).reshape(-1)[0]),
                     int(np.asarray(step).reshape(-1)[0]), dtype=np.int64)


# The one-step forms, for the reference interpreter running a legalized module.
for _sorted, _name in UNIQUE_FUNCTIONS.items():
    register_library_function(_name, lambda x, _sorted=_sorted: _unique_reference(x, _sorted))
register_library_function("tessera.builtin.nonzero", _nonzero_reference)
register_library_function("tessera.builtin.mask_select", _masked_select_reference)
register_library_function("tessera.builtin.arange", _arange_values)
