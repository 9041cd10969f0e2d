"""Neural-network converters: matrix products, convolution and pooling, normalization, softmax,
and scaled dot-product attention."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import Constant
from .convert_common import cast, const, is_float
from .registry import NodeContext, converter

# -- matrix products ------------------------------------------------------------------------------


def _transposed(w):
    return R.permute_dims(w, axes=(1, 0))


@converter("aten.linear.default")
def _linear(ctx: NodeContext):
    x, w = ctx.tensor("input"), ctx.tensor("weight")
    y = R.matmul(x, _transposed(w))
    return R.add(y, ctx.tensor("bias")) if ctx["bias"] is not None else y


@converter("aten.addmm.default", "aten.baddbmm.default")
def _addmm(ctx: NodeContext):
    a, b = (ctx.tensor("mat1"), ctx.tensor("mat2")) if ctx["mat1"] is not None \
        else (ctx.tensor("batch1"), ctx.tensor("batch2"))
    dtype = ctx.out_dtype
    y = R.matmul(a, b)
    alpha, beta = ctx["alpha"], ctx["beta"]
    if alpha not in (None, 1):
        y = R.multiply(y, const(alpha, dtype))
    if beta == 0:
        return y
    bias = ctx.tensor("self")
    if beta not in (None, 1):
        bias = R.multiply(bias, const(beta, dtype))
    return R.add(bias, y)


@converter("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _matmul(ctx: NodeContext):
    other = ctx["mat2"] if ctx["mat2"] is not None else ctx["other"]
    return R.matmul(ctx.tensor("self"), other)


# -- convolution and pooling ----------------------------------------------------------------------


def _pair(values, fill: int) -> tuple[int, int]:
    values = tuple(values) if values else (fill,)
    return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])


def _as_2d(ctx: NodeContext, x, name: str):
    """A rank-3 (1-D) input made 2-D with a height of 1; True when the caller must squeeze back."""
    rank = ctx.rank(x)
    if rank == 4:
        return x, False
    if rank == 3:
        return ctx.emit(R.expand_dims(x, axis=2)), True
    raise ctx.error(f"{name} over rank {rank} is not supported (1-D and 2-D only)")


def _convolution(ctx: NodeContext, x, w, bias, stride, padding, dilation, groups):
    x, one_d = _as_2d(ctx, x, "convolution")
    if one_d:
        w = Constant(w.data[:, :, None], name=w.name) if isinstance(w, Constant) \
            else ctx.emit(R.expand_dims(w, axis=2))

        def widen(values, fill):
            return (fill, *(values or (fill,)))

        stride, padding, dilation = widen(stride, 1), widen(padding, 0), widen(dilation, 1)
    if isinstance(padding, str):
        raise ctx.error(f"padding={padding!r} is not supported (explicit padding only)")
    ph, pw = _pair(padding, 0)
    y = R.nn.conv2d(x, w, strides=_pair(stride, 1), padding=(ph, pw, ph, pw), dilation=_pair(dilation, 1),
                    groups=int(groups))
    if bias is not None:
        y = R.add(y, R.reshape(bias, [1, -1, 1, 1]))
    return R.squeeze(y, axis=(2,)) if one_d else y


@converter("aten.convolution.default")
def _convolution_op(ctx: NodeContext):
    if ctx["transposed"]:
        return _transposed_convolution(ctx, ctx.tensor("input"), ctx.tensor("weight"), ctx["bias"],
                                       ctx.ints("stride"), ctx.ints("padding"), ctx.ints("dilation"),
                                       ctx.ints("output_padding"), int(ctx["groups"]))
    return _convolution(ctx, ctx.tensor("input"), ctx.tensor("weight"), ctx["bias"], ctx.ints("stride"),
                        ctx.ints("padding"), ctx.ints("dilation"), ctx["groups"])


def _transposed_convolution(ctx: NodeContext, x, w, bias, stride, padding, dilation, output_padding, groups: int):
    """A transposed convolution as a plain one: the input spread out (stride - 1 zeros between
    neighbours), padded by dilation·(k - 1) - padding (plus output_padding at the end), and
    convolved with the kernel flipped and its in/out channels swapped per group."""
    if not isinstance(w, Constant):
        raise ctx.error("a transposed convolution's weight must be a constant (a parameter)")
    x, one_d = _as_2d(ctx, x, "transposed convolution")
    data = w.data[:, :, None] if one_d else w.data
    widen = (lambda values, fill: (fill, *(values or (fill,)))) if one_d else (lambda values, fill: values)
    stride, padding = _pair(widen(stride, 1), 1), _pair(widen(padding, 0), 0)
    dilation, output_padding = _pair(widen(dilation, 1), 1), _pair(widen(output_padding, 0), 0)
    c_in, c_out_group, kh, kw = data.shape
    kernel = data.reshape(groups, c_in // groups, c_out_group, kh, kw).transpose(0, 2, 1, 3, 4)
    kernel = np.ascontiguousarray(kernel.reshape(groups * c_out_group, c_in // groups, kh, kw)[:, :, ::-1, ::-1])
    spread = _spread(ctx, x, stride)
    pads = []
    for k, d, p in zip((kh, kw), dilation, padding):
        pads.append(d * (k - 1) - p)
    if min(pads) < 0:
        raise ctx.error(f"padding {padding} larger than dilation·(kernel - 1) is not supported")
    y = R.nn.conv2d(spread, Constant(kernel, name=f"{w.name}:transposed" if w.name else ""),
                    padding=(pads[0], pads[1], pads[0] + output_padding[0], pads[1] + output_padding[1]),
                    dilation=dilation, groups=groups)
    if bias is not None:
        y = R.add(y, R.reshape(bias, [1, -1, 1, 1]))
    return R.squeeze(y, axis=(2,)) if one_d else y


def _spread(ctx: NodeContext, x, stride):
    """(n, c, h, w) -> (n, c, (h - 1)·sh + 1, (w - 1)·sw + 1) with zeros between the values."""
    for axis, s in ((2, stride[0]), (3, stride[1])):
        if s == 1:
            continue
        dims = list(ctx.dims(x))
        column = ctx.emit(R.expand_dims(x, axis=axis + 1))  # (..., size, 1, ...)
        gap = list(ctx.dims(column))
        gap[axis + 1] = s - 1
        widened = ctx.emit(R.concat([column, R.zeros(gap, dtype=ctx.dtype(x))], axis=axis + 1))
        merged = dims[:axis] + [dims[axis] * s] + dims[axis + 1:]
        flat = ctx.emit(R.reshape(widened, merged))
        x = ctx.emit(R.strided_slice(flat, axes=(axis,), begin=(0,), end=(dims[axis] * s - (s - 1),)))
    return x


@converter("aten.conv1d.default", "aten.conv2d.default")
def _conv(ctx: NodeContext):
    return _convolution(ctx, ctx.tensor("input"), ctx.tensor("weight"), ctx["bias"], ctx.ints("stride"),
                        ctx.ints("padding"), ctx.ints("dilation"), ctx["groups"])


def _drop_windows_in_padding(ctx, y, spatial, kernel, strides, pads):
    """torch's ceil mode drops a last window that would start in the end padding; the IR's keeps
    it, so that row or column is sliced off (static shapes only)."""
    axes, ends = [], []
    for axis in range(2):
        size, k, s, pad = spatial[axis], kernel[axis], strides[axis], pads[axis]
        out = -(-(size + 2 * pad - k) // s) + 1
        if (out - 1) * s >= size + pad:
            axes.append(axis + 2)
            ends.append(out - 1)
    if not axes:
        return y
    return R.strided_slice(y, axes=tuple(axes), begin=(0,) * len(axes), end=tuple(ends))


def _pool(ctx: NodeContext, kind: str):
    x, one_d = _as_2d(ctx, ctx.tensor("self"), f"{kind}_pool")
    kernel = ctx.ints("kernel_size")
    stride = ctx.ints("stride") or kernel
    padding, dilation = ctx.ints("padding") or (0,), ctx.ints("dilation") or (1,)
    if one_d:
        kernel, stride, padding, dilation = (1, *kernel), (1, *stride), (0, *padding), (1, *dilation)
    kernel, stride, dilation = _pair(kernel, 1), _pair(stride, 1), _pair(dilation, 1)
    ph, pw = _pair(padding, 0)
    ceil = bool(ctx["ceil_mode"])
    attrs = dict(pool_size=kernel, strides=stride, padding=(ph, pw, ph, pw), dilation=dilation, ceil_mode=ceil)
    if kind == "max":
        y = R.nn.max_pool2d(x, **attrs)
    else:
        if ctx["divisor_override"] is not None:
            raise ctx.error("divisor_override is not supported")
        include = True if ctx["count_include_pad"] is None else bool(ctx["count_include_pad"])
        y = R.nn.avg_pool2d(x, count_include_pad=include, **attrs)
    if ceil:
        spatial = ctx.static_dims(x, "ceil_mode=True", 2)
        y = _drop_windows_in_padding(ctx, y, spatial, kernel, stride, (ph, pw))
    return R.squeeze(y, axis=(2,)) if one_d else y


@converter("aten.max_pool2d.default", "aten.max_pool1d.default")
def _max_pool(ctx: NodeContext):
    return _pool(ctx, "max")


@converter("aten.max_pool2d_with_indices.default")
def _max_pool_with_indices(ctx: NodeContext):
    return [_pool(ctx, "max")]  # the indices (for unpooling, training) are not supported


@converter("aten.avg_pool2d.default", "aten.avg_pool1d.default")
def _avg_pool(ctx: NodeContext):
    return _pool(ctx, "avg")


@converter("aten.adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d.default",
           "aten.adaptive_avg_pool1d.default")
def _adaptive_avg_pool(ctx: NodeContext):
    """An output of 1 per axis is a mean; a size the input divides is a plain average pool; other
    sizes average windows of unequal lengths, as averaging matrices."""
    x, one_d = _as_2d(ctx, ctx.tensor("self"), "adaptive_avg_pool")
    out = tuple(ctx.ints("output_size"))
    out = (1, *out) if one_d else _pair(out, 1)
    if out == (1, 1):
        y = R.mean(x, axis=(2, 3), keepdims=True)
    else:
        spatial = ctx.static_dims(x, "adaptive_avg_pool with an output other than 1", 2)
        if any(size % o for size, o in zip(spatial, out)):
            # Windows of unequal sizes: one averaging matrix per axis, (out, in) @ x @ (in, out)ᵀ.
            rows, columns = (Constant(_adaptive_matrix(size, o, ctx.dtype(x))) for size, o in zip(spatial, out))
            y = R.matmul(ctx.emit(R.matmul(rows, x)), R.permute_dims(columns, axes=(1, 0)))
        else:
            kernel = tuple(size // o for size, o in zip(spatial, out))
            y = R.nn.avg_pool2d(x, pool_size=kernel, strides=kernel)
    return R.squeeze(y, axis=(2,)) if one_d else y


def _adaptive_matrix(size: int, out: int, dtype: str) -> np.ndarray:
    """(out, size): row i averages torch's adaptive window [floor(i·size/out), ceil((i+1)·size/out))."""
    matrix = np.zeros((out, size), dtype=np.float64)
    for i in range(out):
        start, end = (i * size) // out, -(-((i + 1) * size) // out)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix.astype(dtype)


