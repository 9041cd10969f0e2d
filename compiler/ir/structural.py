"""Structural equality of IR: modules, graph functions, kernels, any of their nodes.

Two values are structurally equal when they have the same types and the same fields, all the
way down. Graph variables compare by identity elsewhere; here a variable of one side matches
the variable the other side has at the same place the first time it is met (same name, same
struct info), and must match that one everywhere after, so two builds of one function are equal
though their variables are different objects. Fields a node declares ``compare=False`` (deduced
struct info on non-variable graph nodes) are skipped, as ``==`` does.
Floats are equal when they are the same float: nan equals nan, 0.0 differs from -0.0.
Kernel nodes compare field by field too, although their ``==`` is identity.

Adjacent binding blocks that are not dataflow blocks compare as one block: a block boundary
between them means nothing (the text format does not even show it), and passes that turn
dataflow blocks into plain ones leave such boundaries behind.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .expr import BindingBlock, DataflowBlock, Op, SeqExpr, Var


class StructuralMismatch(AssertionError):
    """Two values differ; the message gives the path to the first difference."""


def structural_equal(a, b) -> bool:
    try:
        assert_structural_equal(a, b)
    except StructuralMismatch:
        return False
    return True


def assert_structural_equal(a, b) -> None:
    """Raise ``StructuralMismatch`` naming where ``a`` and ``b`` first differ."""
    _Comparer().equal(a, b, "")


_FIELDS: dict[type, tuple[str, ...]] = {}


def _compared_fields(cls: type) -> tuple[str, ...]:
    if cls not in _FIELDS:
        _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.compare)
    return _FIELDS[cls]


class _Comparer:
    def __init__(self):
        self.vars: dict[int, Var] = {}  # id(left variable) -> right variable
        self.seen_right: dict[int, Var] = {}

    def differ(self, path: str, a, b, why: str = "") -> StructuralMismatch:
        left, right = _short(a), _short(b)
        return StructuralMismatch(f"at {path or 'the root'}: {why or f'{left} != {right}'}")

    def equal(self, a, b, path: str) -> None:
        # No shortcut for ``a is b``: a subtree both sides share still has to map its variables alike.
        if type(a) is not type(b):
            raise self.differ(path, a, b, f"{type(a).__name__} {_short(a)} != {type(b).__name__} {_short(b)}")
        if isinstance(a, Var):
            self.variable(a, b, path)
        elif isinstance(a, SeqExpr):
            self.equal(_merged(a.blocks), _merged(b.blocks), f"{path}.blocks")
            self.equal(a.body, b.body, f"{path}.body")
        elif isinstance(a, Op):
            if a.name != b.name:
                raise self.differ(path, a, b)
        elif isinstance(a, float):
            if not (a == b and math.copysign(1, a) == math.copysign(1, b) or math.isnan(a) and math.isnan(b)):
                raise self.differ(path, a, b)
        elif isinstance(a, np.ndarray):
            if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                raise self.differ(path, a, b, f"arrays differ ({a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)})")
        elif isinstance(a, (tuple, list)):
            if len(a) != len(b):
                raise self.differ(path, a, b, f"{len(a)} items != {len(b)} items")
            for index, (x, y) in enumerate(zip(a, b)):
                self.equal(x, y, f"{path}[{index}]")
        elif isinstance(a, dict):
            if list(a) != list(b):
                raise self.differ(path, a, b, f"keys {list(a)} != {list(b)}")
            for key in a:
                self.equal(a[key], b[key], f"{path}[{key!r}]")
        elif dataclasses.is_dataclass(a):
            for name in _compared_fields(type(a)):
                self.equal(getattr(a, name), getattr(b, name), f"{path}.{name}")
        elif a != b:
            raise self.differ(path, a, b)

    def variable(self, a: Var, b: Var, path: str) -> None:
        bound = self.vars.get(id(a))
        if bound is not None:
            if bound is not b:
                raise self.differ(path, a, b, f"variable {a.name_hint} is matched with a different {b.name_hint}")
            return
        if id(b) in self.seen_right:
            raise self.differ(path, a, b, f"{b.name_hint} is already matched with another variable")
        self.vars[id(a)], self.seen_right[id(b)] = b, a
        # The first meeting compares what the variable is; later ones only who it is.
        for name in _compared_fields(type(a)):
            self.equal(getattr(a, name), getattr(b, name), f"{path}.{name}")


def _merged(blocks) -> list[BindingBlock]:
    out: list[BindingBlock] = []
    for block in blocks:
        if not isinstance(block, DataflowBlock) and out and not isinstance(out[-1], DataflowBlock):
            out[-1] = BindingBlock(out[-1].bindings + block.bindings)
        else:
            out.append(block)
    return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
