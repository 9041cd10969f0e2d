"""The converters: each ONNX op in terms of the IR's operators (tessera.op).

Importing this module registers them. Semantics follow the ONNX operator docs for the opset each
converter names; where an opset changed an op (Softmax's axis at 13, attributes that became inputs),
there is one converter per version."""

from __future__ import annotations

import numpy as np

from ... import arith
from ... import op as R
from ...ir.expr import Constant, ShapeExpr, Tuple, TupleGetItem
from .loader import ir_dtype
from .registry import NodeContext, converter

FLOATS = ("float16", "float32", "float64")


def const(value, dtype: str) -> Constant:
    return Constant(np.asarray(value, dtype=dtype))


def scalar_like(ctx: NodeContext, value, index: int = 0) -> Constant:
    return const(value, ctx.dtype(index))


def require_float(ctx: NodeContext, index: int = 0) -> None:
    if ctx.dtype(index) not in FLOATS:
        raise ctx.error(f"input {index} is {ctx.dtype(index)}; the IR computes this op on floats only")


def axis_of(ctx: NodeContext, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}", "invalid")
    return axis + rank if axis < 0 else axis


def all_constant(ctx: NodeContext) -> bool:
    return all(isinstance(value, Constant) for value in ctx.inputs if value is not None)


# -- elementwise ----------------------------------------------------------------------------------

_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Equal": "equal",
           "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal", "GreaterOrEqual": "greater_equal",
           "And": "logical_and", "Or": "logical_or"}


def _binary(name):
    def convert(ctx: NodeContext):
        return R.make_call(name, ctx.input(0), ctx.input(1))

    return convert


for _onnx, _ir in _BINARY.items():
    converter(_onnx)(_binary(_ir))


@converter("Pow")
def _pow(ctx: NodeContext):
    exponent = ctx.input(1)
    if ctx.dtype(1) != ctx.dtype(0):  # ONNX lets the exponent have a type of its own
        exponent = R.astype(exponent, dtype=ctx.dtype(0))
    return R.power(ctx.input(0), exponent)


_UNARY = {"Abs": "abs", "Neg": "negative", "Sqrt": "sqrt", "Exp": "exp", "Log": "log", "Relu": "nn.relu",
          "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Sin": "sin", "Cos": "cos", "Floor": "floor",
          "Ceil": "ceil", "Round": "round"}
_FLOAT_ONLY = {"sqrt", "exp", "log", "sigmoid", "tanh", "erf", "sin", "cos", "floor", "ceil", "round"}


def _unary(name):
    def convert(ctx: NodeContext):
        if name in _FLOAT_ONLY:
            require_float(ctx)
        return R.make_call(name, ctx.input(0))

    return convert


for _onnx, _ir in _UNARY.items():
    converter(_onnx)(_unary(_ir))


@converter("Reciprocal")
def _reciprocal(ctx: NodeContext):
    require_float(ctx)
    return R.divide(scalar_like(ctx, 1.0), ctx.input(0))


@converter("Not")
def _not(ctx: NodeContext):
    return R.equal(ctx.input(0), const(False, "bool"))