# -- normalization --------------------------------------------------------------------------------


def _per_channel(value, rank: int):
    return R.reshape(value, [1, -1, *([1] * (rank - 2))]) if rank > 2 else value


def _batch_norm(ctx: NodeContext, x, weight, bias, mean, var, eps):
    """Inference: (x - mean) / sqrt(var + eps) * weight + bias, per channel (axis 1)."""
    rank = ctx.rank(x)
    dtype = ctx.dtype(x)
    scale = R.rsqrt(R.add(var, const(eps, dtype)))
    if weight is not None:
        scale = R.multiply(scale, weight)
    y = R.multiply(R.subtract(x, _per_channel(mean, rank)), _per_channel(scale, rank))
    return R.add(y, _per_channel(bias, rank)) if bias is not None else y


@converter("aten._native_batch_norm_legit_no_training.default")
def _batch_norm_inference(ctx: NodeContext):
    return [_batch_norm(ctx, ctx.tensor("input"), ctx["weight"], ctx["bias"], ctx.tensor("running_mean"),
                        ctx.tensor("running_var"), float(ctx["eps"]))]


@converter("aten.batch_norm.default", "aten.native_batch_norm.default")
def _batch_norm_op(ctx: NodeContext):
    if ctx["training"]:
        raise ctx.error("batch norm in training mode is not supported: export the module in eval mode")
    if ctx["running_mean"] is None:
        raise ctx.error("batch norm without running statistics is not supported")
    y = _batch_norm(ctx, ctx.tensor("input"), ctx["weight"], ctx["bias"], ctx.tensor("running_mean"),
                    ctx.tensor("running_var"), float(ctx["eps"]))
    return [y] if "native" in ctx.overload else y


