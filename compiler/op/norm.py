"""Normalization: rms_norm (Llama) and layer_norm."""

from __future__ import annotations

import math

import numpy as np

from .. import arith
from ..ir.errors import DeductionError
from ..tir.compute import RowDef
from .common import normalize_axes, on_vdevice, operands_vdevice, require_float, same_dtype, tensor_input
from .registry import register_op


def _deduce_norm(call, ctx):
    x = tensor_input(call, 0, ctx)
    require_float(call, x, ctx)
    params = [tensor_input(call, i, ctx) for i in range(1, len(call.args))]
    same_dtype(call, [x] + params, ctx)
    x = on_vdevice(x, operands_vdevice(call, ctx))
    if x.ndim < 0:
        return x
    axes = normalize_axes(call, call.attr("axes"), x.ndim, ctx)
    for index, param in enumerate(params, start=1):
        if param.ndim >= 0 and param.ndim != len(axes):
            raise DeductionError("rank mismatch", f"{ctx.show(call.args[index])} has rank {param.ndim}, "
                                 f"{call.op.name} over axes {axes} needs rank {len(axes)}")
        if param.shape is None or x.shape is None:
            continue
        for have, axis in zip(param.shape, axes):
            diff = ctx.analyzer.as_int(have - x.shape[axis])
            if diff is not None and diff != 0:
                raise DeductionError("shape mismatch", f"{ctx.show(call.args[index])} has size {have} "
                                     f"where {ctx.show(call.args[0])} has {x.shape[axis]} (axis {axis})")
    return x


def _axes(x, axes):
    return tuple(a % x.ndim for a in ((axes,) if isinstance(axes, int) else axes))


def _rms_norm_reference(x, weight, axes, epsilon):
    wide = x.astype(np.float64)
    axes = _axes(x, axes)
    scale = 1.0 / np.sqrt(np.mean(wide * wide, axis=axes, keepdims=True) + epsilon)
    return (wide * scale * weight.astype(np.float64)).astype(x.dtype)


def _layer_norm_reference(x, gamma, beta, axes, epsilon):
    wide = x.astype(np.float64)
    axes = _axes(x, axes)
    mean = wide.mean(axis=axes, keepdims=True)
    var = ((wide - mean) ** 2).mean(axis=axes, keepdims=True)
    out = (wide - mean) / np.sqrt(var + epsilon) * gamma.astype(np.float64) + beta.astype(np.float64)
    return out.astype(x.dtype)


def _legalize_norm(call, ctx):
    x = ctx.inputs[0]
    ndim = len(x.shape)
    axes = sorted(a % ndim for a in ((call.attr("axes"),) if isinstance(call.attr("axes"), int)
                                     else call.attr("axes")))
    if axes != list(range(ndim - len(axes), ndim)):
        raise ctx.fail(f"kernels normalize over trailing axes, got axes {tuple(axes)} of rank {ndim}")
    one = arith.IntImm(1)
    outer = arith.simplify(math.prod(x.shape[: ndim - len(axes)], start=one))
    row = arith.simplify(math.prod(x.shape[ndim - len(axes):], start=one))
    kind = call.op.name.split(".")[-1]
    return RowDef(ctx.kernel_name, kind, tuple(ctx.inputs), ctx.output, outer, row, one,
                  epsilon=call.attr("epsilon"))


register_op("nn.rms_norm", inputs=("x", "weight"), attrs={"axes": (-1,), "epsilon": 1e-5},
            deduce=_deduce_norm, reference=_rms_norm_reference, legalize=_legalize_norm)
register_op("nn.layer_norm", inputs=("x", "gamma", "beta"), attrs={"axes": (-1,), "epsilon": 1e-5},
            deduce=_deduce_norm, reference=_layer_norm_reference, legalize=_legalize_norm)