@converter("LeakyRelu", attrs=("alpha",))
def _leaky_relu(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    alpha = scalar_like(ctx, ctx.attr("alpha", 0.01))
    return R.where(R.less(x, scalar_like(ctx, 0.0)), R.multiply(x, alpha), x)


@converter("PRelu")
def _prelu(ctx: NodeContext):
    x = ctx.input(0)
    return R.where(R.less(x, scalar_like(ctx, 0)), R.multiply(x, ctx.input(1)), x)


@converter("Elu", attrs=("alpha",))
def _elu(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    alpha = scalar_like(ctx, ctx.attr("alpha", 1.0))
    negative = R.multiply(alpha, R.subtract(R.exp(x), scalar_like(ctx, 1.0)))
    return R.where(R.less(x, scalar_like(ctx, 0.0)), negative, x)


@converter("Selu", attrs=("alpha", "gamma"))
def _selu(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    alpha = scalar_like(ctx, ctx.attr("alpha", 1.67326319217681884765625))
    gamma = scalar_like(ctx, ctx.attr("gamma", 1.05070102214813232421875))
    negative = R.multiply(alpha, R.subtract(R.exp(x), scalar_like(ctx, 1.0)))
    return R.multiply(gamma, R.where(R.less_equal(x, scalar_like(ctx, 0.0)), negative, x))


@converter("HardSigmoid", attrs=("alpha", "beta"))
def _hard_sigmoid(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    y = R.add(R.multiply(x, scalar_like(ctx, ctx.attr("alpha", 0.2))), scalar_like(ctx, ctx.attr("beta", 0.5)))
    return R.clip(y, min=0.0, max=1.0)


@converter("HardSwish", since=14)
def _hard_swish(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    gate = R.clip(R.add(R.multiply(x, scalar_like(ctx, 1.0 / 6.0)), scalar_like(ctx, 0.5)), min=0.0, max=1.0)
    return R.multiply(x, gate)


@converter("Softplus")
def _softplus(ctx: NodeContext):
    require_float(ctx)
    return R.log(R.add(R.exp(ctx.input(0)), scalar_like(ctx, 1.0)))


@converter("Softsign")
def _softsign(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    return R.divide(x, R.add(R.abs(x), scalar_like(ctx, 1.0)))


@converter("Gelu", since=20, attrs=("approximate",))
def _gelu(ctx: NodeContext):
    require_float(ctx)
    approximate = ctx.attr("approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    if approximate not in ("none", "tanh"):
        raise ctx.error(f"approximate={approximate!r} is not supported (none, tanh)")
    return (R.nn.gelu_tanh if approximate == "tanh" else R.nn.gelu)(ctx.input(0))


@converter("Sign")
def _sign(ctx: NodeContext):
    x = ctx.input(0)
    zero, one = scalar_like(ctx, 0), scalar_like(ctx, 1)
    negative = R.where(R.less(x, zero), scalar_like(ctx, -1), zero)
    return R.where(R.greater(x, zero), one, negative)


def _variadic(name):
    def convert(ctx: NodeContext):
        inputs = [ctx.input(i) for i in range(len(ctx.inputs))]
        result = inputs[0]
        for other in inputs[1:]:
            result = R.make_call(name, result, other)
        if ctx.node.op_type == "Mean":
            require_float(ctx)
            result = R.divide(result, scalar_like(ctx, float(len(inputs))))
        elif len(inputs) == 1:  # a lone input is passed through as a new value
            result = R.add(result, scalar_like(ctx, 0))
        return result

    return convert


converter("Sum")(_variadic("add"))
converter("Mean")(_variadic("add"))
converter("Max")(_variadic("maximum"))
converter("Min")(_variadic("minimum"))


@converter("Where")
def _where(ctx: NodeContext):
    return R.where(ctx.input(0), ctx.input(1), ctx.input(2))


@converter("Clip")
def _clip(ctx: NodeContext):
    """Opset 11 took min and max as inputs (optional); as tensors they may broadcast, so they are
    maximum/minimum, which also keeps integer inputs integer."""
    x = ctx.input(0)
    if ctx.has_input(1):
        x = R.maximum(x, ctx.input(1))
    if ctx.has_input(2):
        x = R.minimum(x, ctx.input(2))
    if not ctx.has_input(1) and not ctx.has_input(2):
        x = R.add(x, scalar_like(ctx, 0))
    return x


@converter("Cast", attrs=("to", "saturate", "round_mode"))
def _cast(ctx: NodeContext):
    dtype = ir_dtype(int(ctx.attr("to")), f"{ctx.node.op_type} 'to'")
    if isinstance(ctx.inputs[0], Constant):
        return Constant(ctx.inputs[0].data.astype(dtype))
    return R.astype(ctx.input(0), dtype=dtype)


@converter("CastLike", since=15, attrs=("saturate", "round_mode"))
def _cast_like(ctx: NodeContext):
    dtype = ctx.dtype(1)
    if isinstance(ctx.inputs[0], Constant):
        return Constant(ctx.inputs[0].data.astype(dtype))
    return R.astype(ctx.input(0), dtype=dtype)


@converter("Identity")
def _identity(ctx: NodeContext):
    return ctx.input(0)


@converter("Dropout", since=12, attrs=("seed",))
def _dropout(ctx: NodeContext):
    """Inference: the input unchanged, unless training_mode is a true constant."""
    if ctx.has_input(2):
        training = ctx.constant(2, "training_mode")
        if bool(np.asarray(training)):
            raise ctx.error("training_mode=True is not supported (inference only)")
    if len([o for o in ctx.node.output if o]) > 1:
        raise ctx.error("the mask output is not supported")
    return ctx.input(0)


# -- constants and shapes -------------------------------------------------------------------------


@converter("Constant", attrs=("value", "value_float", "value_floats", "value_int", "value_ints"))
def _constant(ctx: NodeContext):
    from .loader import tensor_to_array

    if "value" in ctx.attrs:
        return Constant(tensor_to_array(ctx.attrs["value"], None, f"{ctx.node.op_type} value"))
    for name, dtype in (("value_float", "float32"), ("value_floats", "float32"), ("value_int", "int64"),
                        ("value_ints", "int64")):
        if name in ctx.attrs:
            return const(ctx.attrs[name], dtype)
    raise ctx.error("the value is missing or of an unsupported kind (sparse_value, strings)")


@converter("Shape", attrs=())
def _shape_11(ctx: NodeContext):
    return const(ctx.static_dims(0, "Shape"), "int64")


@converter("Shape", since=15, attrs=("start", "end"))
def _shape_15(ctx: NodeContext):
    dims = ctx.static_dims(0, "Shape")
    start, end = ctx.attr("start", 0), ctx.attr("end", len(dims))
    return const(dims[slice(start, end)], "int64")


@converter("Size")
def _size(ctx: NodeContext):
    return const(int(np.prod(ctx.static_dims(0, "Size"))), "int64")


@converter("Gather", attrs=("axis",))
def _gather(ctx: NodeContext):
    rank = ctx.rank(0)
    axis = axis_of(ctx, ctx.attr("axis", 0), rank)
    if all_constant(ctx):
        return Constant(np.take(ctx.inputs[0].data, ctx.inputs[1].data, axis=axis))
    indices = ctx.input(1)
    if ctx.dtype(1) not in ("int32", "int64"):
        raise ctx.error(f"indices of dtype {ctx.dtype(1)} are not supported")
    if isinstance(indices, Constant):  # negative indices count from the end
        size = ctx.static_dims(0, "Gather with negative indices")[axis]
        indices = Constant(np.where(indices.data < 0, indices.data + size, indices.data).astype(indices.data.dtype))
    else:  # negative indices count from the end: wrapped at run time
        size = const(ctx.static_dims(0, "Gather with run-time indices")[axis], ctx.dtype(1))
        indices = R.where(R.less(indices, const(0, ctx.dtype(1))), R.add(indices, size), indices)
    return R.take(ctx.input(0), indices, axis=axis)


# -- linear algebra -------------------------------------------------------------------------------


@converter("MatMul")
def _matmul(ctx: NodeContext):
    return R.matmul(ctx.input(0), ctx.input(1))


@converter("Gemm", attrs=("alpha", "beta", "transA", "transB"))
def _gemm(ctx: NodeContext):
    a, b = ctx.input(0), ctx.input(1)
    if ctx.attr("transA", 0):
        a = R.permute_dims(a, axes=(1, 0))
    if ctx.attr("transB", 0):
        b = R.permute_dims(b, axes=(1, 0))
    y = R.matmul(a, b)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if alpha != 1.0:
        y = R.multiply(y, scalar_like(ctx, alpha))
    if ctx.has_input(2):
        c = ctx.input(2)
        if beta != 1.0:
            c = R.multiply(c, scalar_like(ctx, beta, 2))
        y = R.add(y, c)
    return y


# -- convolution and pooling ----------------------------------------------------------------------


def _window(ctx: NodeContext, kernel: tuple[int, ...], spatial: tuple[int, ...]):
    """Strides, dilations and (top, left, bottom, right) padding of a 2-D window op."""
    strides = ctx.ints("strides", (1,) * len(kernel))
    dilations = ctx.ints("dilations", (1,) * len(kernel))
    auto_pad = ctx.attr("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad in ("NOTSET", ""):
        pads = ctx.ints("pads", (0,) * (2 * len(kernel)))
    elif auto_pad == "VALID":
        pads = (0,) * (2 * len(kernel))
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else large)
            ends.append(large if auto_pad == "SAME_UPPER" else small)
        pads = tuple(begins) + tuple(ends)
    else:
        raise ctx.error(f"auto_pad={auto_pad!r} is not supported")
    return strides, dilations, pads


def _require_2d(ctx: NodeContext) -> bool:
    """True for a 1-D op (rank 3), which is made 2-D here: a height of 1 on the data and weight,
    and the window attributes given a leading 1 (or 0 for pads). The caller squeezes it back."""
    rank = ctx.rank(0)
    if rank == 4:
        return False
    if rank != 3:
        raise ctx.error(f"only 1-D and 2-D (rank-3 and rank-4) inputs are supported, input 0 has rank {rank}")
    ctx.inputs = list(ctx.inputs)
    ctx.inputs[0] = ctx.emit(R.expand_dims(ctx.input(0), axis=2))
    if ctx.node.op_type in ("Conv", "ConvTranspose"):
        weight = ctx.inputs[1]
        ctx.inputs[1] = Constant(weight.data[:, :, None]) if isinstance(weight, Constant) \
            else ctx.emit(R.expand_dims(weight, axis=2))
    ctx.attrs = dict(ctx.attrs)
    for name in ("kernel_shape", "strides", "dilations", "output_shape"):
        if name in ctx.attrs:
            ctx.attrs[name] = (1, *ctx.attrs[name])
    if "output_padding" in ctx.attrs:
        ctx.attrs["output_padding"] = (0, *ctx.attrs["output_padding"])
    if "pads" in ctx.attrs:
        begin, end = ctx.attrs["pads"]
        ctx.attrs["pads"] = (0, begin, 0, end)
    return True


@converter("Conv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def _conv(ctx: NodeContext):
    one_d = _require_2d(ctx)
    kernel = ctx.static_dims(1, "Conv")[2:]
    spatial = ctx.static_dims(0, "Conv")[2:] if ctx.attr("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") \
        else (0, 0)
    strides, dilations, pads = _window(ctx, kernel, spatial)
    y = R.nn.conv2d(ctx.input(0), ctx.input(1), strides=strides, padding=pads, dilation=dilations,
                    groups=int(ctx.attr("group", 1)))
    if ctx.has_input(2):
        y = R.add(y, R.reshape(ctx.input(2), (1, -1, 1, 1)))
    return R.squeeze(y, axis=(2,)) if one_d else y


def _pool(kind: str):
    def convert(ctx: NodeContext):
        one_d = _require_2d(ctx)
        if len([o for o in ctx.node.output if o]) > 1:
            raise ctx.error("the Indices output is not supported")
        if ctx.attr("storage_order", 0):
            raise ctx.error("storage_order=1 is not supported")
        kernel = ctx.ints("kernel_shape")
        spatial = ctx.static_dims(0, "auto_pad")[2:] if ctx.attr("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") \
            else (0, 0)
        strides, dilations, pads = _window(ctx, kernel, spatial)
        attrs = dict(pool_size=kernel, strides=strides, padding=pads, dilation=dilations,
                     ceil_mode=bool(ctx.attr("ceil_mode", 0)))
        if kind == "max":
            y = R.nn.max_pool2d(ctx.input(0), **attrs)
        else:
            y = R.nn.avg_pool2d(ctx.input(0), count_include_pad=bool(ctx.attr("count_include_pad", 0)), **attrs)
        if attrs["ceil_mode"]:
            y = _drop_windows_in_padding(ctx, y, kernel, strides, dilations, pads)
        return R.squeeze(y, axis=(2,)) if one_d else y

    return convert


converter("MaxPool", since=12, attrs=("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                                      "storage_order", "strides"))(_pool("max"))
converter("AveragePool", since=11, attrs=("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads",
                                          "strides"))(_pool("avg"))
converter("AveragePool", since=19, attrs=("auto_pad", "ceil_mode", "count_include_pad", "dilations",
                                          "kernel_shape", "pads", "strides"))(_pool("avg"))


def _drop_windows_in_padding(ctx: NodeContext, y, kernel, strides, dilations, pads):
    """ONNX's ceil mode drops a last window that would start in the end padding; the IR's keeps
    it, so the extra row or column is sliced off (static shapes only)."""
    spatial = ctx.static_dims(0, "ceil_mode=1")[2:]
    axes, ends = [], []
    for axis, (size, k, s, d) in enumerate(zip(spatial, kernel, strides, dilations)):
        begin, end = pads[axis], pads[axis + len(kernel)]
        out = -(-(size + begin + end - ((k - 1) * d + 1)) // s) + 1
        if (out - 1) * s >= size + begin:
            axes.append(axis + 2)
            ends.append(out - 1)
    if not axes:
        return y
    return R.strided_slice(y, axes=tuple(axes), begin=(0,) * len(axes), end=tuple(ends))


@converter("GlobalAveragePool")
def _global_average_pool(ctx: NodeContext):
    require_float(ctx)
    return R.mean(ctx.input(0), axis=tuple(range(2, ctx.rank(0))), keepdims=True)


@converter("GlobalMaxPool")
def _global_max_pool(ctx: NodeContext):
    return R.max(ctx.input(0), axis=tuple(range(2, ctx.rank(0))), keepdims=True)


@converter("BatchNormalization", attrs=("epsilon", "momentum"))
def _batch_norm_11(ctx: NodeContext):
    return _batch_norm(ctx)


@converter("BatchNormalization", since=14, attrs=("epsilon", "momentum", "training_mode"))
def _batch_norm_14(ctx: NodeContext):
    if ctx.attr("training_mode", 0):
        raise ctx.error("training_mode=1 is not supported (inference only)")
    return _batch_norm(ctx)


def _batch_norm(ctx: NodeContext):
    """Inference: (x - mean) / sqrt(var + epsilon) * scale + bias, per channel (axis 1)."""
    require_float(ctx)
    if len([o for o in ctx.node.output if o]) > 1:
        raise ctx.error("the running statistics outputs are not supported (inference only)")
    rank = ctx.rank(0)
    shape = (1, -1) + (1,) * (rank - 2)

    def channel(index):
        return R.reshape(ctx.input(index), shape) if rank != 2 else ctx.input(index)

    scale, bias, mean, var = (channel(i) for i in range(1, 5))
    epsilon = scalar_like(ctx, ctx.attr("epsilon", 1e-5), 4)
    normed = R.divide(R.subtract(ctx.input(0), mean), R.sqrt(R.add(var, epsilon)))
    return R.add(R.multiply(normed, scale), bias)


# -- normalization over an axis -------------------------------------------------------------------


def _softmax(name: str, legacy: bool):
    def convert(ctx: NodeContext):
        require_float(ctx)
        rank = ctx.rank(0)
        if not legacy:
            return R.make_call(name, ctx.input(0), axis=axis_of(ctx, ctx.attr("axis", -1), rank))
        # Before opset 13 the input is seen as 2-D: dims before axis, and the rest flattened.
        axis = axis_of(ctx, ctx.attr("axis", 1), rank)
        dims = ctx.dims(0)
        inner = _product(dims[axis:])
        flat = R.reshape(ctx.input(0), (-1, inner))
        return R.reshape(R.make_call(name, flat, axis=-1), list(dims))

    return convert


for _onnx, _ir in (("Softmax", "nn.softmax"), ("LogSoftmax", "nn.log_softmax")):
    converter(_onnx, attrs=("axis",))(_softmax(_ir, legacy=True))
    converter(_onnx, since=13, attrs=("axis",))(_softmax(_ir, legacy=False))


def _product(dims):
    total = arith.IntImm(1)
    for dim in dims:
        total = total * dim
    return total


# -- shape manipulation ---------------------------------------------------------------------------


@converter("Reshape", attrs=())
def _reshape_5(ctx: NodeContext):
    return _reshape(ctx, allowzero=False)


@converter("Reshape", since=14, attrs=("allowzero",))
def _reshape_14(ctx: NodeContext):
    return _reshape(ctx, allowzero=bool(ctx.attr("allowzero", 0)))


def _reshape(ctx: NodeContext, allowzero: bool):
    target = [int(v) for v in ctx.constant(1, "the shape").reshape(-1)]
    dims = ctx.dims(0)
    out = []
    for axis, value in enumerate(target):
        if value == 0 and not allowzero:
            if axis >= len(dims):
                raise ctx.error(f"shape {target} copies axis {axis}, which the input of rank {len(dims)} lacks",
                                "invalid")
            out.append(dims[axis])
        else:
            out.append(value)
    if isinstance(ctx.inputs[0], Constant) and all(isinstance(v, int) for v in out):
        return Constant(ctx.inputs[0].data.reshape(out))
    return R.reshape(ctx.input(0), out)


@converter("Transpose", attrs=("perm",))
def _transpose(ctx: NodeContext):
    rank = ctx.rank(0)
    perm = ctx.ints("perm", tuple(reversed(range(rank))))
    return R.permute_dims(ctx.input(0), axes=perm)


@converter("Flatten", attrs=("axis",))
def _flatten(ctx: NodeContext):
    dims = ctx.dims(0)
    axis = ctx.attr("axis", 1)
    if not -len(dims) <= axis <= len(dims):
        raise ctx.error(f"axis {axis} is out of range for rank {len(dims)}", "invalid")
    axis = axis + len(dims) if axis < 0 else axis
    return R.reshape(ctx.input(0), [_product(dims[:axis]), _product(dims[axis:])])


@converter("Concat", attrs=("axis",))
def _concat(ctx: NodeContext):
    rank = ctx.rank(0)
    axis = axis_of(ctx, ctx.attr("axis"), rank) if "axis" in ctx.attrs else None
    if axis is None:
        raise ctx.error("the axis attribute is required", "invalid")
    if all_constant(ctx):
        return Constant(np.concatenate([v.data for v in ctx.inputs], axis=axis))
    return R.concat([ctx.input(i) for i in range(len(ctx.inputs))], axis=axis)


def _axes_11(ctx: NodeContext):
    return ctx.ints("axes")


def _axes_13(ctx: NodeContext):
    if not ctx.has_input(1):
        return None
    return tuple(int(v) for v in ctx.constant(1, "axes").reshape(-1))


def _unsqueeze(axes_of):
    def convert(ctx: NodeContext):
        axes = axes_of(ctx)
        if axes is None:
            raise ctx.error("axes are required", "invalid")
        rank = ctx.rank(0) + len(axes)
        axes = tuple(sorted(axis_of(ctx, a, rank) for a in axes))
        if isinstance(ctx.inputs[0], Constant):
            data = ctx.inputs[0].data
            for a in axes:
                data = np.expand_dims(data, a)
            return Constant(data)
        return R.expand_dims(ctx.input(0), axis=axes)

    return convert


def _squeeze(axes_of):
    def convert(ctx: NodeContext):
        axes = axes_of(ctx)
        rank = ctx.rank(0)
        if axes is None:
            dims = ctx.static_dims(0, "Squeeze without axes")
            axes = tuple(i for i, d in enumerate(dims) if d == 1)
        axes = tuple(sorted(axis_of(ctx, a, rank) for a in axes))
        if isinstance(ctx.inputs[0], Constant):
            return Constant(np.squeeze(ctx.inputs[0].data, axis=axes))
        return R.squeeze(ctx.input(0), axis=axes)

    return convert


converter("Unsqueeze", attrs=("axes",))(_unsqueeze(_axes_11))
converter("Unsqueeze", since=13)(_unsqueeze(_axes_13))
converter("Squeeze", attrs=("axes",))(_squeeze(_axes_11))
converter("Squeeze", since=13)(_squeeze(_axes_13))


@converter("Expand")
def _expand(ctx: NodeContext):
    target = [int(v) for v in ctx.constant(1, "the shape").reshape(-1)]
    dims = list(ctx.dims(0))
    analyzer = ctx.analyzer
    rank = max(len(dims), len(target))
    dims = [arith.IntImm(1)] * (rank - len(dims)) + dims
    target = [1] * (rank - len(target)) + target
    out = []
    for dim, want in zip(dims, target):
        size = analyzer.as_int(dim)
        if want == 1:
            out.append(dim)
        elif size in (1, want):
            out.append(want)
        else:
            raise ctx.error(f"cannot expand a dimension of {dim} to {want}", "invalid")
    return R.broadcast_to(ctx.input(0), out)


# -- reductions -----------------------------------------------------------------------------------


def _reduce(kind: str, axes_from_input: bool):
    def convert(ctx: NodeContext):
        keepdims = bool(ctx.attr("keepdims", 1))
        axes = _axes_13(ctx) if axes_from_input else ctx.ints("axes")
        rank = ctx.rank(0)
        if axes is None or len(axes) == 0:
            if ctx.attr("noop_with_empty_axes", 0):
                return R.add(ctx.input(0), scalar_like(ctx, 0))
            axes = tuple(range(rank))
        axes = tuple(sorted({axis_of(ctx, a, rank) for a in axes}))
        x = ctx.input(0)
        if kind in ("max", "min", "log_sum_exp") and any(ctx.analyzer.as_int(ctx.dims(0)[a]) == 0 for a in axes):
            raise ctx.error("a max, min or log-sum-exp over an empty axis (ONNX's -inf/+inf) is not supported")
        if kind in ("mean", "log_sum", "log_sum_exp", "l2"):
            require_float(ctx)
        if kind in ("sum", "mean", "max", "min", "prod"):
            return R.make_call(kind, x, axis=axes, keepdims=keepdims)
        if kind == "sum_square":
            return R.sum(R.multiply(x, x), axis=axes, keepdims=keepdims)
        if kind == "l1":
            return R.sum(R.abs(x), axis=axes, keepdims=keepdims)
        if kind == "l2":
            return R.sqrt(R.sum(R.multiply(x, x), axis=axes, keepdims=keepdims))
        if kind == "log_sum":
            return R.log(R.sum(x, axis=axes, keepdims=keepdims))
        # log_sum_exp, stable: max + log(sum(exp(x - max)))
        peak = R.max(x, axis=axes, keepdims=True)
        total = R.log(R.sum(R.exp(R.subtract(x, peak)), axis=axes, keepdims=keepdims))
        return R.add(total, peak if keepdims else R.squeeze(peak, axis=axes))

    return convert


_REDUCE = {"ReduceSum": ("sum", 13), "ReduceMean": ("mean", 18), "ReduceMax": ("max", 18),
           "ReduceMin": ("min", 18), "ReduceProd": ("prod", 18), "ReduceSumSquare": ("sum_square", 18),
           "ReduceL1": ("l1", 18), "ReduceL2": ("l2", 18), "ReduceLogSum": ("log_sum", 18),
           "ReduceLogSumExp": ("log_sum_exp", 18)}
for _onnx, (_kind, _moved) in _REDUCE.items():
    converter(_onnx, attrs=("axes", "keepdims"))(_reduce(_kind, axes_from_input=False))
    converter(_onnx, since=_moved, attrs=("keepdims", "noop_with_empty_axes"))(_reduce(_kind, axes_from_input=True))


@converter(("ArgMax", "ArgMin"), attrs=("axis", "keepdims", "select_last_index"))
def _arg(ctx: NodeContext):
    name = "argmax" if ctx.node.op_type == "ArgMax" else "argmin"
    axis = axis_of(ctx, ctx.attr("axis", 0), ctx.rank(0))
    keepdims = bool(ctx.attr("keepdims", 1))
    if not ctx.attr("select_last_index", 0):
        return R.make_call(name, ctx.input(0), axis=axis, keepdims=keepdims)
    # The last of equal extremes: the first one in the reversed axis, counted from the end.
    size = ctx.static_dims(0, "select_last_index=1")[axis]
    flipped = R.strided_slice(ctx.input(0), axes=(axis,), begin=(size - 1,), end=(-size - 1,), strides=(-1,))
    first = R.make_call(name, flipped, axis=axis, keepdims=keepdims)
    return R.subtract(const(size - 1, "int64"), first)



# -- more: shapes from constants, slicing, normalization ------------------------------------------


@converter("ConstantOfShape", attrs=("value",))
def _constant_of_shape(ctx: NodeContext):
    from .loader import tensor_to_array

    shape = [int(v) for v in ctx.constant(0, "the shape").reshape(-1)]
    value = np.zeros(1, "float32")
    if "value" in ctx.attrs:
        value = tensor_to_array(ctx.attrs["value"], None, f"{ctx.node.op_type} value").reshape(-1)
    return Constant(np.full(shape, value[0], dtype=value.dtype))


@converter("Range")
def _range(ctx: NodeContext):
    start, limit, delta = (ctx.constant(i, name) for i, name in enumerate(("start", "limit", "delta")))
    values = np.arange(start.reshape(-1)[0], limit.reshape(-1)[0], delta.reshape(-1)[0])
    return Constant(values.astype(start.dtype))


@converter("Mod", attrs=("fmod",))
def _mod(ctx: NodeContext):
    a, b = ctx.input(0), ctx.input(1)
    is_float = ctx.dtype(0) in FLOATS
    if ctx.attr("fmod", 0):  # the sign of the dividend: a - b * trunc(a / b)
        quotient = R.divide(a, b)
        if is_float:
            zero = scalar_like(ctx, 0.0)
            quotient = R.where(R.less(quotient, zero), R.ceil(quotient), R.floor(quotient))
        return R.subtract(a, R.multiply(b, quotient))
    if not is_float:  # the sign of the divisor, as Python's %
        return R.subtract(a, R.multiply(b, R.floor_divide(a, b)))
    rest = R.subtract(a, R.multiply(b, R.floor(R.divide(a, b))))
    # An infinite divisor leaves a (same sign, or zero) or gives the divisor, where the formula gives nan.
    zero = scalar_like(ctx, 0.0)
    signs_differ = R.logical_and(R.not_equal(R.less(a, zero), R.less(b, zero)), R.not_equal(a, zero))
    infinite = R.equal(R.abs(b), scalar_like(ctx, np.inf))
    return R.where(infinite, R.where(signs_differ, b, a), rest)


@converter("Slice")
def _slice(ctx: NodeContext):
    """starts/ends/axes/steps as constants; ONNX clamps them to the axis, which is done here so
    that the IR's Python-style slice sees in-range values."""
    dims = ctx.static_dims(0, "Slice")
    starts = ctx.constant(1, "starts").reshape(-1).tolist()
    ends = ctx.constant(2, "ends").reshape(-1).tolist()
    axes = ctx.constant(3, "axes").reshape(-1).tolist() if ctx.has_input(3) else list(range(len(starts)))
    steps = ctx.constant(4, "steps").reshape(-1).tolist() if ctx.has_input(4) else [1] * len(starts)
    out_axes, begins, finals, strides = [], [], [], []
    for axis, start, end, step in zip(axes, starts, ends, steps):
        axis = axis_of(ctx, int(axis), len(dims))
        size = dims[axis]
        if step == 0:
            raise ctx.error("a step of 0", "invalid")
        start = start + size if start < 0 else start
        end = end + size if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), size), min(max(end, 0), size)
        else:
            start, end = min(max(start, -1), size - 1), min(max(end, -1), size - 1)
            if end == -1:
                end = -size - 1  # before index 0, in Python's terms
            if start == -1:
                start, end = 0, 0
        out_axes.append(axis)
        begins.append(int(start))
        finals.append(int(end))
        strides.append(int(step))
    if isinstance(ctx.inputs[0], Constant):
        index = [slice(None)] * len(dims)
        for axis, b, e, s in zip(out_axes, begins, finals, strides):
            index[axis] = slice(b, e, s)
        return Constant(np.asarray(ctx.inputs[0].data[tuple(index)], order="C"))
    return R.strided_slice(ctx.input(0), axes=tuple(out_axes), begin=tuple(begins), end=tuple(finals),
                           strides=tuple(strides))


def _split(ctx: NodeContext, sizes, num_outputs=None):
    rank = ctx.rank(0)
    axis = axis_of(ctx, ctx.attr("axis", 0), rank)
    count = len([o for o in ctx.node.output])
    size = ctx.static_dims(0, "Split")[axis]
    if sizes is None:
        parts = num_outputs or count
        chunk = -(-size // parts)
        sizes = [min(chunk, size - chunk * i) for i in range(parts)]
    sizes = [int(s) for s in sizes]
    if sum(sizes) != size:
        raise ctx.error(f"split sizes {sizes} do not add up to {size}", "invalid")
    cuts = tuple(int(c) for c in np.cumsum(sizes)[:-1])
    pieces = R.split(ctx.input(0), indices_or_sections=cuts, axis=axis)
    return [TupleGetItem(pieces, i) for i in range(len(sizes))]


@converter("Split", attrs=("axis", "split"))
def _split_11(ctx: NodeContext):
    return _split(ctx, ctx.ints("split"))


@converter("Split", since=13, attrs=("axis",))
def _split_13(ctx: NodeContext):
    return _split(ctx, ctx.constant(1, "split").reshape(-1).tolist() if ctx.has_input(1) else None)


@converter("Split", since=18, attrs=("axis", "num_outputs"))
def _split_18(ctx: NodeContext):
    sizes = ctx.constant(1, "split").reshape(-1).tolist() if ctx.has_input(1) else None
    return _split(ctx, sizes, ctx.attr("num_outputs"))


@converter("LayerNormalization", since=17, attrs=("axis", "epsilon", "stash_type"))
def _layer_norm(ctx: NodeContext):
    """Normalized over the axes from ``axis`` on; Mean and InvStdDev (kept dims) as the optional
    outputs. Computed in the input's dtype (stash_type float32 is what the IR does for float32)."""
    require_float(ctx)
    rank = ctx.rank(0)
    axis = axis_of(ctx, ctx.attr("axis", -1), rank)
    axes = tuple(range(axis, rank))
    x = ctx.input(0)
    mean = R.mean(x, axis=axes, keepdims=True)
    centered = R.subtract(x, mean)
    var = R.mean(R.multiply(centered, centered), axis=axes, keepdims=True)
    inv_std = R.divide(scalar_like(ctx, 1.0), R.sqrt(R.add(var, scalar_like(ctx, ctx.attr("epsilon", 1e-5)))))
    y = R.multiply(R.multiply(centered, inv_std), ctx.input(1))
    if ctx.has_input(2):
        y = R.add(y, ctx.input(2))
    return [y, mean, inv_std]


@converter("Swish", since=24, attrs=("alpha",))
def _swish(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    return R.multiply(x, R.sigmoid(R.multiply(x, scalar_like(ctx, ctx.attr("alpha", 1.0)))))


# -- masks, norms and small activations -----------------------------------------------------------


@converter("Trilu", since=14, attrs=("upper",))
def _trilu(ctx: NodeContext):
    dims = ctx.static_dims(0, "Trilu")
    if len(dims) < 2:
        raise ctx.error("the input needs rank 2 or more", "invalid")
    k = int(ctx.constant(1, "k").reshape(-1)[0]) if ctx.has_input(1) else 0
    ones = np.ones(dims[-2:], dtype=bool)
    mask = np.triu(ones, k) if ctx.attr("upper", 1) else np.tril(ones, k)
    return R.where(Constant(mask), ctx.input(0), scalar_like(ctx, 0))


@converter("RMSNormalization", since=23, attrs=("axis", "epsilon", "stash_type"))
def _rms_norm(ctx: NodeContext):
    require_float(ctx)
    rank = ctx.rank(0)
    axes = tuple(range(axis_of(ctx, ctx.attr("axis", -1), rank), rank))
    x = ctx.input(0)
    mean_square = R.mean(R.multiply(x, x), axis=axes, keepdims=True)
    scale = R.sqrt(R.add(mean_square, scalar_like(ctx, ctx.attr("epsilon", 1e-5))))
    return R.multiply(R.divide(x, scale), ctx.input(1))


@converter("IsInf", attrs=("detect_negative", "detect_positive"))
def _is_inf(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    positive = R.equal(x, scalar_like(ctx, np.inf))
    negative = R.equal(x, scalar_like(ctx, -np.inf))
    want_positive, want_negative = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    if want_positive and want_negative:
        return R.logical_or(positive, negative)
    if want_positive:
        return positive
    if want_negative:
        return negative
    return R.logical_and(positive, negative)  # never true


@converter("IsNaN")
def _is_nan(ctx: NodeContext):
    require_float(ctx)
    return R.not_equal(ctx.input(0), ctx.input(0))


@converter("ThresholdedRelu", attrs=("alpha",))
def _thresholded_relu(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    return R.where(R.greater(x, scalar_like(ctx, ctx.attr("alpha", 1.0))), x, scalar_like(ctx, 0.0))


@converter("Celu", since=12, attrs=("alpha",))
def _celu(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    alpha = scalar_like(ctx, ctx.attr("alpha", 1.0))
    negative = R.multiply(alpha, R.subtract(R.exp(R.divide(x, alpha)), scalar_like(ctx, 1.0)))
    return R.where(R.less(x, scalar_like(ctx, 0.0)), negative, x)


@converter("LpNormalization", attrs=("axis", "p"))
def _lp_normalization(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    axis = axis_of(ctx, ctx.attr("axis", -1), ctx.rank(0))
    p = ctx.attr("p", 2)
    if p == 1:
        norm = R.sum(R.abs(x), axis=(axis,), keepdims=True)
    elif p == 2:
        norm = R.sqrt(R.sum(R.multiply(x, x), axis=(axis,), keepdims=True))
    else:
        raise ctx.error(f"p={p} is not supported (1 or 2)", "invalid")
    zero = scalar_like(ctx, 0.0)
    return R.where(R.equal(norm, zero), zero, R.divide(x, norm))


def _space_depth(to_depth: bool):
    def convert(ctx: NodeContext):
        n, c, h, w = ctx.static_dims(0, ctx.node.op_type)
        b = int(ctx.attr("blocksize"))
        x = ctx.input(0)
        if to_depth:
            y = R.reshape(x, (n, c, h // b, b, w // b, b))
            y = R.permute_dims(y, axes=(0, 3, 5, 1, 2, 4))
            return R.reshape(y, (n, c * b * b, h // b, w // b))
        mode = ctx.attr("mode", b"DCR")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode == "DCR":
            y = R.permute_dims(R.reshape(x, (n, b, b, c // (b * b), h, w)), axes=(0, 3, 4, 1, 5, 2))
        else:
            y = R.permute_dims(R.reshape(x, (n, c // (b * b), b, b, h, w)), axes=(0, 1, 4, 2, 5, 3))
        return R.reshape(y, (n, c // (b * b), h * b, w * b))

    return convert


converter("SpaceToDepth", attrs=("blocksize",))(_space_depth(True))
converter("DepthToSpace", attrs=("blocksize", "mode"))(_space_depth(False))


# -- functions of exp and log ---------------------------------------------------------------------


def _composed(build):
    def convert(ctx: NodeContext):
        require_float(ctx)
        return build(ctx, ctx.input(0), lambda v: scalar_like(ctx, v))

    return convert


_COMPOSED = {
    "Sinh": lambda ctx, x, c: R.multiply(R.subtract(R.exp(x), R.exp(R.negative(x))), c(0.5)),
    "Cosh": lambda ctx, x, c: R.multiply(R.add(R.exp(x), R.exp(R.negative(x))), c(0.5)),
    "Tan": lambda ctx, x, c: R.divide(R.sin(x), R.cos(x)),
    "Asinh": lambda ctx, x, c: R.log(R.add(x, R.sqrt(R.add(R.multiply(x, x), c(1.0))))),
    "Acosh": lambda ctx, x, c: R.log(R.add(x, R.sqrt(R.subtract(R.multiply(x, x), c(1.0))))),
    "Atanh": lambda ctx, x, c: R.multiply(R.log(R.divide(R.add(c(1.0), x), R.subtract(c(1.0), x))), c(0.5)),
    "Mish": lambda ctx, x, c: R.multiply(x, R.tanh(R.log(R.add(R.exp(x), c(1.0))))),
}
for _onnx, _build in _COMPOSED.items():
    converter(_onnx)(_composed(_build))


@converter("Tile")
def _tile(ctx: NodeContext):
    repeats = [int(v) for v in ctx.constant(1, "repeats").reshape(-1)]
    dims = ctx.static_dims(0, "Tile")
    if len(repeats) != len(dims):
        raise ctx.error(f"{len(repeats)} repeats for rank {len(dims)}", "invalid")
    # Tile = broadcast along a new axis before each one, then merge the pairs.
    x = ctx.input(0)
    expanded = R.expand_dims(x, axis=tuple(range(0, 2 * len(dims), 2)))
    target = [v for pair in zip(repeats, dims) for v in pair]
    out = [r * d for r, d in zip(repeats, dims)]
    return R.reshape(R.broadcast_to(expanded, target), out)


@converter("CumSum", attrs=("exclusive", "reverse"))
def _cumsum(ctx: NodeContext):
    """A product with a triangular matrix of ones along the axis (static size)."""
    rank = ctx.rank(0)
    axis = axis_of(ctx, int(ctx.constant(1, "axis").reshape(-1)[0]), rank)
    size = ctx.static_dims(0, "CumSum")[axis]
    exclusive, reverse = ctx.attr("exclusive", 0), ctx.attr("reverse", 0)
    # out[j] = sum_i x[i] * m[i, j]: m[i, j] = 1 where i <= j (i < j exclusive); reverse mirrors it.
    i, j = np.indices((size, size))
    mask = (i > j if exclusive else i >= j) if reverse else (i < j if exclusive else i <= j)
    matrix = Constant(mask.astype(ctx.dtype(0)))
    perm = [a for a in range(rank) if a != axis] + [axis]
    moved = R.permute_dims(ctx.input(0), axes=tuple(perm)) if axis != rank - 1 else ctx.input(0)
    summed = R.matmul(moved, matrix)
    if axis == rank - 1:
        return summed
    back = tuple(int(v) for v in np.argsort(perm))
    return R.permute_dims(summed, axes=back)


@converter("Hardmax", since=13, attrs=("axis",))
def _hardmax(ctx: NodeContext):
    rank = ctx.rank(0)
    axis = axis_of(ctx, ctx.attr("axis", -1), rank)
    size = ctx.static_dims(0, "Hardmax")[axis]
    first = R.argmax(ctx.input(0), axis=axis, keepdims=True)
    positions = const(np.arange(size).reshape([size if a == axis else 1 for a in range(rank)]), "int64")
    return R.astype(R.equal(positions, first), dtype=ctx.dtype(0))


@converter("InstanceNormalization", attrs=("epsilon",))
def _instance_norm(ctx: NodeContext):
    require_float(ctx)
    rank = ctx.rank(0)
    axes = tuple(range(2, rank))
    shape = (1, -1) + (1,) * (rank - 2)
    return _normalize(ctx, axes, R.reshape(ctx.input(1), shape), R.reshape(ctx.input(2), shape))


def _normalize(ctx: NodeContext, axes, scale, bias, x=None):
    x = ctx.input(0) if x is None else x
    mean = R.mean(x, axis=axes, keepdims=True)
    centered = R.subtract(x, mean)
    var = R.mean(R.multiply(centered, centered), axis=axes, keepdims=True)
    normed = R.divide(centered, R.sqrt(R.add(var, scalar_like(ctx, ctx.attr("epsilon", 1e-5)))))
    if scale is not None:
        normed = R.multiply(normed, scale)
    return R.add(normed, bias) if bias is not None else normed


@converter("MeanVarianceNormalization", attrs=("axes",))
def _mvn(ctx: NodeContext):
    require_float(ctx)
    rank = ctx.rank(0)
    axes = tuple(sorted(axis_of(ctx, a, rank) for a in ctx.ints("axes", (0, 2, 3))))
    x = ctx.input(0)
    mean = R.mean(x, axis=axes, keepdims=True)
    centered = R.subtract(x, mean)
    var = R.mean(R.multiply(centered, centered), axis=axes, keepdims=True)
    return R.divide(centered, R.add(R.sqrt(var), scalar_like(ctx, 1e-9)))


@converter("GroupNormalization", since=21, attrs=("epsilon", "num_groups", "stash_type"))
def _group_norm(ctx: NodeContext):
    require_float(ctx)
    dims = ctx.static_dims(0, "GroupNormalization")
    groups = int(ctx.attr("num_groups"))
    n, c = dims[0], dims[1]
    grouped = R.reshape(ctx.input(0), (n, groups, -1))
    normed = R.reshape(_normalize(ctx, (2,), None, None, grouped), dims)
    shape = (1, c) + (1,) * (len(dims) - 2)
    return R.add(R.multiply(normed, R.reshape(ctx.input(1), shape)), R.reshape(ctx.input(2), shape))


@converter("Pad", attrs=("mode",))
def _pad(ctx: NodeContext):
    """Per axis: a crop for negative pads, then the pad concatenated before and after (static shapes):
    a constant block, the edge row repeated, the reflection or the wrapped-around rows."""
    mode = ctx.attr("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.error(f"mode={mode!r} is not supported")
    dims = list(ctx.static_dims(0, "Pad"))
    rank = len(dims)
    pads = [int(v) for v in ctx.constant(1, "pads").reshape(-1)]
    axes = list(range(rank))
    if ctx.has_input(3):
        axes = [axis_of(ctx, int(a), rank) for a in ctx.constant(3, "axes").reshape(-1)]
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"{len(pads)} pads for {len(axes)} axes", "invalid")
    fill = 0
    if ctx.has_input(2):
        fill = ctx.constant(2, "constant_value").reshape(-1)[0]
    x = ctx.input(0)
    for i, axis in enumerate(axes):
        before, after = pads[i], pads[i + len(axes)]
        if before < 0 or after < 0:  # a negative pad crops
            start, stop = max(-before, 0), dims[axis] - max(-after, 0)
            x = ctx.emit(R.strided_slice(x, axes=(axis,), begin=(start,), end=(stop,)))
            dims[axis] = stop - start
            before, after = max(before, 0), max(after, 0)
        if before == 0 and after == 0:
            continue
        size = dims[axis]
        if mode != "constant" and size == 0:
            raise ctx.error(f"mode={mode!r} pads an empty axis", "invalid")
        if mode == "reflect" and max(before, after) >= size:
            raise ctx.error(f"reflect pads of {before}, {after} on an axis of {size}", "invalid")
        parts = []
        for count, at_start in ((before, True), (after, False)):
            if count == 0:
                parts.append(None)
                continue
            block = list(dims)
            block[axis] = count
            if mode == "constant":
                part = Constant(np.full(block, fill, dtype=ctx.dtype(0)))
            elif mode == "edge":
                edge = (0, 1) if at_start else (size - 1, size)
                row = R.strided_slice(x, axes=(axis,), begin=(edge[0],), end=(edge[1],))
                part = R.broadcast_to(row, block)
            elif mode == "reflect":
                begin, end = (count, 0) if at_start else (size - 2, size - 2 - count)
                part = R.strided_slice(x, axes=(axis,), begin=(begin,), end=(end if end >= 0 else -size - 1,),
                                       strides=(-1,))
            else:  # wrap
                if count > size:
                    raise ctx.error(f"wrap pads of {count} on an axis of {size}")
                begin, end = (size - count, size) if at_start else (0, count)
                part = R.strided_slice(x, axes=(axis,), begin=(begin,), end=(end,))
            parts.append(part)
        pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
        x = ctx.emit(R.concat(pieces, axis=axis))
        dims[axis] = size + before + after
    return x


# -- gathers along an axis, and the losses built on them ------------------------------------------


def gather_elements(ctx: NodeContext, data, data_dims, indices, index_dims, axis: int):
    """out[..., i, ...] = data[..., indices[..., i, ...], ...] along ``axis`` (static shapes): the
    data flattened and read at offsets known from the output position, plus the index's stride."""
    strides = [int(np.prod(data_dims[a + 1:])) for a in range(len(data_dims))]
    grid = np.indices(index_dims) if index_dims else np.zeros((0,), dtype=np.int64)
    offset = sum(grid[a] * strides[a] for a in range(len(index_dims)) if a != axis)
    indices = R.astype(indices, dtype="int64")
    wrapped = R.add(indices, const(data_dims[axis], "int64"))
    indices = R.where(R.less(indices, const(0, "int64")), wrapped, indices)
    flat = R.add(R.multiply(indices, const(strides[axis], "int64")), const(offset, "int64"))
    return R.take(R.reshape(data, (-1,)), flat, axis=0)


@converter("GatherElements", attrs=("axis",))
def _gather_elements(ctx: NodeContext):
    data_dims = ctx.static_dims(0, "GatherElements")
    index_dims = ctx.static_dims(1, "GatherElements")
    axis = axis_of(ctx, ctx.attr("axis", 0), len(data_dims))
    return gather_elements(ctx, ctx.input(0), data_dims, ctx.input(1), index_dims, axis)


def _nll(ctx: NodeContext, log_prob, dims, target_index: int, weight_index: int):
    """Negative log-likelihood of ``log_prob`` (N, C, d...) at the classes ``target`` (N, d...)."""
    reduction = ctx.attr("reduction", b"mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction not in ("none", "sum", "mean"):
        raise ctx.error(f"reduction={reduction!r} is not supported", "invalid")
    target = ctx.input(target_index)
    target_dims = ctx.static_dims(target_index, ctx.node.op_type)
    ignore = ctx.attr("ignore_index")
    kept = None
    if ignore is not None:
        kept = R.not_equal(target, const(ignore, ctx.dtype(target_index)))
        target = R.where(kept, target, const(0, ctx.dtype(target_index)))
    index_dims = (target_dims[0], 1, *target_dims[1:])
    picked = gather_elements(ctx, log_prob, dims, R.expand_dims(target, axis=1), index_dims, 1)
    loss = R.negative(R.squeeze(picked, axis=(1,)))
    dtype = ctx.dtype(0)
    weight = None
    if ctx.has_input(weight_index):
        weight = R.take(ctx.input(weight_index), target, axis=0)
    if kept is not None:
        mask = R.astype(kept, dtype=dtype)
        weight = mask if weight is None else R.multiply(weight, mask)
    if weight is not None:
        loss = R.multiply(loss, weight)
    if reduction == "none":
        return loss
    total = R.sum(loss)
    if reduction == "sum":
        return total
    count = R.sum(weight) if weight is not None else const(float(np.prod(target_dims)), dtype)
    return R.divide(total, count)


@converter("NegativeLogLikelihoodLoss", since=13, attrs=("ignore_index", "reduction"))
def _nll_loss(ctx: NodeContext):
    require_float(ctx)
    return _nll(ctx, ctx.input(0), ctx.static_dims(0, "NegativeLogLikelihoodLoss"), 1, 2)


@converter("SoftmaxCrossEntropyLoss", since=13, attrs=("ignore_index", "reduction"))
def _softmax_cross_entropy(ctx: NodeContext):
    require_float(ctx)
    log_prob = ctx.emit(R.nn.log_softmax(ctx.input(0), axis=1))
    dims = ctx.static_dims(0, "SoftmaxCrossEntropyLoss")
    return [_nll(ctx, log_prob, dims, 1, 2), log_prob]


@converter("BitShift", attrs=("direction",))
def _bit_shift(ctx: NodeContext):
    """Unsigned shifts as products and floor divisions by powers of two (bits shifted out are lost,
    as in the unsigned arithmetic of the same width)."""
    dtype = ctx.dtype(0)
    if not dtype.startswith("uint"):
        raise ctx.error(f"input 0 is {dtype}: only unsigned shifts are supported (signed ones wrap and "
                        "shift in sign bits, which products and divisions do not)")
    direction = ctx.attr("direction", b"")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.error(f"direction={direction!r} must be LEFT or RIGHT", "invalid")
    factor = R.power(scalar_like(ctx, 2), ctx.input(1))
    if direction == "LEFT":
        return R.multiply(ctx.input(0), factor)
    return R.floor_divide(ctx.input(0), factor)


# -- attention (opset 23) -------------------------------------------------------------------------


def _attention_bias(ctx: NodeContext, q_len: int, kv_len: int, past: int):
    """The additive bias (a constant or an expression, (…, q, kv)) from attn_mask and is_causal;
    None when there is neither. A mask shorter than the keys is padded with False / -inf."""
    dtype = ctx.dtype(0)
    bias = None
    if ctx.has_input(3):
        mask = ctx.input(3)
        mask_dims = ctx.static_dims(3, "Attention's mask")
        missing = kv_len - mask_dims[-1]
        if ctx.dtype(3) == "bool":
            mask = R.where(mask, const(0.0, dtype), const(-np.inf, dtype))
        if missing > 0:
            block = Constant(np.full((*mask_dims[:-1], missing), -np.inf, dtype=dtype))
            mask = R.concat([mask, block], axis=len(mask_dims) - 1)
        bias = mask
    if ctx.attr("is_causal", 0):
        i, j = np.indices((q_len, kv_len))
        causal = Constant(np.where(j <= i + past, 0.0, -np.inf).astype(dtype))
        bias = causal if bias is None else R.add(bias, causal)
    return bias


@converter("Attention", since=23, attrs=("is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode",
                                         "scale", "softcap", "softmax_precision", "left_window_size",
                                         "right_window_size"))
def _attention(ctx: NodeContext):
    """Scaled dot-product attention as ONNX's reference computes it: sqrt(scale) on Q and K, past
    keys and values prepended, grouped heads repeated, the softcap before the bias, a softmax that
    gives 0 on rows the bias masks entirely."""
    require_float(ctx)
    dtype = ctx.dtype(0)
    for name in ("left_window_size", "right_window_size"):
        if ctx.attr(name, -1) != -1:
            raise ctx.error(f"{name}={ctx.attr(name)} (sliding windows) is not supported")
    if ctx.has_input(6):
        raise ctx.error("nonpad_kv_seqlen is not supported")
    precision = ctx.attr("softmax_precision")
    if precision is not None and ir_dtype(int(precision), "softmax_precision") != dtype:
        raise ctx.error("a softmax_precision other than the input's dtype is not supported")
    if ctx.has_input(4) != ctx.has_input(5):
        raise ctx.error("past_key and past_value must be given together", "invalid")
    rank = ctx.rank(0)
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    if rank == 3:
        heads = {"q": ctx.attr("q_num_heads"), "kv": ctx.attr("kv_num_heads")}
        if None in heads.values():
            raise ctx.error("3-D inputs need q_num_heads and kv_num_heads", "invalid")

        def split_heads(x, index, count):
            b, s, hidden = ctx.static_dims(index, "Attention")
            return ctx.emit(R.permute_dims(R.reshape(x, (b, s, count, hidden // count)), axes=(0, 2, 1, 3)))

        q, k, v = split_heads(q, 0, heads["q"]), split_heads(k, 1, heads["kv"]), split_heads(v, 2, heads["kv"])
    elif rank != 4:
        raise ctx.error(f"Q has rank {rank}; Attention takes rank 3 or 4", "invalid")
    q_dims = q.struct_info.shape
    batch, q_heads, q_len, head = (int(d.value) for d in q_dims)
    scale = ctx.attr("scale")
    scale = float(np.sqrt(1.0 / np.sqrt(head) if scale is None else scale))
    past = 0
    if ctx.has_input(4):
        past = ctx.static_dims(4, "Attention")[2]
        k = ctx.emit(R.concat([ctx.input(4), k], axis=2))
        v = ctx.emit(R.concat([ctx.input(5), v], axis=2))
    present_k, present_v = k, v
    kv_heads, kv_len = (int(d.value) for d in k.struct_info.shape[1:3])
    if q_heads != kv_heads:
        if q_heads % kv_heads:
            raise ctx.error(f"{q_heads} query heads do not group over {kv_heads} key heads", "invalid")

        def repeat(x):
            dims = [int(d.value) for d in x.struct_info.shape]
            wide = R.broadcast_to(R.expand_dims(x, axis=2), (dims[0], dims[1], q_heads // kv_heads, *dims[2:]))
            return ctx.emit(R.reshape(wide, (dims[0], q_heads, *dims[2:])))

        k, v = repeat(k), repeat(v)
    scale_c = const(scale, dtype)
    scores = ctx.emit(R.matmul(R.multiply(q, scale_c),
                               R.permute_dims(R.multiply(k, scale_c), axes=(0, 1, 3, 2))))
    softcap = ctx.attr("softcap")
    if softcap is not None and softcap > 0:
        cap = const(softcap, dtype)
        scores = ctx.emit(R.multiply(R.tanh(R.divide(scores, cap)), cap))
    bias = _attention_bias(ctx, q_len, kv_len, past)
    biased = ctx.emit(R.add(scores, bias)) if bias is not None else scores
    # A softmax safe on rows masked entirely (all -inf): those rows become 0.
    peak = R.max(biased, axis=(3,), keepdims=True)
    peak = R.where(R.equal(peak, const(-np.inf, dtype)), const(0.0, dtype), peak)
    weights = R.exp(R.subtract(biased, peak))
    total = R.sum(weights, axis=(3,), keepdims=True)
    total = R.where(R.equal(total, const(0.0, dtype)), const(1.0, dtype), total)
    probs = ctx.emit(R.divide(weights, total))
    if bias is not None:
        bias_peak = R.max(R.add(bias, Constant(np.zeros((q_len, kv_len), dtype=dtype))), axis=(-1,), keepdims=True)
        probs = ctx.emit(R.where(R.equal(bias_peak, const(-np.inf, dtype)), const(0.0, dtype), probs))
    y = R.matmul(probs, v)
    if rank == 3:
        y = R.reshape(R.permute_dims(y, axes=(0, 2, 1, 3)), (batch, q_len, -1))
    mode = ctx.attr("qk_matmul_output_mode", 0)
    qk_out = {0: scores, 1: scores, 2: biased, 3: probs}.get(mode)
    if qk_out is None:
        raise ctx.error(f"qk_matmul_output_mode={mode} is not supported", "invalid")
    return [y, present_k, present_v, qk_out]


# -- small constructors and selections -----------------------------------------------------------


@converter("OneHot", attrs=("axis",))
def _one_hot(ctx: NodeContext):
    depth = int(np.asarray(ctx.constant(1, "depth")).reshape(-1)[0])
    values = ctx.input(2)
    rank = ctx.rank(0) + 1
    axis = axis_of(ctx, ctx.attr("axis", -1), rank)
    indices = R.astype(ctx.input(0), dtype="int64")
    indices = R.where(R.less(indices, const(0, "int64")), R.add(indices, const(depth, "int64")), indices)
    positions = const(np.arange(depth).reshape([depth if a == axis else 1 for a in range(rank)]), "int64")
    hot = R.equal(R.expand_dims(indices, axis=axis), positions)
    dtype = ctx.dtype(2)
    off = R.strided_slice(values, axes=(0,), begin=(0,), end=(1,))  # shape (1,): broadcasts as a scalar
    on = R.strided_slice(values, axes=(0,), begin=(1,), end=(2,))
    return R.where(hot, R.astype(on, dtype=dtype), R.astype(off, dtype=dtype))


@converter("EyeLike", attrs=("dtype", "k"))
def _eye_like(ctx: NodeContext):
    rows, cols = ctx.static_dims(0, "EyeLike")
    dtype = ir_dtype(int(ctx.attr("dtype")), "EyeLike dtype") if "dtype" in ctx.attrs else ctx.dtype(0)
    return Constant(np.eye(rows, cols, k=int(ctx.attr("k", 0)), dtype=dtype))


@converter("NonZero")
def _non_zero(ctx: NodeContext):
    if isinstance(ctx.inputs[0], Constant):
        return Constant(np.array(np.nonzero(ctx.inputs[0].data), dtype=np.int64))
    return R.nonzero(ctx.input(0))


@converter("LpPool", since=18, attrs=("auto_pad", "ceil_mode", "dilations", "kernel_shape", "p", "pads",
                                     "strides"))
def _lp_pool(ctx: NodeContext):
    """(sum over the window of |x|^p)^(1/p): an average pool counting the padding, times the
    window's size."""
    require_float(ctx)
    one_d = _require_2d(ctx)
    kernel = ctx.ints("kernel_shape")
    spatial = ctx.static_dims(0, "auto_pad")[2:] if ctx.attr("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") \
        else (0, 0)
    strides, dilations, pads = _window(ctx, kernel, spatial)
    p = float(ctx.attr("p", 2))
    powered = R.power(R.abs(ctx.input(0)), scalar_like(ctx, p))
    ceil = bool(ctx.attr("ceil_mode", 0))
    pooled = R.nn.avg_pool2d(powered, pool_size=kernel, strides=strides, padding=pads, dilation=dilations,
                             ceil_mode=ceil, count_include_pad=True)
    if ceil:
        pooled = _drop_windows_in_padding(ctx, pooled, kernel, strides, dilations, pads)
    y = R.power(R.multiply(pooled, scalar_like(ctx, float(np.prod(kernel)))), scalar_like(ctx, 1.0 / p))
    return R.squeeze(y, axis=(2,)) if one_d else y


@converter("Compress", attrs=("axis",))
def _compress(ctx: NodeContext):
    condition = np.asarray(ctx.constant(1, "condition")).reshape(-1).astype(bool)
    x = ctx.input(0)
    if "axis" not in ctx.attrs:
        x = R.reshape(x, (-1,))
        axis = 0
    else:
        axis = axis_of(ctx, ctx.attr("axis"), ctx.rank(0))
    return R.take(x, const(np.nonzero(condition)[0], "int64"), axis=axis)


def _window_function(coefficients):
    def convert(ctx: NodeContext):
        size = int(np.asarray(ctx.constant(0, "size")).reshape(-1)[0])
        dtype = ir_dtype(int(ctx.attr("output_datatype", 1)), "output_datatype")
        span = size if ctx.attr("periodic", 1) else size - 1
        n = np.arange(size, dtype=np.float64)
        angle = 2.0 * np.pi * n / max(span, 1)
        values = sum(c * np.cos(k * angle) for k, c in enumerate(coefficients))
        return Constant(values.astype(dtype))

    return convert


converter("HannWindow", since=17, attrs=("output_datatype", "periodic"))(_window_function((0.5, -0.5)))
converter("HammingWindow", since=17, attrs=("output_datatype", "periodic"))(
    _window_function((25.0 / 46.0, -(1.0 - 25.0 / 46.0))))
converter("BlackmanWindow", since=17, attrs=("output_datatype", "periodic"))(_window_function((0.42, -0.5, 0.08)))


def _scatter(ctx: NodeContext, data_dims, targets: np.ndarray):
    """``data`` with the flat positions ``targets`` (one per update, in order) replaced by the
    updates: the last write to a position wins, as ONNX's reduction 'none' requires no repeats."""
    reduction = ctx.attr("reduction", b"none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction != "none":
        raise ctx.error(f"reduction={reduction!r} is not supported (only 'none')")
    count = int(np.prod(data_dims))
    source = np.full(count, -1, dtype=np.int64)
    source[targets.reshape(-1)] = np.arange(targets.size)
    written = source >= 0
    picked = R.take(R.reshape(ctx.input(2), (-1,)), const(np.where(written, source, 0), "int64"), axis=0)
    flat = R.where(Constant(written), picked, R.reshape(ctx.input(0), (-1,)))
    return R.reshape(flat, list(data_dims))


@converter("ScatterElements", since=11, attrs=("axis", "reduction"))
def _scatter_elements(ctx: NodeContext):
    data_dims = ctx.static_dims(0, "ScatterElements")
    indices = np.asarray(ctx.constant(1, "indices")).astype(np.int64)
    axis = axis_of(ctx, ctx.attr("axis", 0), len(data_dims))
    indices = np.where(indices < 0, indices + data_dims[axis], indices)
    coords = list(np.indices(indices.shape))
    coords[axis] = indices
    return _scatter(ctx, data_dims, np.ravel_multi_index(tuple(coords), data_dims))


@converter("ScatterND", since=11, attrs=("reduction",))
def _scatter_nd(ctx: NodeContext):
    data_dims = ctx.static_dims(0, "ScatterND")
    indices = np.asarray(ctx.constant(1, "indices")).astype(np.int64)
    depth = indices.shape[-1]
    prefix = indices.reshape(-1, depth)
    prefix = np.where(prefix < 0, prefix + np.array(data_dims[:depth]), prefix)
    inner = int(np.prod(data_dims[depth:]))
    starts = np.ravel_multi_index(tuple(prefix.T), data_dims[:depth]) * inner
    return _scatter(ctx, data_dims, (starts[:, None] + np.arange(inner)[None, :]).reshape(-1))


@converter("ConvTranspose", attrs=("auto_pad", "dilations", "group", "kernel_shape", "output_padding",
                                   "output_shape", "pads", "strides"))
def _conv_transpose(ctx: NodeContext):
    """A stride-1 convolution over the input spread out by the strides (zeros between the rows and
    columns), padded by (kernel extent - 1 - pad), with the kernel flipped and its in/out swapped."""
    one_d = _require_2d(ctx)
    n, c_in, height, width = ctx.static_dims(0, "ConvTranspose")
    w_dims = ctx.static_dims(1, "ConvTranspose")
    groups = int(ctx.attr("group", 1))
    kernel = tuple(w_dims[2:])
    strides = ctx.ints("strides", (1, 1))
    dilations = ctx.ints("dilations", (1, 1))
    extra = ctx.ints("output_padding", (0, 0))
    spatial = (height, width)
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    full = [s * (size - 1) + e + o for s, size, e, o in zip(strides, spatial, extents, extra)]
    auto_pad = ctx.attr("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    wanted = ctx.ints("output_shape")
    if wanted is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = tuple(size * s for size, s in zip(spatial, strides))
    if wanted is not None:
        wanted = tuple(wanted[-2:])
        totals = [f - w for f, w in zip(full, wanted)]
        if auto_pad == "SAME_UPPER":
            pads = tuple(t // 2 for t in totals) + tuple(t - t // 2 for t in totals)
        else:
            pads = tuple(t - t // 2 for t in totals) + tuple(t // 2 for t in totals)
    elif auto_pad in ("NOTSET", "", "VALID"):
        pads = ctx.ints("pads", (0, 0, 0, 0)) if auto_pad != "VALID" else (0, 0, 0, 0)
    else:
        raise ctx.error(f"auto_pad={auto_pad!r} is not supported")
    x = ctx.input(0)
    for axis, (size, stride) in ((2, (height, strides[0])), (3, (width, strides[1]))):
        if stride > 1 and size > 1:  # spread: each row followed by stride - 1 rows of zeros
            dims = [n, c_in, height, width]
            dims[axis] = size
            expanded = R.expand_dims(x, axis=axis + 1)
            zero_dims = list(dims)
            zero_dims.insert(axis + 1, stride - 1)
            zeros = Constant(np.zeros(zero_dims, dtype=ctx.dtype(0)))
            spread_dims = list(dims)
            spread_dims[axis] = size * stride
            spread = R.reshape(R.concat([expanded, zeros], axis=axis + 1), spread_dims)
            x = ctx.emit(R.strided_slice(spread, axes=(axis,), begin=(0,), end=((size - 1) * stride + 1,)))
            if axis == 2:
                height = (size - 1) * stride + 1
            else:
                width = (size - 1) * stride + 1
    weight = R.reshape(ctx.input(1), (groups, c_in // groups, w_dims[1], *kernel))
    weight = R.permute_dims(weight, axes=(0, 2, 1, 3, 4))
    weight = R.reshape(weight, (groups * w_dims[1], c_in // groups, *kernel))
    weight = R.strided_slice(weight, axes=(2, 3), begin=(kernel[0] - 1, kernel[1] - 1),
                             end=(-kernel[0] - 1, -kernel[1] - 1), strides=(-1, -1))
    begin = [e - 1 - p for e, p in zip(extents, pads[:2])]
    end = [e - 1 - p + o for e, p, o in zip(extents, pads[2:], extra)]
    y = R.nn.conv2d(x, weight, padding=(max(begin[0], 0), max(begin[1], 0), max(end[0], 0), max(end[1], 0)),
                    dilation=dilations, groups=groups)
    y = ctx.emit(y)
    out_h, out_w = (int(d.value) for d in y.struct_info.shape[2:])
    crops = [(max(-begin[0], 0), out_h - max(-end[0], 0)), (max(-begin[1], 0), out_w - max(-end[1], 0))]
    if crops != [(0, out_h), (0, out_w)]:
        y = R.strided_slice(y, axes=(2, 3), begin=(crops[0][0], crops[1][0]), end=(crops[0][1], crops[1][1]))
    if ctx.has_input(2):
        y = R.add(y, R.reshape(ctx.input(2), (1, -1, 1, 1)))
    return R.squeeze(y, axis=(2,)) if one_d else y


# -- Resize: one interpolation matrix per axis ----------------------------------------------------

_RESIZE_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric")


def _source_position(mode: str, x: int, scale: float, size_in: int, size_out: int) -> float:
    """Where output index ``x`` samples the input, by coordinate_transformation_mode."""
    width = scale * size_in  # the output's length before rounding
    if mode == "align_corners":
        return 0.0 if width == 1 else x * (size_in - 1) / (width - 1)
    if mode == "asymmetric":
        return x / scale
    if mode == "pytorch_half_pixel":
        return -0.5 if width == 1 else (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = size_in / 2 * (1 - size_out / width)
        return offset + (x + 0.5) / scale - 0.5
    return (x + 0.5) / scale - 0.5


def _taps(kind: str, ratio: float, nearest_mode: str, a: float) -> np.ndarray:
    if kind == "nearest":
        if ratio == 1.0:
            return np.array([0.0, 1.0])
        prefer = {"round_prefer_floor": ratio <= 0.5, "round_prefer_ceil": ratio < 0.5,
                  "floor": True, "ceil": False}[nearest_mode]
        return np.array([1.0, 0.0]) if prefer else np.array([0.0, 1.0])
    if kind == "linear":
        return np.array([1.0 - ratio, ratio])
    r = ratio  # cubic convolution (Keys), taps at -1, 0, 1, 2 from the floor
    return np.array([((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                     ((a + 2) * r - (a + 3)) * r * r + 1,
                     ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
                     ((a * (2 - r) - 5 * a) * (2 - r) + 8 * a) * (2 - r) - 4 * a])


def resize_matrix(kind: str, mode: str, size_in: int, size_out: int, scale: float, nearest_mode: str = "",
                  a: float = -0.75, exclude_outside: bool = False) -> np.ndarray:
    """(size_out, size_in) weights: output x = sum_i M[x, i] * input i along one axis. The taps
    before the first and after the last input repeat the edge, as ONNX's edge padding does."""
    matrix = np.zeros((size_out, size_in))
    for x in range(size_out):
        position = _source_position(mode, x, scale, size_in, size_out)
        left = int(np.ceil(position)) - 1  # the tap at or left of the position; an exact hit weighs 1 right of it
        ratio = position - left
        taps = _taps(kind, ratio, nearest_mode, a)
        first = left - len(taps) // 2 + 1
        indices = np.arange(first, first + len(taps))
        if exclude_outside:
            taps = np.where((indices >= 0) & (indices < size_in), taps, 0.0)
            taps = taps / taps.sum()
        for index, weight in zip(np.clip(indices, 0, size_in - 1), taps):
            matrix[x, index] += weight
    return matrix


@converter("Resize", since=13, attrs=("coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                                      "extrapolation_value", "mode", "nearest_mode"))
def _resize_13(ctx: NodeContext):
    return _resize(ctx)


@converter("Resize", since=18, attrs=("antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a",
                                      "exclude_outside", "extrapolation_value", "keep_aspect_ratio_policy", "mode",
                                      "nearest_mode"))
def _resize_18(ctx: NodeContext):
    return _resize(ctx)


def _text_attr(ctx: NodeContext, name: str, default: str) -> str:
    value = ctx.attr(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _resize(ctx: NodeContext):
    """Separable: each resized axis is a matrix product with its interpolation matrix (linear,
    cubic), or a take of the nearest indices (any dtype). Scales or sizes must be constants."""
    kind = _text_attr(ctx, "mode", "nearest")
    mode = _text_attr(ctx, "coordinate_transformation_mode", "half_pixel")
    nearest_mode = _text_attr(ctx, "nearest_mode", "round_prefer_floor")
    if kind not in ("nearest", "linear", "cubic"):
        raise ctx.error(f"mode={kind!r} is not supported", "invalid")
    if mode not in _RESIZE_MODES:
        raise ctx.error(f"coordinate_transformation_mode={mode!r} is not supported")
    if ctx.attr("antialias", 0):
        raise ctx.error("antialias=1 is not supported")
    policy = _text_attr(ctx, "keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise ctx.error(f"keep_aspect_ratio_policy={policy!r} is not supported", "invalid")
    dims = ctx.static_dims(0, "Resize")
    rank = len(dims)
    axes = [axis_of(ctx, a, rank) for a in ctx.ints("axes", tuple(range(rank)))]
    scales = sizes = None
    if ctx.has_input(3):
        sizes = [int(v) for v in ctx.constant(3, "sizes").reshape(-1)]
    elif ctx.has_input(2) and ctx.constant(2, "scales").size:
        scales = [float(v) for v in ctx.constant(2, "scales").reshape(-1)]
    else:
        raise ctx.error("neither scales nor sizes is given", "invalid")
    if sizes is not None and policy != "stretch":  # one scale for every axis, the sizes a bound
        ratios = [size / dims[axis] for size, axis in zip(sizes, axes)]
        common = min(ratios) if policy == "not_larger" else max(ratios)
        fixed_sizes = [int(np.floor(dims[axis] * common + 0.5)) for axis in axes]
        scales, sizes = [common] * len(axes), None
    else:
        fixed_sizes = None
    x = ctx.input(0)
    if kind != "nearest":
        require_float(ctx)
    for position, axis in enumerate(axes):
        size_in = dims[axis]
        if sizes is not None:
            size_out, scale = sizes[position], sizes[position] / size_in
        else:
            scale = scales[position]
            size_out = fixed_sizes[position] if fixed_sizes else int(np.floor(size_in * scale))
        if size_out == size_in and scale == 1.0:
            continue
        matrix = resize_matrix(kind, mode, size_in, size_out, scale, nearest_mode,
                               float(ctx.attr("cubic_coeff_a", -0.75)), bool(ctx.attr("exclude_outside", 0)))
        if kind == "nearest":
            x = R.take(x, const(np.argmax(matrix, axis=1), "int64"), axis=axis)
            continue
        perm = [a for a in range(rank) if a != axis] + [axis]
        moved = R.permute_dims(x, axes=tuple(perm)) if axis != rank - 1 else x
        y = R.matmul(moved, Constant(matrix.T.astype(ctx.dtype(0))))
        x = R.permute_dims(y, axes=tuple(int(v) for v in np.argsort(perm))) if axis != rank - 1 else y
        x = ctx.emit(x)
    return x


@converter("CumProd", since=26, attrs=("exclusive", "reverse"))
def _cumprod(ctx: NodeContext):
    """Prefix products in log2(n) steps (each multiplies by the running product shifted by 1, 2,
    4, ... with ones shifted in), so zeros and signs need no special case."""
    rank = ctx.rank(0)
    axis = axis_of(ctx, int(np.asarray(ctx.constant(1, "axis")).reshape(-1)[0]), rank)
    dims = list(ctx.static_dims(0, "CumProd"))
    size = dims[axis]
    x = ctx.input(0)

    def flip(value):
        return R.strided_slice(value, axes=(axis,), begin=(size - 1,), end=(-size - 1,), strides=(-1,))

    def shifted(value, shift):
        ones = list(dims)
        ones[axis] = shift
        kept = R.strided_slice(value, axes=(axis,), begin=(0,), end=(size - shift,))
        return R.concat([Constant(np.ones(ones, dtype=ctx.dtype(0))), kept], axis=axis)

    if size == 0:
        return x
    if ctx.attr("reverse", 0):
        x = flip(x)
    if ctx.attr("exclusive", 0):
        x = shifted(x, 1)
    shift = 1
    while shift < size:
        x = ctx.emit(R.multiply(x, shifted(x, shift)))
        shift *= 2
    return flip(x) if ctx.attr("reverse", 0) else x


# -- control flow ---------------------------------------------------------------------------------


@converter("If", attrs=("then_branch", "else_branch"))
def _if(ctx: NodeContext):
    """Relax If: each branch's graph converted into an arm of its own; several outputs travel as
    a tuple."""
    cond = ctx.input(0)
    if ctx.dtype(0) != "bool":
        raise ctx.error(f"the condition is {ctx.dtype(0)}, not bool", "invalid")
    if isinstance(cond, Constant):  # known now: only the branch taken is imported (the other may not fit)
        graph = ctx.attrs["then_branch" if bool(cond.data.reshape(-1)[0]) else "else_branch"].g
        return ctx.importer.convert_subgraph(graph, ctx.env)
    if ctx.rank(0) != 0:
        cond = ctx.emit(R.reshape(cond, ()))
    bb = ctx.builder
    arms = []
    for name in ("then_branch", "else_branch"):
        graph = ctx.attrs[name].g
        with bb.branch() as arm:
            outputs = ctx.importer.convert_subgraph(graph, ctx.env)
            arm.result = outputs[0] if len(outputs) == 1 else Tuple(tuple(outputs))
        arms.append((arm, len(outputs)))
    (then_arm, count), (else_arm, other) = arms
    if count != other:
        raise ctx.error(f"the branches give {count} and {other} outputs", "invalid")
    result = bb.emit_if(cond, then_arm.seq, else_arm.seq)
    if count == 1:
        return result
    return [TupleGetItem(result, i) for i in range(count)]


# -- quantization (QDQ) ---------------------------------------------------------------------------

_INT_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
               "int32": (-2 ** 31, 2 ** 31 - 1)}


def _per_axis(ctx: NodeContext, value, value_index: int, rank: int):
    """A per-tensor (scalar or one-element) or per-axis (1-D, along the ``axis`` attribute) scale or
    zero point, shaped to broadcast against a tensor of ``rank``."""
    value_rank = ctx.rank(value_index)
    if value_rank == 0:
        return value
    if value_rank != 1:
        raise ctx.error("blocked quantization (a scale of rank 2 or more) is not supported")
    if rank <= 1:
        return value
    axis = axis_of(ctx, ctx.attr("axis", 1), rank)
    return R.reshape(value, [-1 if a == axis else 1 for a in range(rank)])


@converter("DequantizeLinear", attrs=("axis", "block_size", "output_dtype"))
def _dequantize(ctx: NodeContext):
    if ctx.attr("block_size", 0):
        raise ctx.error("block_size (blocked quantization) is not supported")
    rank = ctx.rank(0)
    scale_dtype = ctx.dtype(1)
    x = R.astype(ctx.input(0), dtype=scale_dtype)
    if ctx.has_input(2):
        zero = R.astype(_per_axis(ctx, ctx.input(2), 2, rank), dtype=scale_dtype)
        x = R.subtract(x, zero)
    y = R.multiply(x, _per_axis(ctx, ctx.input(1), 1, rank))
    if "output_dtype" in ctx.attrs and ctx.attr("output_dtype"):
        y = R.astype(y, dtype=ir_dtype(int(ctx.attr("output_dtype")), "output_dtype"))
    return y


def quantize(ctx: NodeContext, x, scale, zero, dtype: str):
    """saturate(round_half_even(x / scale) + zero) in ``dtype``."""
    low, high = _INT_RANGES[dtype]
    x_dtype = x.struct_info.dtype if hasattr(x, "struct_info") and x.struct_info is not None else "float32"
    y = R.round(R.divide(x, scale))
    if zero is not None:
        y = R.add(y, R.astype(zero, dtype=x_dtype))
    return R.astype(R.clip(y, min=float(low), max=float(high)), dtype=dtype)


@converter("QuantizeLinear", attrs=("axis", "block_size", "output_dtype", "precision", "saturate"))
def _quantize(ctx: NodeContext):
    if ctx.attr("block_size", 0):
        raise ctx.error("block_size (blocked quantization) is not supported")
    require_float(ctx)
    rank = ctx.rank(0)
    if ctx.has_input(2):
        dtype = ctx.dtype(2)
    elif ctx.attr("output_dtype"):
        dtype = ir_dtype(int(ctx.attr("output_dtype")), "output_dtype")
    else:
        dtype = "uint8"
    if dtype not in _INT_RANGES:
        raise ctx.error(f"quantizing to {dtype} is not supported")
    scale = R.astype(_per_axis(ctx, ctx.input(1), 1, rank), dtype=ctx.dtype(0))
    zero = _per_axis(ctx, ctx.input(2), 2, rank) if ctx.has_input(2) else None
    x = ctx.input(0)
    return quantize(ctx, x, ctx.emit(scale), zero, dtype)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize(ctx: NodeContext):
    """uint8 with a scale and zero point from the tensor's range (which always includes 0)."""
    require_float(ctx)
    x = ctx.input(0)
    zero = scalar_like(ctx, 0.0)
    # Computed as one-element vectors, made scalars at the end (the IR's 0-d casts give numpy scalars).
    high = R.maximum(R.reshape(R.max(x), (1,)), zero)
    low = R.minimum(R.reshape(R.min(x), (1,)), zero)
    scale = ctx.emit(R.divide(R.subtract(high, low), scalar_like(ctx, 255.0)))
    zero_point = ctx.emit(R.astype(R.clip(R.round(R.subtract(zero, R.divide(low, scale))), min=0.0, max=255.0),
                                   dtype="uint8"))
    scalar = ShapeExpr(())
    return [quantize(ctx, x, scale, zero_point, "uint8"), R.reshape(scale, scalar), R.reshape(zero_point, scalar)]


@converter("QLinearMatMul")
def _qlinear_matmul(ctx: NodeContext):
    """Dequantize both sides, multiply in float32, quantize to the output's scale and zero point."""
    def dequantized(value, scale, zero):
        return R.multiply(R.subtract(R.astype(ctx.input(value), dtype="float32"),
                                     R.astype(ctx.input(zero), dtype="float32")),
                          R.astype(ctx.input(scale), dtype="float32"))

    product = ctx.emit(R.matmul(dequantized(0, 1, 2), dequantized(3, 4, 5)))
    return quantize(ctx, product, R.astype(ctx.input(6), dtype="float32"), ctx.input(7), ctx.dtype(7))


@converter("MatMulInteger")
def _matmul_integer(ctx: NodeContext):
    def widened(value, zero):
        x = R.astype(ctx.input(value), dtype="int32")
        if ctx.has_input(zero):
            x = R.subtract(x, R.astype(ctx.input(zero), dtype="int32"))
        return x

    return R.matmul(widened(0, 2), widened(1, 3))
