"""What an operator's ``legalize`` receives, and helpers for writing compute definitions.

``legalize(call, ctx)`` returns a ``ComputeDef``, ``RowDef`` or ``OpaqueDef``
(one kernel), a list of them (one kernel per output field, e.g. ``split``), or
a graph expression that replaces the call (``shape_of`` becomes a shape,
``unique`` a runtime call). ``ctx.inputs`` are the kernel's input buffers for
the call's tensor arguments, ``ctx.output`` the output buffer(s). It describes
the computation only: the schedule rule is picked later, by ``tir.schedule``
when ``legalize_ops`` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import arith
from ..ir.errors import TesseraError
from ..ir.expr import Call
from ..tir.compute import ComputeDef, Reduction, read, wrap
from ..tir.ir import Buffer, Const, TExpr, binary, cast, from_prim, is_float, maximum, minimum, select


class LegalizeError(TesseraError):
    """An operator call that cannot become a kernel for the target."""


@dataclass
class LegalizeContext:
    call: Call
    inputs: list[Buffer]
    outputs: list[Buffer]
    kernel_name: str
    target: object = None

    @property
    def output(self) -> Buffer:
        return self.outputs[0]

    def attr(self, name: str) -> Any:
        return self.call.attr(name)

    def fail(self, reason: str) -> LegalizeError:
        return LegalizeError(f"cannot legalize R.{self.call.op.name}: {reason}")

    def elementwise(self, fn, inputs=None) -> ComputeDef:
        """out[i] = fn(reads of each input at i, broadcast as numpy does). A float16 result is
        computed in float32 from float32 copies of its float16 inputs and rounded once, when
        stored: float16 is a storage type here (WGSL's f16 exp and division lose digits that a
        float16 model's SiLU needs; transform/mixed_precision.py)."""
        inputs = list(self.inputs if inputs is None else inputs)
        out = self.output

        def body(idx):
            reads = [broadcast_read(buf, idx, out.shape) for buf in inputs]
            if out.dtype != "f16":
                return wrap(fn(*reads), out.storage_dtype)  # int8 ... wrap as numpy's do
            return cast(fn(*[cast(r, "f32") if r.dtype == "f16" else r for r in reads]), "f16")

        return ComputeDef(self.kernel_name, tuple(inputs), out, body)


def broadcast_read(buf: Buffer, idx, out_shape) -> TExpr:
    """Read ``buf`` at output indices ``idx``; its trailing dims align with the output's."""
    offset = len(out_shape) - len(buf.shape)
    indices = []
    for axis, dim in enumerate(buf.shape):
        out_dim = out_shape[offset + axis]
        one = arith.Analyzer().as_int(dim) == 1 and arith.Analyzer().as_int(out_dim) != 1
        indices.append(Const(0) if one else idx[offset + axis])
    return read(buf, *indices)


def clamp_index(index: TExpr, extent) -> TExpr:
    """``index`` kept inside [0, extent): reads in unselected branches stay in bounds."""
    return minimum(maximum(index, Const(0)), binary("-", from_prim(extent), Const(1)))


def reduce_def(ctx: LegalizeContext, x: Buffer, axes: tuple[int, ...], keepdims: bool, combiner: str,
               init, finalize=None) -> ComputeDef:
    """out[spatial] = combine over ``axes`` of x; spatial indices skip (or keep as 0) the axes."""
    out = ctx.output
    extents = tuple(x.shape[a] for a in axes)

    def body(idx, ridx):
        spatial = iter(idx)
        reduce = iter(ridx)
        indices = []
        for axis in range(len(x.shape)):
            if axis in axes:
                if keepdims:
                    next(spatial)
                indices.append(next(reduce))
            else:
                indices.append(next(spatial))
        return read(x, *indices)

    return ComputeDef(ctx.kernel_name, (x,), out, body, Reduction(extents, combiner, init), finalize)


def as_value(expr: TExpr, dtype: str) -> TExpr:
    """Convert between kernel value types, bool included."""
    if expr.dtype == dtype:
        return expr
    if dtype == "bool":
        zero = Const(0.0, expr.dtype) if is_float(expr.dtype) else Const(0, expr.dtype)
        return binary("!=", expr, zero)
    if expr.dtype == "bool":
        one = Const(1.0, dtype) if is_float(dtype) else Const(1, dtype)
        zero = Const(0.0, dtype) if is_float(dtype) else Const(0, dtype)
        return select(expr, one, zero)
    return cast(expr, dtype)

