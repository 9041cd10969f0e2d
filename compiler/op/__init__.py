"""Graph operators, each registered once with its deduction and numpy reference.

Build calls with ``tessera.op.<name>(...)`` or ``tessera.op.nn.<name>(...)``,
or by name with ``make_call("nn.softmax", x, axis=-1)``.
"""

from functools import partial

from . import (
    attention,
    bitwise,
    conv,
    create,
    cross_level,
    data_dependent,
    device,
    elementwise,
    kv_cache,
    linear,
    manipulate,
    norm,
    paged,
    quantized,
    reduce,
    sampling,
    shape_tensor,
    vm_builtin,
)
from .cross_level import call_dps_library, call_pure_packed, call_tir
from .registry import get_op, list_ops, make_call, register_op


class _Namespace:
    """``op.nn.softmax`` -> a constructor for the registered op "nn.softmax"."""

    def __init__(self, prefix: str):
        self._prefix = prefix

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        full = self._prefix + name
        get_op(full)  # unknown names fail here, with suggestions
        return partial(make_call, full)


nn = _Namespace("nn.")
_top = _Namespace("")


def __getattr__(name: str):
    return getattr(_top, name)


__all__ = [
    "call_dps_library", "call_pure_packed", "call_tir", "get_op", "list_ops",
    "make_call", "nn", "register_op",
]
