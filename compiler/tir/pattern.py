"""Operator pattern kinds, computed from a compute definition's structure.

As in the Relax paper's "analysis feedback", nothing is written per operator:
the kind follows from how the output's index variables reach the reads.

- elementwise: every read uses exactly the output indices, on a same-shaped input;
- broadcast: every read uses a subset of the output indices, in order (or 0);
- injective: any other one-to-one indexing (transpose, slice, gather, concat);
- reduction: some read runs over reduction variables;
- output-elementwise-fusable: a reduction that combines two different inputs
  over the reduction variables (matmul, conv), whose output can absorb an
  elementwise epilogue;
- opaque: anything the analysis cannot see into.
"""

from __future__ import annotations

from enum import StrEnum

from .compute import ComputeDef, RowDef, TensorRead
from .ir import Load, Local, TExpr, child_exprs


class Pattern(StrEnum):
    ELEMWISE = "elementwise"
    BROADCAST = "broadcast"
    INJECTIVE = "injective"
    REDUCTION = "reduction"
    OUT_EWISE_FUSABLE = "output-elementwise-fusable"
    OPAQUE = "opaque"


def _walk(e: TExpr):
    yield e
    children = e.indices if isinstance(e, TensorRead) else child_exprs(e)
    for child in children:
        yield from _walk(child)


def analyze_pattern(defn) -> Pattern:
    if isinstance(defn, RowDef):
        return Pattern.REDUCTION
    if not isinstance(defn, ComputeDef):
        return Pattern.OPAQUE
    axes = defn.axes()
    reduce_axes = defn.reduce_axes()
    expr = defn.value(axes, reduce_axes)
    reads = [e for e in _walk(expr) if isinstance(e, TensorRead)]
    if defn.reduction is not None:
        reduce_names = {r.name for r in reduce_axes}
        reducing = {id(r.buffer) for r in reads
                    if any(isinstance(x, Local) and x.name in reduce_names
                           for i in r.indices for x in _walk(i))}
        return Pattern.OUT_EWISE_FUSABLE if len(reducing) >= 2 else Pattern.REDUCTION
    if any(isinstance(e, Load) for e in _walk(expr)):
        return Pattern.OPAQUE  # a flat load that bypasses the indexing this analysis reads
    names = [a.name for a in axes]
    if all(_is_identity(r, names, defn.output.shape) for r in reads):
        return Pattern.ELEMWISE
    if all(_is_broadcast(r, names) for r in reads):
        return Pattern.BROADCAST
    return Pattern.INJECTIVE


def _is_identity(r: TensorRead, names, out_shape) -> bool:
    return (len(r.indices) == len(names)
            and all(isinstance(i, Local) and i.name == n for i, n in zip(r.indices, names))
            and tuple(map(str, r.buffer.shape)) == tuple(map(str, out_shape)))


def _is_broadcast(r: TensorRead, names) -> bool:
    positions = []
    for index in r.indices:
        if isinstance(index, Local) and index.name in names:
            positions.append(names.index(index.name))
        elif not (hasattr(index, "value") and index.value == 0):
            return False
    return positions == sorted(positions) and len(set(positions)) == len(positions)
