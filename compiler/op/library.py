"""Library functions reachable through ``call_dps_library``, by name.

A library function is written in destination-passing style: it receives the
input arrays, then the preallocated output arrays, then the symbolic values
of ``tir_vars``, and fills the outputs. The reference interpreter calls the
numpy implementation registered here; runtimes bind the same names natively.
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
