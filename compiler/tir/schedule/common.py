"""Pieces every schedule rule uses: thread indices, grids, flattening reads."""

from __future__ import annotations

from ... import arith
from ..compute import TensorRead, row_major_index
from ..ir import Builtin, Const, Load, TExpr, binary, map_children


def lower_reads(e: TExpr) -> TExpr:
    """Replace multi-dimensional TensorReads by flat Loads (row-major)."""
    if isinstance(e, TensorRead):
        indices = [lower_reads(i) for i in e.indices]
        return Load(e.buffer, row_major_index(indices, e.buffer.shape))
    return map_children(e, lower_reads)


def workgroup_linear_id() -> TExpr:
    """Workgroups are laid out on a 2-D grid to exceed 65,535 along one dimension."""
    return binary("+", binary("*", Builtin("workgroup_id", 1), Builtin("num_workgroups", 0)),
                  Builtin("workgroup_id", 0))


def global_thread_id(threads: int) -> TExpr:
    return binary("+", binary("*", workgroup_linear_id(), Const(threads)), Builtin("local_id", 0))


def grid_for(workgroups: arith.PrimExpr, target) -> tuple:
    """(x, y, 1) covering ``workgroups`` with at most the per-dimension limit along x."""
    limit = target.limit("maxComputeWorkgroupsPerDimension")
    total = arith.simplify(workgroups)
    static = arith.Analyzer().as_int(total)
    if static is not None:
        x = max(min(static, limit), 1)
        return (arith.IntImm(x), arith.IntImm(max(-(-static // limit), 1)), arith.IntImm(1))
    x = arith.min_expr(arith.max_expr(total, 1), limit)
    y = arith.max_expr((total + (limit - 1)) // limit, 1)
    return (x, y, arith.IntImm(1))


def ceil_div(a, b: int) -> arith.PrimExpr:
    return arith.simplify((arith.as_expr(a) + (b - 1)) // b)


def scalars_of(*buffers) -> tuple[str, ...]:
    """The symbolic variables a kernel needs, in first-appearance order."""
    names: dict[str, None] = {}
    for buf in buffers:
        for dim in buf.shape:
            for var in arith.free_vars(dim):
                names.setdefault(var.name)
    return tuple(names)


def combine(combiner: str, acc: TExpr, value: TExpr) -> TExpr:
    if combiner == "sum":
        return binary("+", acc, value)
    if combiner == "prod":
        return binary("*", acc, value)
    if combiner in ("max", "min"):
        return binary(combiner, acc, value)
    raise ValueError(f"unknown combiner {combiner}")

