"""Convolutions and pooling on C targets, through the micro-kernels of codegen/c/microkernels_conv.c
(direct convolution in register tiles of output channels by output columns; depthwise convolution
is the same with one channel per group; max and average pooling).

The legalization states the structure (``attrs["conv2d"]``, ``attrs["pool2d"]``: tir/window.py);
the body is not read. Each workgroup (one unit of a CPU thread pool's work) takes one image, a block
of up to ``CHANNELS`` output channels of one group (one channel for pooling) and a band of output
rows and columns of at most ``BAND`` positions; the micro-kernel writes the block's sums (or
maxima) to private scratch, then the kernel stores each one through the definition's ``finalize``:
average pooling's division, and whatever fuse_tir composed after the reduction (bias, ReLU, ReLU6's
clip, a residual add), so the epilogue costs no launch and no trip through memory.

Declines (the generic rules take the definition) where the target's backend lacks the micro-kernels,
data is not float32, the window's size is symbolic, or an operand is computed inside the fused
group rather than read from memory.
"""

from __future__ import annotations

from ... import arith
from ..compute import ComputeDef
from ..ir import (
    Buffer,
    Const,
    Declare,
    Evaluate,
    Extern,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Span,
    Store,
    binary,
    cast,
    minimum,
)
from ..ir import from_prim as prim
from ..window import ConvInfo, PoolInfo
from .common import grid_for, lower_reads, scalars_of, workgroup_linear_id

CONV, POOL = "tsr_conv2d_f32", "tsr_pool2d_f32"
# Output channels per workgroup (a multiple of the micro-kernel's tile of 4): few enough that a
# small layer still gives a thread pool several workgroups.
CHANNELS = 8
# Output positions per workgroup: whole rows where a row fits (a 1x1 convolution's rows then run as
# one), else chunks of a row.
BAND = 128


def applies(defn: ComputeDef, target) -> bool:
    """A convolution or pool that its legalization describes (tir/window.py), in float32, over operands
    the kernel reads from memory, on a target whose backend has the micro-kernel."""
    info = defn.attrs.get("conv2d") or defn.attrs.get("pool2d")
    if info is None or info.window is None or (defn.accumulate_dtype or "f32") != "f32":
        return False
    if defn.reduction is None or defn.reduction.combiner != ("max" if _is_max(info) else "sum"):
        return False
    buffers = (info.x, info.w) if isinstance(info, ConvInfo) else (info.x,)
    if any(b.dtype != "f32" or len(b.shape) != 4 or not any(b is i for i in defn.inputs) for b in buffers):
        return False
    if isinstance(info, ConvInfo) and _static(info.w.shape[0]) is None:
        return False
    return target.has_extern(CONV if isinstance(info, ConvInfo) else POOL)