def _layer_norm(ctx: NodeContext):
    x = ctx.tensor("input")
    count = len(ctx.ints("normalized_shape"))
    rank, dtype = ctx.rank(x), ctx.dtype(x)
    shape = ctx.static_dims(x, "layer_norm", rank - count) if ctx["weight"] is None or ctx["bias"] is None \
        else None
    weight = ctx["weight"] if ctx["weight"] is not None else Constant(np.ones(shape, dtype=dtype))
    bias = ctx["bias"] if ctx["bias"] is not None else Constant(np.zeros(shape, dtype=dtype))
    return R.nn.layer_norm(x, weight, bias, axes=tuple(range(rank - count, rank)), epsilon=float(ctx["eps"]))


@converter("aten.layer_norm.default")
def _layer_norm_op(ctx: NodeContext):
    return _layer_norm(ctx)


@converter("aten.native_layer_norm.default")
def _native_layer_norm(ctx: NodeContext):
    return [_layer_norm(ctx)]  # mean and rstd (for the backward pass) are not supported


def _group_norm(ctx: NodeContext, x, groups: int, weight, bias, eps: float):
    """Per sample and group: (x - mean) / sqrt(var + eps) over the group's channels and positions,
    then the per-channel affine."""
    dims = ctx.dims(x)
    dtype = ctx.dtype(x)
    grouped = ctx.emit(R.reshape(x, [dims[0], groups, -1]))
    mean = ctx.emit(R.mean(grouped, axis=(2,), keepdims=True))
    centered = ctx.emit(R.subtract(grouped, mean))
    var = R.mean(R.multiply(centered, centered), axis=(2,), keepdims=True)
    normed = R.reshape(R.multiply(centered, R.rsqrt(R.add(var, const(eps, dtype)))), list(dims))
    rank = len(dims)
    y = R.multiply(normed, _per_channel(weight, rank)) if weight is not None else normed
    return R.add(y, _per_channel(bias, rank)) if bias is not None else y


