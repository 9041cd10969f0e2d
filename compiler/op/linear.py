"""matmul with numpy semantics: 1-D promotion and batch broadcasting."""

from __future__ import annotations

import numpy as np

from ..ir.errors import DeductionError
from .common import broadcast_shapes, result_tensor, same_dtype, same_vdevice, tensor_input
from .registry import register_op


def _deduce_matmul(call, ctx):
    a, b = tensor_input(call, 0, ctx), tensor_input(call, 1, ctx)
    for arg, info in zip(call.args, (a, b)):
        if info.ndim == 0:
            raise DeductionError("rank mismatch", f"matmul needs tensors of rank >= 1, "
                                 f"{ctx.show(arg)} has rank 0")
    dtype = call.attr("out_dtype") or same_dtype(call, [a, b], ctx)
    vdevice = same_vdevice([a, b])
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


register_op("matmul", inputs=("x1", "x2"), attrs={"out_dtype": ""}, deduce=_deduce_matmul,
            reference=_matmul_reference)