def schedule_conv(defn: ComputeDef, target, name: str) -> PrimFunc:
    """Workgroup ``unit`` -> (image, group, block of channels, band of rows, chunk of a row); one call of
    the micro-kernel fills ``acc`` with the block's sums; each is stored through ``defn.finalize``."""
    info = defn.attrs.get("conv2d") or defn.attrs.get("pool2d")
    out = defn.output
    batch, out_channels, out_height, out_width = out.shape
    _, channels, height, width = info.x.shape
    if isinstance(info, ConvInfo):
        per_group = _static(info.w.shape[0]) // info.groups
        block = min(CHANNELS, per_group)
        groups = info.groups
    else:
        per_group, block, groups = 1, 1, out_channels
    static_width = _static(out_width)
    if static_width is not None and static_width <= BAND:
        rows, cols = max(1, BAND // static_width), static_width
    else:
        rows, cols = 1, BAND
    blocks = -(-per_group // block)
    bands, chunks = _ceil_div(out_height, rows), _ceil_div(out_width, cols)
    units = arith.simplify(batch * groups * blocks * bands * chunks)

    unit, rest = Local("unit"), Local("rest")
    n, g, blk, band, chunk = Local("img"), Local("grp"), Local("blk"), Local("band"), Local("chunk")
    o0, o_end, y0, y_end, x0, x_end = (Local(v) for v in ("o0", "o_end", "y0", "y_end", "x0", "x_end"))
    decode = [Declare(unit, workgroup_linear_id()),
              Declare(chunk, binary("%", unit, prim(chunks))),
              Declare(rest, binary("/", unit, prim(chunks))),
              Declare(band, binary("%", rest, prim(bands))),
              Declare(blk, binary("%", binary("/", rest, prim(bands)), Const(blocks))),
              Declare(g, binary("%", binary("/", rest, prim(bands * blocks)), prim(groups))),
              Declare(n, binary("/", rest, prim(bands * blocks * groups))),
              Declare(o0, binary("+", binary("*", g, Const(per_group)), binary("*", blk, Const(block)))),
              # Ends, not counts, so that the bounds checker (tir/verify.py) sees each loop stay inside.
              Declare(o_end, minimum(binary("+", o0, Const(block)), binary("*", binary("+", g, Const(1)),
                                                                         Const(per_group)))),
              Declare(y0, binary("*", band, Const(rows))),
              Declare(y_end, minimum(binary("+", y0, Const(rows)), prim(out_height))),
              Declare(x0, binary("*", chunk, Const(cols))),
              Declare(x_end, minimum(binary("+", x0, Const(cols)), prim(out_width)))]
    count, row_count, col_count = binary("-", o_end, o0), binary("-", y_end, y0), binary("-", x_end, x0)

    acc = Buffer("acc", "f32", (arith.IntImm(block * rows * cols),), "private")
    window = info.window
    geometry = (*window.kernel, *window.strides, *window.dilation, window.top, window.left)
    tile = (y0, row_count, x0, col_count, Const(cols))
    plane = prim(height * width)
    if isinstance(info, ConvInfo):
        in_group = prim(info.w.shape[1])
        first = binary("*", binary("+", binary("*", n, prim(channels)), binary("*", g, in_group)), plane)
        weights = prim(info.w.shape[1] * info.w.shape[2] * info.w.shape[3])
        call = Extern(CONV, (Span(info.x, first, binary("*", in_group, plane)), in_group, prim(height), prim(width),
                             Span(info.w, binary("*", binary("*", g, Const(per_group)), weights),
                                  binary("*", Const(per_group), weights)), binary("*", blk, Const(block)), count,
                             *(Const(v) for v in geometry), *tile, Const(rows * cols),
                             Span(acc, Const(0), Const(acc.shape[0].value))),
                      "void")
    else:
        first = binary("*", binary("+", binary("*", n, prim(channels)), g), plane)
        call = Extern(POOL, (Span(info.x, first, plane), prim(height), prim(width), *(Const(v) for v in geometry),
                             *tile, Const(int(_is_max(info))), Span(acc, Const(0), Const(acc.shape[0].value))),
                      "void")

    # Loops relative to the block (bounded by its static size for the scratch's sake), each absolute
    # position checked against the output's extent (which the bounds checker narrows on).
    oo, rr, xx, o, y, x = (Local(v) for v in ("oo", "rr", "xx", "out_c", "out_y", "out_x"))
    value = Load(acc, binary("+", binary("*", binary("+", binary("*", oo, Const(rows)), rr), Const(cols)), xx))
    if defn.finalize is not None:
        value = lower_reads(defn.finalize(value, [n, o, y, x]))
    index = binary("+", binary("*", binary("+", binary("*", binary("+", binary("*", n, prim(out_channels)), o),
                                                       prim(out_height)), y), prim(out_width)), x)
    column = (Declare(x, binary("+", x0, xx)),
              IfThen(binary("<", x, prim(out_width)), (Store(out, index, cast(value, out.dtype)),)))
    row = (Declare(y, binary("+", y0, rr)),
           IfThen(binary("<", y, prim(out_height)), (For(xx, Const(0), minimum(Const(cols), col_count), column),)))
    channel = (Declare(o, binary("+", o0, oo)),
               IfThen(binary("<", o, prim(out_channels)), (For(rr, Const(0), minimum(Const(rows), row_count), row),)))
    store = For(oo, Const(0), minimum(Const(block), count), channel)
    body = (decode[0], IfThen(binary("<", unit, prim(units)), (*decode[1:], Evaluate(call), store)))
    rule = "conv2d" if isinstance(info, ConvInfo) else "pool2d"
    return PrimFunc(name, defn.inputs, (out,), scalars_of(*defn.inputs, out), body, (1, 1, 1),
                    grid_for(units, target), scratch=(acc,), attrs={"rule": rule})


def _is_max(info) -> bool:
    return isinstance(info, PoolInfo) and info.kind == "max"


def _static(dim):
    return arith.Analyzer().as_int(arith.simplify(arith.as_expr(dim)))


def _ceil_div(dim, size: int):
    return arith.simplify((arith.as_expr(dim) + (size - 1)) // size)
