"""shape_to_tensor: a shape (its dims symbolic expressions over the shape variables) as a 1-D int64
tensor, for a graph that computes with its shapes as data (an ONNX ``Shape`` whose result is also
added, compared or fed to an op that takes a tensor). Its kernel writes each dim, evaluated from the
kernel's shape-variable parameters, so it lowers through the generic compute path on every target.
"""

from __future__ import annotations

import numpy as np

from ..ir.errors import DeductionError
from ..tir.compute import ComputeDef
from ..tir.ir import Const, binary, from_prim, select
from .common import result_tensor, shape_input
from .lowering import as_value
from .registry import register_op


def _deduce_shape_to_tensor(call, ctx):
    shape = shape_input(call, 0, ctx)
    if shape.ndim < 0:
        raise DeductionError("unknown rank", "shape_to_tensor needs a shape of known rank")
    return result_tensor((shape.ndim,), "int64")


def _shape_to_tensor_reference(shape):
    return np.array([int(d) for d in shape], dtype=np.int64).reshape(-1)


def _legalize_shape_to_tensor(call, ctx):
    values = call.args[0].struct_info.values
    if values is None:
        raise ctx.fail("the shape's values are unknown (only its rank is)")
    out = ctx.output

    def body(idx):
        # out[i] = dims[i]: a chain of selects over the position, the last dim the default.
        if not values:  # an empty output: the body never runs
            return as_value(Const(0), out.dtype)
        value = as_value(from_prim(values[-1]), out.dtype)
        for position in range(len(values) - 2, -1, -1):
            value = select(binary("==", idx[0], Const(position)), as_value(from_prim(values[position]), out.dtype),
                           value)
        return value

    return ComputeDef(ctx.kernel_name, (), out, body)


register_op("shape_to_tensor", inputs=("shape",), deduce=_deduce_shape_to_tensor,
            reference=_shape_to_tensor_reference, legalize=_legalize_shape_to_tensor)
