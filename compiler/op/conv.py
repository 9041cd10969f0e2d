"""Convolution and pooling for small CNNs (NCHW data, OIHW weights)."""

from __future__ import annotations

import numpy as np

from .. import arith
from ..ir.errors import DeductionError
from ..tir.compute import ComputeDef, Reduction, accumulate_type, lowest, read
from ..tir.ir import Const, binary, cast, from_prim, logical_and, maximum, minimum, select
from ..tir.window import ConvInfo, PoolInfo, Window
from .common import operands_vdevice, result_tensor, same_dtype, tensor_input
from .lowering import clamp_index
from .registry import register_op


def _pair(value) -> tuple:
    return (value, value) if isinstance(value, int) else tuple(value)


def _quad(value) -> tuple:
    """Padding as (top, left, bottom, right), from 1, 2 or 4 values."""
    value = (value,) if isinstance(value, int) else tuple(value)
    if len(value) == 1:
        return value * 4
    if len(value) == 2:
        return value * 2
    return value


def _window_out(ctx, size, kernel, stride, pad_lo, pad_hi, dilation, ceil_mode=False):
    span = dilation * (kernel - 1) + 1
    numerator = size + pad_lo + pad_hi - span
    if ceil_mode:
        numerator = numerator + stride - 1
    return ctx.simplify(numerator // stride + 1)


def _check_layout(call, key, expected):
    if call.attr(key) != expected:
        raise DeductionError("unsupported attribute", f"{call.op.name} supports {key}={expected!r}, "
                             f"got {call.attr(key)!r}")


def _deduce_conv2d(call, ctx):
    _check_layout(call, "data_layout", "NCHW")
    _check_layout(call, "kernel_layout", "OIHW")
    x, w = tensor_input(call, 0, ctx), tensor_input(call, 1, ctx)
    dtype = call.attr("out_dtype") or same_dtype(call, [x, w], ctx)
    vdevice = operands_vdevice(call, ctx)
    for arg, info in zip(call.args, (x, w)):
        if info.ndim not in (-1, 4):
            raise DeductionError("rank mismatch", f"conv2d needs rank-4 tensors, {ctx.show(arg)} "
                                 f"has rank {info.ndim}")
    if x.shape is None or w.shape is None:
        return result_tensor(None, dtype, 4, vdevice)
    groups = call.attr("groups")
    in_channels = ctx.analyzer.as_int(x.shape[1])
    per_group = ctx.analyzer.as_int(w.shape[1])
    if in_channels is not None and per_group is not None and in_channels != per_group * groups:
        raise DeductionError("shape mismatch", f"{ctx.show(call.args[0])} has {in_channels} channels, "
                             f"{ctx.show(call.args[1])} expects {per_group} x {groups} groups")
    sh, sw = _pair(call.attr("strides"))
    dh, dw = _pair(call.attr("dilation"))
    top, left, bottom, right = _quad(call.attr("padding"))
    height = _window_out(ctx, x.shape[2], w.shape[2], sh, top, bottom, dh)
    width = _window_out(ctx, x.shape[3], w.shape[3], sw, left, right, dw)
    return result_tensor((x.shape[0], w.shape[0], height, width), dtype, vdevice=vdevice)


def _conv2d_reference(x, w, strides, padding, dilation, groups, data_layout, kernel_layout,
                      out_dtype):
    sh, sw = _pair(strides)
    dh, dw = _pair(dilation)
    top, left, bottom, right = _quad(padding)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, c, hp, wp = xp.shape
    o, cg, kh, kw = w.shape
    oh = (hp - dh * (kh - 1) - 1) // sh + 1
    ow = (wp - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * per_group:(g + 1) * per_group].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, g * per_group:(g + 1) * per_group] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out.astype(out_dtype or np.result_type(x, w))


