"""The host functions every runtime supplies to ``call_builtin`` (docs/format.md, "Libraries").

Data-dependent operators run in two steps: a ``*_size`` function returns the output's length,
which the program binds to a symbolic variable with a ``match``; the runtime allocates the
output, and the second function fills it (destination-passing style: inputs, then outputs).
runtime-js implements the same table in JS (runtime-js/src/builtins.js).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _unique_values(x: np.ndarray, sort: bool) -> np.ndarray:
    flat = x.reshape(-1)
    values, first = np.unique(flat, return_index=True)
    return values if sort else flat[np.sort(first)]


def _fill(out: np.ndarray, values: np.ndarray) -> None:
    if out.shape != values.shape:
        raise ValueError(f"the output has shape {out.shape}, the result {values.shape}")
    out[...] = values


def _scalar(value) -> int:
    """A prim argument, or a one-element tensor read at run time."""
    return int(np.asarray(value).reshape(-1)[0])


def _arange_size(start, end, step) -> int:
    start, end, step = _scalar(start), _scalar(end), _scalar(step)
    if step == 0:
        raise ValueError("arange with step 0")
    return max(0, -(-(end - start) // step))


BUILTINS: dict[str, Callable] = {
    "tessera.builtin.unique_size": lambda x: len(_unique_values(x, True)),
    "tessera.builtin.unique_unsorted_size": lambda x: len(_unique_values(x, True)),
    "tessera.builtin.unique": lambda x, out: _fill(out, _unique_values(x, True)),
    "tessera.builtin.unique_unsorted": lambda x, out: _fill(out, _unique_values(x, False)),
    "tessera.builtin.nonzero_size": lambda x: int(np.count_nonzero(x)),
    "tessera.builtin.nonzero": lambda x, out: _fill(out, np.stack(np.nonzero(x)).astype(out.dtype)
                                                      .reshape(x.ndim, -1)),
    "tessera.builtin.mask_select_size": lambda x, mask: int(np.count_nonzero(np.broadcast_to(mask, x.shape))),
    "tessera.builtin.mask_select": lambda x, mask, out: _fill(out, x[np.broadcast_to(mask, x.shape).astype(bool)]),
    "tessera.builtin.arange_size": _arange_size,
    "tessera.builtin.arange": lambda start, end, step, out: _fill(
        out, np.arange(_scalar(start), _scalar(end), _scalar(step)).astype(out.dtype)),
}
