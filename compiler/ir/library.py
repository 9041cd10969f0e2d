"""Library functions by name: what ``call_dps_library``, ``call_pure_packed`` and ``ExternFunc`` call.

A library function called through ``call_dps_library`` is written in
destination-passing style: it receives the input arrays, then the
preallocated output arrays, then the symbolic values of ``tir_vars``, and
fills the outputs; one called through ``call_pure_packed`` returns its result.
The graph IR refers to these functions only by name. The table of their numpy
implementations lives here, next to the reference interpreter that calls
them, and is filled by the layers above: the operator modules register the
runtime functions their legalization calls (``tessera.op.data_dependent``
registers ``unique``), as an ``Op`` node carries its own numpy reference.
Runtimes bind the same names natively.
"""

from __future__ import annotations

from collections.abc import Callable

_LIBRARY: dict[str, Callable] = {}


def register_library_function(name: str, fn: Callable) -> None:
    if name in _LIBRARY:
        raise ValueError(f"library function {name!r} is registered twice")
    _LIBRARY[name] = fn


def get_library_function(name: str) -> Callable:
    try:
        return _LIBRARY[name]
    except KeyError:
        raise KeyError(f"no library function named '{name}'") from None