def _legalize_conv2d(call, ctx):
    x, w = ctx.inputs
    out = ctx.output
    groups = call.attr("groups")
    sh, sw = _pair(call.attr("strides"))
    dh, dw = _pair(call.attr("dilation"))
    top, left, _, _ = _quad(call.attr("padding"))
    per_group = w.shape[1]
    out_per_group = arith.simplify(w.shape[0] // groups)
    acc = accumulate_type(out.dtype)

    def body(idx, ridx):
        nb, o, y, xx = idx
        c, i, j = ridx
        channel = binary("+", binary("*", binary("/", o, from_prim(out_per_group)), from_prim(per_group)), c)
        row = binary("-", binary("+", binary("*", y, Const(sh)), binary("*", i, Const(dh))), Const(top))
        col = binary("-", binary("+", binary("*", xx, Const(sw)), binary("*", j, Const(dw))), Const(left))
        inside = _inside(row, x.shape[2], col, x.shape[3])
        pixel = read(x, nb, channel, clamp_index(row, x.shape[2]), clamp_index(col, x.shape[3]))
        value = binary("*", cast(pixel, acc), cast(read(w, o, c, i, j), acc))
        return select(inside, value, Const(0.0, acc) if acc != "i32" else Const(0))

    extents = (per_group, w.shape[2], w.shape[3])
    info = ConvInfo(x, w, _window(call, w.shape[2:]), groups)
    return ComputeDef(ctx.kernel_name, (x, w), out, body, Reduction(extents, "sum", 0), accumulate_dtype=acc,
                      attrs={"conv2d": info})


def _window(call, kernel) -> Window | None:
    """The window's geometry as schedule rules read it (tir/window.py); None where the kernel's
    size is symbolic."""
    sizes = tuple(arith.Analyzer().as_int(arith.simplify(arith.as_expr(k))) for k in kernel)
    if None in sizes:
        return None
    top, left, _, _ = _quad(call.attr("padding"))
    return Window(sizes, _pair(call.attr("strides")), _pair(call.attr("dilation")), top, left)


def _inside(row, height, col, width):
    return logical_and(logical_and(binary(">=", row, Const(0)), binary("<", row, from_prim(height))),
                       logical_and(binary(">=", col, Const(0)), binary("<", col, from_prim(width))))


register_op("nn.conv2d", inputs=("data", "weight"),
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
                   "data_layout": "NCHW", "kernel_layout": "OIHW", "out_dtype": ""},
            deduce=_deduce_conv2d, reference=_conv2d_reference, legalize=_legalize_conv2d, precision="always")


def _deduce_pool(call, ctx):
    _check_layout(call, "layout", "NCHW")
    x = tensor_input(call, 0, ctx)
    if x.ndim not in (-1, 4):
        raise DeductionError("rank mismatch", f"{call.op.name} needs a rank-4 tensor, "
                             f"{ctx.show(call.args[0])} has rank {x.ndim}")
    if x.shape is None:
        return result_tensor(None, x.dtype, 4, x.vdevice)
    kh, kw = _pair(call.attr("pool_size"))
    sh, sw = _pair(call.attr("strides"))
    dh, dw = _pair(call.attr("dilation"))
    top, left, bottom, right = _quad(call.attr("padding"))
    ceil = call.attr("ceil_mode")
    height = _window_out(ctx, x.shape[2], kh, sh, top, bottom, dh, ceil)
    width = _window_out(ctx, x.shape[3], kw, sw, left, right, dw, ceil)
    return result_tensor((x.shape[0], x.shape[1], height, width), x.dtype, vdevice=x.vdevice)


def _pool_reference(kind):
    def reference(x, pool_size, strides, padding, dilation, ceil_mode, layout, count_include_pad=False):
        kh, kw = _pair(pool_size)
        sh, sw = _pair(strides)
        dh, dw = _pair(dilation)
        top, left, bottom, right = _quad(padding)
        n, c, h, w = x.shape

        def out_size(size, k, s, lo, hi, d):
            num = size + lo + hi - (d * (k - 1) + 1)
            return (num + (s - 1 if ceil_mode else 0)) // s + 1

        oh, ow = out_size(h, kh, sh, top, bottom, dh), out_size(w, kw, sw, left, right, dw)
        fill = -np.inf if kind == "max" else np.nan
        xp = np.full((n, c, h + top + bottom + sh * kh, w + left + right + sw * kw), fill)
        xp[:, :, top:top + h, left:left + w] = x
        rows = [slice(i * dh, i * dh + sh * (oh - 1) + 1, sh) for i in range(kh)]
        cols = [slice(j * dw, j * dw + sw * (ow - 1) + 1, sw) for j in range(kw)]
        windows = np.stack([xp[:, :, r, c] for r in rows for c in cols])
        if kind == "max":
            return windows.max(axis=0).astype(x.dtype)
        if count_include_pad:
            return np.nan_to_num(windows).sum(axis=0).__truediv__(kh * kw).astype(x.dtype)
        return np.nanmean(windows, axis=0).astype(x.dtype)

    return reference


