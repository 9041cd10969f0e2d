"""matmul with numpy semantics: 1-D promotion and batch broadcasting."""

from __future__ import annotations

import numpy as np

from .. import arith
from ..ir.errors import DeductionError
from ..tir.compute import ComputeDef, MatmulInfo, Reduction, accumulate_type, read
from ..tir.ir import Const, binary, cast, from_prim
from .common import broadcast_shapes, result_tensor, same_dtype, same_vdevice, tensor_input
from .registry import register_op


def _deduce_matmul(call, ctx):
    a, b = tensor_input(call, 0, ctx), tensor_input(call, 1, ctx)
    for arg, info in zip(call.args, (a, b)):
        if info.ndim == 0:
            raise DeductionError("rank mismatch", f"matmul needs tensors of rank >= 1, "
                                 f"{ctx.show(arg)} has rank 0")
    dtype = call.attr("out_dtype") or same_dtype(call, [a, b], ctx)
    vdevice = same_vdevice([a, b], call, ctx)
    if a.shape is None or b.shape is None:
        return result_tensor(None, dtype, _result_ndim(a.ndim, b.ndim), vdevice)
    a_shape = (1,) + a.shape if a.ndim == 1 else a.shape
    b_shape = b.shape + (1,) if b.ndim == 1 else b.shape
    k_a, k_b = a_shape[-1], b_shape[-2]
    if not ctx.analyzer.prove_equal(k_a, k_b):
        if ctx.analyzer.as_int(k_a - k_b) is not None:
            raise DeductionError("shape mismatch", f"{ctx.show(call.args[0])} has {_text(a.shape)}, "
                                 f"{ctx.show(call.args[1])} has {_text(b.shape)}")
    batch = broadcast_shapes(call, [a_shape[:-2], b_shape[:-2]], ctx)
    if batch is None:
        return result_tensor(None, dtype, _result_ndim(a.ndim, b.ndim), vdevice)
    out = tuple(batch) + ((a_shape[-2],) if a.ndim > 1 else ()) + ((b_shape[-1],) if b.ndim > 1 else ())
    return result_tensor(out, dtype, vdevice=vdevice)


def _result_ndim(a: int, b: int) -> int:
    if a < 0 or b < 0:
        return -1
    if a == 1 and b == 1:
        return 0
    if a == 1 or b == 1:
        return max(a, b) - 1
    return max(a, b)


def _text(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + (",)" if len(shape) == 1 else ")")


def _matmul_reference(a, b, out_dtype):
    dtype = out_dtype or np.result_type(a, b)
    if np.issubdtype(a.dtype, np.floating):
        # Accumulate in float64: the reference must be more precise than any kernel.
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dtype)
    return np.matmul(a, b).astype(dtype)


def _legalize_matmul(call, ctx):
    a, b = ctx.inputs
    out = ctx.output
    a_shape = ((arith.IntImm(1),) + a.shape) if len(a.shape) == 1 else a.shape
    b_shape = (b.shape + (arith.IntImm(1),)) if len(b.shape) == 1 else b.shape
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    batch_rank = max(len(a_shape), len(b_shape)) - 2
    batch_shape = tuple(_batch_dims(a_shape[:-2], b_shape[:-2], batch_rank))

    def matrix_offset(shape):
        own = shape[:-2]
        matrix = arith.simplify(shape[-2] * shape[-1])

        def offset(batch_indices):
            lead = batch_rank - len(own)
            flat = Const(0)
            for axis, dim in enumerate(own):
                idx = Const(0) if arith.Analyzer().as_int(dim) == 1 else batch_indices[lead + axis]
                flat = binary("+", binary("*", flat, from_prim(dim)), idx)
            return binary("*", flat, from_prim(matrix))

        return offset

    info = MatmulInfo(a, b, batch_shape, m, n, k, matrix_offset(a_shape), matrix_offset(b_shape),
                      a_vector=len(a.shape) == 1, b_vector=len(b.shape) == 1)
    # The computation itself, for analysis and for any schedule that wants it.
    out_rank = len(out.shape)

    def body(idx, ridx):
        (kk,) = ridx
        batch = list(idx[: out_rank - (len(a.shape) > 1) - (len(b.shape) > 1)])
        row = [idx[len(batch)]] if len(a.shape) > 1 else []
        col = [idx[-1]] if len(b.shape) > 1 else []
        a_idx = _broadcast_batch(a.shape[:-2], batch) + row + [kk] if len(a.shape) > 1 else [kk]
        b_idx = _broadcast_batch(b.shape[:-2], batch) + [kk] + col if len(b.shape) > 1 else [kk]
        acc = accumulate_type(out.dtype)
        return binary("*", cast(read(a, *a_idx), acc), cast(read(b, *b_idx), acc))

    return ComputeDef(ctx.kernel_name, (a, b), out, body, Reduction((k,), "sum", 0.0 if out.dtype != "i32" else 0),
                      accumulate_dtype=accumulate_type(out.dtype), attrs={"matmul": info})


def _batch_dims(a_batch, b_batch, rank):
    a_batch = (arith.IntImm(1),) * (rank - len(a_batch)) + tuple(a_batch)
    b_batch = (arith.IntImm(1),) * (rank - len(b_batch)) + tuple(b_batch)
    for x, y in zip(a_batch, b_batch):
        yield y if arith.Analyzer().as_int(x) == 1 else x


def _broadcast_batch(own, batch):
    lead = len(batch) - len(own)
    return [Const(0) if arith.Analyzer().as_int(dim) == 1 else batch[lead + axis] for axis, dim in enumerate(own)]


register_op("matmul", inputs=("x1", "x2"), attrs={"out_dtype": ""}, deduce=_deduce_matmul,
            reference=_matmul_reference, legalize=_legalize_matmul, precision="always")
