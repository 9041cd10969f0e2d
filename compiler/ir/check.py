"""Checking a value against struct info at run time: written once, for the reference interpreter
and every VM of this package (the Python VM reads the executable's struct info back into these
classes and calls the same functions).

A tensor is anything with a ``shape`` and a ``dtype`` (a numpy array, or a tensor a VM keeps on a
device); a shape is a ``ShapeValue``; a prim value an int.
"""

from __future__ import annotations

import numpy as np

from .. import arith
from .errors import RuntimeCheckError
from .printer import print_sinfo
from .struct_info import (
    FuncStructInfo,
    ObjectStructInfo,
    PrimStructInfo,
    ShapeStructInfo,
    StructInfo,
    TensorStructInfo,
    TupleStructInfo,
)

# The function attribute in which inline_functions lists, by variable, what each match_cast that an
# inlined call left checks: {"x_in": "argument 'x_in' of inner_square"}.
INLINED_CHECKS = "inlined_checks"


# The function attribute in which a pass that inserts a match_cast of its own (check_reshapes) says,
# by variable, what the check stands for in the program the user wrote, in full:
# {"lv0_count": "reshape of x to (a, b) in main: the element count of x"}.
DESCRIBED_CHECKS = "described_checks"


def match_cast_origin(func, function: str, var_name: str) -> str | None:
    """What the match_cast binding ``var_name`` of ``func`` (named ``function``) checks when a pass
    put it there, in the user's terms: a check a pass described, or an inlined call's; None for a
    match_cast the user wrote."""
    described = (func.attr(DESCRIBED_CHECKS) or {}).get(var_name)
    return described or inlined_check(func.attr(INLINED_CHECKS), function, var_name)


def inlined_check(checks: dict | None, function: str, var_name: str) -> str | None:
    """What a match_cast binding ``var_name`` of ``function`` checks when an inlined call left it (its
    function's ``INLINED_CHECKS`` are ``checks``), named as the user wrote the call: ``argument 'x_in'
    of inner_square (inlined into main)``; None for any other match_cast."""
    origin = (checks or {}).get(var_name)
    return f"{origin} (inlined into {function})" if origin else None


class ShapeValue(tuple):
    """A shape at run time (distinct from a tuple of values)."""


def _is_tensor(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (int, np.integer))


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def bind_value(sinfo: StructInfo, value, sym: dict[str, int]) -> None:
    """Bind the not-yet-bound plain symbolic dims of ``sinfo`` from ``value``."""
    dims: tuple = ()
    actual: tuple = ()
    if isinstance(sinfo, TensorStructInfo) and _is_tensor(value) and sinfo.shape is not None:
        dims, actual = sinfo.shape, value.shape
    elif isinstance(sinfo, ShapeStructInfo) and isinstance(value, ShapeValue) and sinfo.values is not None:
        dims, actual = sinfo.values, value
    elif isinstance(sinfo, PrimStructInfo) and isinstance(value, (int, np.integer)) and sinfo.value is not None:
        dims, actual = (sinfo.value,), (value,)
    elif isinstance(sinfo, TupleStructInfo) and isinstance(value, tuple):
        for field, item in zip(sinfo.fields, value):
            bind_value(field, item, sym)
    if len(dims) != len(actual):
        return
    for dim, size in zip(dims, actual):
        if isinstance(dim, arith.Var) and dim.name not in sym and _is_int(size):  # else check_value says why
            sym[dim.name] = int(size)


def check_value(value, sinfo: StructInfo, sym: dict[str, int], what) -> None:
    """Raise RuntimeCheckError if ``value`` does not match ``sinfo`` under ``sym``.

    ``what`` names the value; it may be a function, called only to report a mismatch."""
    reason = _mismatch(value, sinfo, sym)
    if reason:
        raise RuntimeCheckError(f"{what() if callable(what) else what}: expected {print_sinfo(sinfo)}, {reason}")


def _mismatch(value, sinfo: StructInfo, sym: dict[str, int]) -> str | None:
    if isinstance(sinfo, ObjectStructInfo):
        return None
    if isinstance(sinfo, TensorStructInfo):
        if not _is_tensor(value):
            return f"got a {type(value).__name__}"
        if sinfo.dtype and np.dtype(value.dtype).name != sinfo.dtype:
            return f"got dtype {np.dtype(value.dtype).name}"
        if sinfo.ndim >= 0 and len(value.shape) != sinfo.ndim:
            return f"got rank {len(value.shape)} (shape {tuple(value.shape)})"
        if sinfo.shape is not None:
            return _dims_mismatch(sinfo.shape, value.shape, sym)
        return None
    if isinstance(sinfo, ShapeStructInfo):
        if isinstance(value, (tuple, list)) and not isinstance(value, ShapeValue):
            # A Python tuple is a tuple value of the program; a shape is passed as a ShapeValue.
            return f"got a {type(value).__name__} (pass a shape as ShapeValue({tuple(value)!r}))"
        if not isinstance(value, ShapeValue):
            return f"got a {type(value).__name__}"
        # A caller's ShapeValue may hold anything; a dimension is a size, so a non-negative integer.
        bad = next((d for d in value if not _is_int(d) or d < 0), None)
        if bad is not None:
            return f"got a shape {tuple(value)!r} with the dimension {bad!r}, which is not a size"
        if sinfo.ndim >= 0 and len(value) != sinfo.ndim:
            return f"got a shape of rank {len(value)}"
        return _dims_mismatch(sinfo.values, value, sym) if sinfo.values is not None else None
    if isinstance(sinfo, PrimStructInfo):
        if not isinstance(value, (int, np.integer)):
            return f"got a {type(value).__name__}"
        return _dims_mismatch((sinfo.value,), (value,), sym) if sinfo.value is not None else None
    if isinstance(sinfo, TupleStructInfo):
        if not isinstance(value, tuple) or isinstance(value, ShapeValue):
            return f"got a {type(value).__name__}"
        if len(value) != len(sinfo.fields):
            return f"got a tuple of {len(value)} fields"
        for index, (field, item) in enumerate(zip(sinfo.fields, value)):
            reason = _mismatch(item, field, sym)
            if reason:
                return f"field {index}: {reason}"
        return None
    if isinstance(sinfo, FuncStructInfo):
        return None if callable(value) else f"got a {type(value).__name__}"
    return f"unknown struct info {sinfo!r}"


def _dims_mismatch(dims, actual, sym: dict[str, int]) -> str | None:
    for axis, (dim, size) in enumerate(zip(dims, actual)):
        try:
            expected = arith.evaluate(dim, sym)
        except KeyError:
            return f"symbolic variable in {dim} is not bound when checking"
        if expected != int(size):
            shown = f"{dim} = {expected}" if not isinstance(dim, arith.IntImm) else str(expected)
            return f"got shape {tuple(int(s) for s in actual)}: dimension {axis} is {int(size)}, not {shown}"
    return None
