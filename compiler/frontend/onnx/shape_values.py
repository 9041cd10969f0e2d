"""Shape values: small integer tensors whose elements are known at import time as shape expressions.

Exporters compute shapes at run time: ``Shape`` -> ``Gather`` -> ``Unsqueeze`` -> ``Concat`` ->
``Reshape``, ``Range`` up to a dimension, ``Expand`` to the shape of another tensor. With symbolic
dimensions these are not constants, but each element is an expression over the shape variables
(``batch``, ``seq * 12``). The importer tracks them as ``SymbolicInts`` and propagates them through
the ops such subgraphs use, so that Reshape, Expand, ConstantOfShape, Range, Slice and Tile get
symbolic shapes. A value that is also used as a real tensor is materialized (``R.shape_to_tensor``);
one that truly depends on data stays a run-time tensor, which those converters refuse clearly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ... import arith
from ... import op as R
from ...ir.expr import Constant, ShapeExpr
from ...ir.struct_info import TensorStructInfo

INT_DTYPES = ("int64", "int32")


@dataclass(eq=False)
class SymbolicInts:
    """A 0-d or 1-d int64/int32 tensor known element by element as shape expressions."""

    values: tuple
    scalar: bool = False
    dtype: str = "int64"
    materialized: dict = field(default_factory=dict)  # id of a block list -> (that list, its tensor there)

    @property
    def struct_info(self) -> TensorStructInfo:
        shape = () if self.scalar else (arith.IntImm(len(self.values)),)
        return TensorStructInfo(shape, self.dtype)

    def materialize(self, emit, block) -> object:
        """The value as a tensor, emitted once per block (``block``: the builder's list of blocks
        being filled, kept here so that its id names it while the entry lives)."""
        entry = self.materialized.get(id(block))
        if entry is None or entry[0] is not block:
            value = R.shape_to_tensor(ShapeExpr(tuple(self.values)))
            if self.scalar:
                value = R.reshape(value, ShapeExpr(()))
            if self.dtype != "int64":
                value = R.astype(value, dtype=self.dtype)
            entry = self.materialized[id(block)] = (block, emit(value))
        return entry[1]


def elements(value) -> tuple[list, bool, str] | None:
    """(elements as PrimExprs, is it 0-d, dtype) of a shape value or a small integer constant."""
    if isinstance(value, SymbolicInts):
        return list(value.values), value.scalar, value.dtype
    if isinstance(value, Constant):
        data = value.data
        if data.dtype.kind in "iu" and data.ndim <= 1 and data.size <= 64:
            return [arith.IntImm(int(v)) for v in data.reshape(-1)], data.ndim == 0, str(data.dtype)
    return None


def make(values, scalar: bool, dtype: str, analyzer: arith.Analyzer):
    """A Constant when every element is a known int, else a SymbolicInts."""
    values = [analyzer.simplify(arith.as_expr(v)) for v in values]
    known = [analyzer.as_int(v) for v in values]
    if all(k is not None for k in known):
        data = np.asarray(known, dtype=dtype)
        return Constant(data.reshape(()) if scalar else data)
    return SymbolicInts(tuple(values), scalar, dtype)


def propagate(op_type: str, inputs: list, attrs: dict, analyzer: arith.Analyzer, opset: int):
    """The node's single result as a shape value, or None when it is not one (the converter then
    runs on materialized tensors). Called only when some input is a SymbolicInts, or for Shape and
    Size of a tensor with symbolic dims."""
    handler = _HANDLERS.get(op_type)
    if handler is None:
        return None
    try:
        return handler(inputs, attrs, analyzer, opset)
    except (ValueError, IndexError, TypeError, ZeroDivisionError):
        return None  # left to the converter, which names the problem


def _shape(inputs, attrs, analyzer, opset):
    sinfo = getattr(inputs[0], "struct_info", None)
    if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None:
        return None
    dims = list(sinfo.shape)
    start, end = attrs.get("start", 0), attrs.get("end", len(dims))
    return make(dims[slice(start, end)], False, "int64", analyzer)


def _size(inputs, attrs, analyzer, opset):
    sinfo = getattr(inputs[0], "struct_info", None)
    if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None:
        return None
    total = arith.IntImm(1)
    for dim in sinfo.shape:
        total = total * dim
    return make([total], True, "int64", analyzer)


def _gather(inputs, attrs, analyzer, opset):
    data, indices = elements(inputs[0]), elements(inputs[1])
    if data is None or indices is None or data[1] or attrs.get("axis", 0) not in (0, -1):
        return None
    if not isinstance(inputs[1], Constant):
        return None
    values = data[0]
    picked = [values[int(i.value)] for i in indices[0]]
    return make(picked, indices[1], data[2], analyzer)


def _slice(inputs, attrs, analyzer, opset):
    data = elements(inputs[0])
    if data is None or data[1]:
        return None
    if opset < 10:
        return None
    bounds = [elements(v) if v is not None else None for v in (list(inputs[1:5]) + [None] * 4)[:4]]
    if bounds[0] is None or bounds[1] is None:
        return None
    ints = []
    for bound in bounds:
        if bound is None:
            ints.append(None)
            continue
        known = [analyzer.as_int(v) for v in bound[0]]
        if any(k is None for k in known):
            return None
        ints.append(known)
    starts, ends, axes, steps = ints
    if axes is not None and any(a not in (0, -1) for a in axes):
        return None
    step = steps[0] if steps else 1
    return make(data[0][slice(starts[0], ends[0], step)], False, data[2], analyzer)


def _concat(inputs, attrs, analyzer, opset):
    parts = [elements(v) for v in inputs]
    if any(p is None or p[1] for p in parts):
        return None
    return make([v for p in parts for v in p[0]], False, parts[0][2], analyzer)


def _axes(inputs, attrs):
    if "axes" in attrs:
        return list(attrs["axes"])
    if len(inputs) > 1 and inputs[1] is not None:
        found = elements(inputs[1])
        if found is None or not isinstance(inputs[1], Constant):
            raise ValueError("axes unknown")
        return [int(v.value) for v in found[0]]
    return None


def _unsqueeze(inputs, attrs, analyzer, opset):
    data = elements(inputs[0])
    if data is None or not data[1] or _axes(inputs, attrs) not in ([0], [-1]):
        return None
    return make(data[0], False, data[2], analyzer)


def _squeeze(inputs, attrs, analyzer, opset):
    data = elements(inputs[0])
    if data is None or data[1] or len(data[0]) != 1 or _axes(inputs, attrs) not in (None, [0], [-1]):
        return None
    return make(data[0], True, data[2], analyzer)


def _reshape(inputs, attrs, analyzer, opset):
    data, target = elements(inputs[0]), elements(inputs[1])
    if data is None or target is None or not isinstance(inputs[1], Constant):
        return None
    shape = [int(v.value) for v in target[0]]
    if shape == [] and len(data[0]) == 1:
        return make(data[0], True, data[2], analyzer)
    if len(shape) == 1 and shape[0] in (-1, len(data[0])):
        return make(data[0], False, data[2], analyzer)
    return None


def _identity(inputs, attrs, analyzer, opset):
    data = elements(inputs[0])
    return None if data is None else make(data[0], data[1], data[2], analyzer)


def _cast(inputs, attrs, analyzer, opset):
    from .loader import DTYPES

    data = elements(inputs[0])
    dtype = DTYPES.get(int(attrs.get("to", 0)))
    if data is None or dtype not in INT_DTYPES:
        return None
    return make(data[0], data[1], dtype, analyzer)


def _broadcast(parts):
    lengths = {len(p[0]) for p in parts if not (p[1] or len(p[0]) == 1)}
    if len(lengths) > 1:
        raise ValueError("lengths differ")
    length = lengths.pop() if lengths else (1 if any(not p[1] for p in parts) else None)
    scalar = all(p[1] for p in parts)
    count = 1 if length is None else length
    columns = [[p[0][0]] * count if len(p[0]) == 1 else p[0] for p in parts]
    return list(zip(*columns)), scalar


def _trunc_div(a, b, analyzer):
    """ONNX's integer division truncates; floor division agrees when both are non-negative."""
    x, y = analyzer.as_int(a), analyzer.as_int(b)
    if x is not None and y is not None:
        return arith.IntImm(abs(x) // abs(y) * (1 if (x >= 0) == (y > 0) else -1)) if y else None
    if y is not None and y > 0 and analyzer.prove_greater_equal(a, 0):
        return a // y
    if analyzer.prove_greater_equal(a, 0) and analyzer.prove_greater_equal(b, 1):
        return a // b
    return None


def _arithmetic(kind):
    def handler(inputs, attrs, analyzer, opset):
        parts = [elements(v) for v in inputs]
        if any(p is None for p in parts):
            return None
        rows, scalar = _broadcast(parts)
        out = []
        for row in rows:
            if kind == "Div":
                value = _trunc_div(row[0], row[1], analyzer)
                if value is None:
                    return None
            elif kind == "Add":
                value = row[0] + row[1]
            elif kind == "Sub":
                value = row[0] - row[1]
            elif kind == "Mul":
                value = row[0] * row[1]
            elif kind == "Max":
                value = row[0]
                for other in row[1:]:
                    value = arith.max_expr(value, other)
            elif kind == "Min":
                value = row[0]
                for other in row[1:]:
                    value = arith.min_expr(value, other)
            elif kind == "Neg":
                value = -row[0]
            else:
                return None
            out.append(value)
        return make(out, scalar, parts[0][2], analyzer)

    return handler


def _compare(kind):
    def handler(inputs, attrs, analyzer, opset):
        parts = [elements(v) for v in inputs]
        if any(p is None for p in parts):
            return None
        rows, scalar = _broadcast(parts)
        out = []
        for a, b in rows:
            difference = analyzer.as_int(analyzer.simplify(a - b))
            if difference is None:
                if kind == "Equal" and (analyzer.prove_less(a, b) or analyzer.prove_less(b, a)):
                    out.append(False)
                    continue
                return None
            out.append({"Equal": difference == 0, "Less": difference < 0, "Greater": difference > 0,
                        "LessOrEqual": difference <= 0, "GreaterOrEqual": difference >= 0}[kind])
        data = np.asarray(out, dtype=bool)
        return Constant(data.reshape(()) if scalar else data)

    return handler


def _where(inputs, attrs, analyzer, opset):
    if not isinstance(inputs[0], Constant) or inputs[0].data.dtype != bool:
        return None
    condition = [arith.IntImm(int(v)) for v in inputs[0].data.reshape(-1)]
    parts = [(condition, inputs[0].data.ndim == 0, "bool"), elements(inputs[1]), elements(inputs[2])]
    if any(p is None for p in parts):
        return None
    rows, scalar = _broadcast(parts)
    return make([a if c.value else b for c, a, b in rows], scalar, parts[1][2], analyzer)


_HANDLERS = {
    "Shape": _shape, "Size": _size, "Gather": _gather, "Slice": _slice, "Concat": _concat,
    "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Reshape": _reshape, "Identity": _identity,
    "Cast": _cast, "Where": _where,
    **{kind: _arithmetic(kind) for kind in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Neg")},
    **{kind: _compare(kind) for kind in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")},
}