@converter("aten.group_norm.default")
def _group_norm_op(ctx: NodeContext):
    return _group_norm(ctx, ctx.tensor("input"), int(ctx["num_groups"]), ctx["weight"], ctx["bias"], float(ctx["eps"]))


@converter("aten.native_group_norm.default")
def _native_group_norm(ctx: NodeContext):
    return [_group_norm(ctx, ctx.tensor("input"), int(ctx["group"]), ctx["weight"], ctx["bias"], float(ctx["eps"]))]


def _softmax(name: str):
    def convert(ctx: NodeContext):
        x = cast(ctx.tensor("self"), ctx.out_dtype)
        if not is_float(x):
            raise ctx.error(f"softmax of {ctx.dtype(x)} is not supported")
        return R.make_call(name, x, axis=ctx.axis(ctx["dim"], ctx.rank(x)))

    return convert


converter("aten._softmax.default", "aten.softmax.int")(_softmax("nn.softmax"))
converter("aten._log_softmax.default", "aten.log_softmax.int")(_softmax("nn.log_softmax"))


# -- attention ------------------------------------------------------------------------------------


@converter("aten.scaled_dot_product_attention.default")
def _sdpa(ctx: NodeContext):
    """softmax(q kᵀ · scale + mask) v over the last two axes, as torch's math kernel computes it:
    a boolean mask keeps where True, a float mask is added, is_causal keeps j <= i (top-left
    aligned), and a query row that is masked entirely gives zeros."""
    q, k, v = ctx.tensor("query"), ctx.tensor("key"), ctx.tensor("value")
    if ctx["dropout_p"]:
        raise ctx.error(f"dropout_p={ctx['dropout_p']} is not supported (inference only)")
    dtype = ctx.dtype(q)
    q_dims, k_dims = ctx.dims(q), ctx.dims(k)
    head = ctx.analyzer.as_int(q_dims[-1])
    if head is None:
        raise ctx.error("the head size must be static")
    if ctx["enable_gqa"] and len(q_dims) >= 3:
        q_heads, kv_heads = ctx.analyzer.as_int(q_dims[-3]), ctx.analyzer.as_int(k_dims[-3])
        if q_heads is None or kv_heads is None or q_heads % kv_heads:
            raise ctx.error(f"grouped heads {q_dims[-3]} over {k_dims[-3]} are not supported")
        if q_heads != kv_heads:
            k, v = (_repeat_heads(ctx, t, q_heads // kv_heads) for t in (k, v))
    scale = ctx["scale"] if ctx["scale"] is not None else 1.0 / np.sqrt(head)
    rank = len(q_dims)
    order = (*range(rank - 2), rank - 1, rank - 2)
    scores = ctx.emit(R.multiply(R.matmul(q, R.permute_dims(k, axes=order)), const(scale, dtype)))
    keep = None  # where True a position may be attended (boolean masks and causality)
    mask = ctx["attn_mask"]
    if mask is not None:
        if ctx.dtype(mask) == "bool":
            keep = mask
        else:
            scores = ctx.emit(R.add(scores, cast(mask, dtype)))
    if ctx["is_causal"]:
        rows = R.expand_dims(R.arange(start=0, end=q_dims[-2], step=1, dtype="int64"), axis=1)
        cols = R.expand_dims(R.arange(start=0, end=k_dims[-2], step=1, dtype="int64"), axis=0)
        causal = ctx.emit(R.less_equal(cols, rows))
        keep = causal if keep is None else ctx.emit(R.logical_and(keep, causal))
    if keep is not None:
        # The lowest finite value rather than -inf: a row masked entirely stays finite (uniform),
        # where -inf would make NaNs for the zeroing below to hide.
        scores = ctx.emit(R.where(keep, scores, const(np.finfo(dtype).min, dtype)))
    probs = ctx.emit(R.nn.softmax(scores, axis=-1))
    if keep is not None:
        # A row masked entirely gives zeros, as torch's kernels do.
        anything = R.max(R.astype(keep, dtype="int32"), axis=(-1,), keepdims=True)
        probs = ctx.emit(R.where(R.greater(anything, const(0, "int32")), probs, const(0, dtype)))
    return R.matmul(probs, v)


def _repeat_heads(ctx: NodeContext, x, times: int):
    """(…, h, s, d) -> (…, h·times, s, d), each head repeated ``times`` times in a row."""
    dims = list(ctx.dims(x))
    wide = R.broadcast_to(R.expand_dims(x, axis=len(dims) - 2), [*dims[:-2], times, *dims[-2:]])
    return ctx.emit(R.reshape(wide, [*dims[:-3], dims[-3] * times, *dims[-2:]]))




@converter("aten._native_batch_norm_legit_functional.default", "aten._native_batch_norm_legit.default")
def _batch_norm_training(ctx: NodeContext):
    """What batch norm becomes in a module exported in training mode: refused, by name."""
    raise ctx.error("batch norm in training mode is not supported: export the module in eval mode")


@converter("aten._native_batch_norm_legit.no_stats")
def _batch_norm_batch_statistics(ctx: NodeContext):
    """Normalization by the batch's own statistics with no running ones to update: what
    instance_norm becomes (its input folded to one sample of N·C channels). Per channel (axis 1):
    the mean and biased variance over every other axis."""
    x = ctx.tensor("input")
    rank, dtype = ctx.rank(x), ctx.dtype(x)
    axes = tuple(a for a in range(rank) if a != 1)
    mean = ctx.emit(R.mean(x, axis=axes, keepdims=True))
    centered = ctx.emit(R.subtract(x, mean))
    var = R.mean(R.multiply(centered, centered), axis=axes, keepdims=True)
    y = R.multiply(centered, R.rsqrt(R.add(var, const(float(ctx["eps"]), dtype))))
    if ctx["weight"] is not None:
        y = R.multiply(y, _per_channel(ctx["weight"], rank))
    return [R.add(y, _per_channel(ctx["bias"], rank)) if ctx["bias"] is not None else y]
