"""Reductions over dims: mean, sum, amax/amin, max/min with indices, argmax/argmin, any/all."""

from __future__ import annotations

from ... import op as R
from .convert_common import as_tensor, cast, const, product
from .registry import NodeContext, converter


def _axes(ctx: NodeContext, x, name: str = "dim"):
    """The reduced axes, normalized; None (all of them) where dim is absent or empty."""
    dims = ctx.ints(name)
    if not dims:
        return None
    rank = ctx.rank(x)
    return tuple(sorted({ctx.axis(d, rank) for d in dims}))


def _reduce(name: str):
    def convert(ctx: NodeContext):
        x = cast(ctx.tensor("self"), ctx.out_dtype)
        return R.make_call(name, x, axis=_axes(ctx, x), keepdims=bool(ctx["keepdim"]))

    return convert


converter("aten.mean.dim", "aten.mean.default")(_reduce("mean"))
converter("aten.sum.dim_IntList", "aten.sum.default")(_reduce("sum"))
converter("aten.amax.default", "aten.max.default")(_reduce("max"))
converter("aten.amin.default", "aten.min.default")(_reduce("min"))
converter("aten.prod.dim_int", "aten.prod.default")(_reduce("prod"))


@converter("aten.max.dim", "aten.min.dim")
def _max_dim(ctx: NodeContext):
    x = ctx.tensor("self")
    axis = ctx.axis(ctx["dim"], ctx.rank(x))
    keep = bool(ctx["keepdim"])
    which = "max" if ".max." in ctx.overload else "min"
    values = R.make_call(which, x, axis=(axis,), keepdims=keep)
    indices = R.make_call(f"arg{which}", x, axis=axis, keepdims=keep)
    return [values, indices]


@converter("aten.argmax.default", "aten.argmin.default")
def _argmax(ctx: NodeContext):
    x = ctx.tensor("self")
    name = "argmax" if "argmax" in ctx.overload else "argmin"
    dim = ctx["dim"]
    if dim is None:
        return R.make_call(name, R.reshape(x, [-1]), axis=0, keepdims=False)
    return R.make_call(name, x, axis=ctx.axis(dim, ctx.rank(x)), keepdims=bool(ctx["keepdim"]))


@converter("aten.any.dim", "aten.any.dims", "aten.any.default", "aten.all.dim", "aten.all.dims", "aten.all.default")
def _any_all(ctx: NodeContext):
    """any as the max of the values as 0/1, all as the min."""
    x = ctx.tensor("self")
    as_int = R.astype(R.not_equal(x, const(0, ctx.dtype(x))), dtype="int32")
    which = "max" if ".any." in ctx.overload else "min"
    reduced = R.make_call(which, as_int, axis=_axes(ctx, x), keepdims=bool(ctx["keepdim"]))
    return R.astype(reduced, dtype="bool")


@converter("aten.var.correction")
def _var(ctx: NodeContext):
    """sum((x - mean)²) / (N - correction) over the dims (N: how many values each result reduces)."""
    x = cast(ctx.tensor("self"), ctx.out_dtype)
    axes = _axes(ctx, x)
    dims = ctx.dims(x)
    count = product(dims[a] for a in (axes if axes is not None else range(len(dims))))
    correction = 1 if ctx["correction"] is None else ctx["correction"]
    if correction != int(correction):
        raise ctx.error(f"a fractional correction ({correction}) is not supported")
    correction = int(correction)
    mean = R.mean(x, axis=axes, keepdims=True)
    centered = ctx.emit(R.subtract(x, mean))
    total = R.sum(R.multiply(centered, centered), axis=axes, keepdims=bool(ctx["keepdim"]))
    divisor = as_tensor(ctx, ctx.analyzer.simplify(count - correction), ctx.dtype(x))
    return R.divide(total, divisor)


@converter("aten.var_mean.correction")
def _var_mean(ctx: NodeContext):
    x = cast(ctx.tensor("self"), ctx.out_dtype)
    return [_var(ctx), R.mean(x, axis=_axes(ctx, x), keepdims=bool(ctx["keepdim"]))]


@converter("aten.linalg_vector_norm.default")
def _vector_norm(ctx: NodeContext):
    """The p-norm over dims: 2 (sqrt of the sum of squares), 1, inf, -inf, 0 (count of non-zeros), or any p."""
    x = cast(ctx.tensor("self"), ctx.out_dtype)
    axes, keep = _axes(ctx, x), bool(ctx["keepdim"])
    dtype = ctx.dtype(x)
    order = 2.0 if ctx["ord"] is None else float(ctx["ord"])
    size = R.abs(x)
    if order == 2:
        return R.sqrt(R.sum(R.multiply(x, x), axis=axes, keepdims=keep))
    if order == 1:
        return R.sum(size, axis=axes, keepdims=keep)
    if order == float("inf"):
        return R.max(size, axis=axes, keepdims=keep)
    if order == float("-inf"):
        return R.min(size, axis=axes, keepdims=keep)
    if order == 0:
        return R.sum(R.astype(R.not_equal(x, const(0, dtype)), dtype=dtype), axis=axes, keepdims=keep)
    powered = R.sum(R.power(size, const(order, dtype)), axis=axes, keepdims=keep)
    return R.power(powered, const(1.0 / order, dtype))
