"""The operator registry: each operator is registered once, with everything about it.

An operator module calls ``register_op`` with the op's name (``"matmul"``,
``"nn.softmax"``), its positional inputs, its attributes with defaults, its
struct-info deduction and its numpy reference; later issues add the
legalization to a kernel next to these. ``make_call`` builds a call with
defaults filled in, so every call carries all of its attributes.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from .. import arith
from ..ir.errors import UnknownOpError
from ..ir.expr import Call, Expr, Op, ShapeExpr, Tuple
from ..ir.struct_info import StructInfo

_REGISTRY: dict[str, Op] = {}
PRECISIONS = ("always", "follow", "never", "keep")


def register_op(name: str, *, inputs: tuple[str, ...], deduce: Callable,
                attrs: dict[str, Any] | None = None, reference: Callable | None = None,
                legalize: Callable | None = None, pure: bool = True, variadic: bool = False,
                precision: str = "follow", positional_attrs: tuple[str, ...] = ()) -> Op:
    """``precision``: what a float16 build does with the op (``Op``): "always", "follow", "never"
    or "keep". ``positional_attrs``: attributes that may follow the inputs as positional arguments,
    in the text format and in ``make_call``."""
    if name in _REGISTRY:
        raise ValueError(f"operator {name!r} is registered twice")
    if precision not in PRECISIONS:
        raise ValueError(f"operator {name!r}: precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    unknown = set(positional_attrs) - set(attrs or {})
    if unknown:
        raise ValueError(f"operator {name!r}: positional attributes {', '.join(sorted(unknown))} are not attributes")
    op = Op(name, tuple(inputs), tuple((attrs or {}).items()), deduce, reference, pure, variadic, legalize,
            precision=precision, positional_attrs=tuple(positional_attrs))
    _REGISTRY[name] = op
    return op


def get_op(name: str) -> Op:
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownOpError(f"unknown operator '{name}'{hint}") from None


def list_ops() -> list[str]:
    return sorted(_REGISTRY)


def make_call(name: str, *args, sinfo_args: tuple[StructInfo, ...] = (), **attrs) -> Call:
    """A call of operator ``name``; unknown attributes and wrong arity are errors."""
    op = get_op(name)
    if op.positional_attrs and len(op.inputs) < len(args) <= len(op.inputs) + len(op.positional_attrs):
        extra = dict(zip(op.positional_attrs, args[len(op.inputs):]))
        twice = sorted(set(extra) & set(attrs))
        if twice:
            raise TypeError(f"R.{name} got attribute {', '.join(twice)} twice")
        args, attrs = args[:len(op.inputs)], {**attrs, **extra}
    if not op.variadic and len(args) != len(op.inputs):
        raise TypeError(f"R.{name} takes {len(op.inputs)} inputs ({', '.join(op.inputs)}), "
                        f"got {len(args)}")
    defaults = op.attr_defaults
    unknown = sorted(set(attrs) - set(defaults))
    if unknown:
        allowed = ", ".join(defaults) or "none"
        raise TypeError(f"R.{name} has no attribute {', '.join(unknown)} (attributes: {allowed})")
    values = {key: normalize_attr(attrs.get(key, default)) for key, default in defaults.items()}
    return Call(op, tuple(as_input(a) for a in args), tuple(values.items()), tuple(sinfo_args))


def as_input(value) -> Expr:
    """Python conveniences for inputs: a list of dims is a shape, a tuple of exprs a Tuple."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, Expr) for v in value):
        return Tuple(tuple(value))
    if isinstance(value, (list, tuple)):
        return ShapeExpr(tuple(value))
    raise TypeError(f"cannot use {value!r} as an operator input")


def normalize_attr(value):
    """Attributes are hashable: lists become tuples, symbolic dims stay PrimExprs."""
    if isinstance(value, list | tuple):
        return tuple(normalize_attr(v) for v in value)
    if isinstance(value, arith.IntImm):
        return value.value
    return value