def _legalize_pool(kind):
    def legalize(call, ctx):
        x, out = ctx.inputs[0], ctx.output
        kh, kw = _pair(call.attr("pool_size"))
        sh, sw = _pair(call.attr("strides"))
        dh, dw = _pair(call.attr("dilation"))
        top, left, _, _ = _quad(call.attr("padding"))
        acc = accumulate_type(x.dtype)

        def window(idx, i, j):
            nb, c, y, xx = idx
            row = binary("-", binary("+", binary("*", y, Const(sh)), binary("*", i, Const(dh))), Const(top))
            col = binary("-", binary("+", binary("*", xx, Const(sw)), binary("*", j, Const(dw))), Const(left))
            pixel = cast(read(x, nb, c, clamp_index(row, x.shape[2]), clamp_index(col, x.shape[3])), acc)
            return _inside(row, x.shape[2], col, x.shape[3]), pixel

        if kind == "max":
            def body(idx, ridx):
                inside, pixel = window(idx, *ridx)
                return select(inside, pixel, Const(lowest(acc), acc))

            return ComputeDef(ctx.kernel_name, (x,), out, body, Reduction((kh, kw), "max", lowest(acc)),
                              accumulate_dtype=acc, attrs={"pool2d": PoolInfo(x, _window(call, (kh, kw)), kind)})
        include_pad = call.attr("count_include_pad")

        def body(idx, ridx):
            inside, pixel = window(idx, *ridx)
            return select(inside, pixel, Const(0.0, acc))

        def finalize(total, idx):
            if include_pad:
                return binary("/", total, Const(float(kh * kw), acc))
            _, _, y, xx = idx
            count = binary("*", _covered(y, sh, top, kh, x.shape[2], dh), _covered(xx, sw, left, kw, x.shape[3], dw))
            return binary("/", total, cast(count, acc))

        return ComputeDef(ctx.kernel_name, (x,), out, body, Reduction((kh, kw), "sum", 0.0), finalize,
                          accumulate_dtype=acc, attrs={"pool2d": PoolInfo(x, _window(call, (kh, kw)), kind)})

    return legalize


def _covered(position, stride, pad, size, extent, dilation=1):
    """How many of the window's ``size`` taps along one axis fall inside [0, extent)."""
    start = binary("-", binary("*", position, Const(stride)), Const(pad))
    if dilation == 1:
        end = minimum(binary("+", start, Const(size)), from_prim(extent))
        return binary("-", end, maximum(start, Const(0)))
    # Taps i in [first, last]: start + i * dilation >= 0 from the first, <= extent - 1 to the last.
    d = Const(dilation)
    first = binary("/", binary("+", maximum(binary("-", Const(0), start), Const(0)), Const(dilation - 1)), d)
    room = binary("-", binary("-", from_prim(extent), Const(1)), start)
    last = select(binary(">=", room, Const(0)), minimum(binary("/", room, d), Const(size - 1)), Const(-1))
    return maximum(binary("+", binary("-", last, first), Const(1)), Const(0))


_POOL_ATTRS = {"pool_size": (1, 1), "strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1),
               "ceil_mode": False, "layout": "NCHW"}
register_op("nn.max_pool2d", inputs=("x",), attrs=_POOL_ATTRS, deduce=_deduce_pool,
            reference=_pool_reference("max"), legalize=_legalize_pool("max"))
register_op("nn.avg_pool2d", inputs=("x",), attrs={**_POOL_ATTRS, "count_include_pad": False},
            deduce=_deduce_pool, reference=_pool_reference("avg"), legalize=_legalize_pool("avg"))
