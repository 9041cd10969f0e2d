"""Quantized GEMV (M = 1, decode) for CPU targets whose workgroup threads run one after another
on a CPU thread (``target.serial_threads`` and ``cpu_adapter``: C kernels), where the GPU-shaped
rule (quantized.py) leaves the C compiler nothing to vectorize: its adjacent threads read weights
a row apart.

Here each thread owns one output column and walks its weight row from start to end. Within a
block, a loop over ``LANES`` lanes reads 8 consecutive bytes (tir/quant.py: the words are loaded
once, each lane picks its word with masks and its byte with a multiply), the 8 matching
activations (contiguous) and adds into ``LANES`` separate partial sums: lane ``l`` only ever adds
to ``acc[l]``, so the compiler vectorizes the lane loop without reassociating anything (no
-ffast-math), and the result does not depend on the vector width. The partial sums are added in
a fixed order at the end. The scale is applied once per block and lane, (d * sum x q + m * sum x)
rather than per value.

A workgroup holds ``COLUMNS`` threads, so that decode's small outputs (576 columns) still give a
thread pool dozens of workgroups to share. The last workgroup's columns past N read the last row
(clamped once, outside the loop) and store nothing.
"""

from __future__ import annotations

from ... import arith
from ..compute import ComputeDef
from ..ir import (
    Assign,
    Buffer,
    Builtin,
    Const,
    Declare,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Store,
    binary,
    cast,
    from_prim,
    minimum,
)
from ..quant import (
    FORMATS,
    LANE_FORMATS,
    Block,
    QuantizedMatmulInfo,
    lane_masks,
    lane_multiplier,
    lane_value,
    lane_values,
    lane_word,
    span_words,
)
from .common import ceil_div, grid_for, lower_reads, scalars_of, workgroup_linear_id

# 8 f32 lanes fill an AVX2 register, two of SSE, NEON or WASM SIMD128.
LANES = 8
COLUMNS = 16
LID = Builtin("local_id", 0)


def applies(info: QuantizedMatmulInfo, m_total, target) -> bool:
    """Decode (M = 1) on a CPU whose threads run serially (a target that asks for GPU-shaped rules
    with cpu_adapter off gets those), a 32-value format whose bytes the lanes read
    (``LANE_FORMATS``), K a whole number of word-aligned groups."""
    if info.format not in LANE_FORMATS:
        return False
    group_values = FORMATS[info.format].values * FORMATS[info.format].group_blocks
    return (target.cpu_adapter and target.serial_threads and arith.Analyzer().as_int(arith.simplify(m_total)) == 1
            and info.k % group_values == 0)


def schedule_quantized_gemv(defn: ComputeDef, info: QuantizedMatmulInfo, target, name: str) -> PrimFunc:
    out = defn.output
    fmt = FORMATS[info.format]
    n_dim, m_dims = out.shape[-1], out.shape[:-1]
    n = from_prim(n_dim)
    col, row, group, lane = Local("col"), Local("row"), Local("group"), Local("lane")
    acc = Buffer("acc", "f32", (arith.IntImm(LANES),), "private")
    body = [Declare(col, binary("+", binary("*", workgroup_linear_id(), Const(COLUMNS)), LID)),
            Declare(row, binary("*", minimum(col, binary("-", n, Const(1))), from_prim(info.w.shape[1]))),
            For(lane, Const(0), Const(LANES), (Store(acc, lane, Const(0.0, "f32")),))]

    def word_at(offset):
        return Load(info.w, binary("+", row, offset))

    base = Local("base")
    stmts = [Declare(base, binary("*", group, Const(fmt.group_words)))]
    for index in range(fmt.group_blocks):
        stmts += _block(info, word_at, base, group, index, lane, acc)
    body.append(For(group, Const(0), Const(info.k // (fmt.values * fmt.group_blocks)), tuple(stmts)))

    total = Local("total", "f32")
    body.append(Declare(total, Load(acc, Const(0))))
    body += [Assign(total, binary("+", total, Load(acc, Const(i)))) for i in range(1, LANES)]
    value = total
    if defn.finalize is not None:
        value = lower_reads(defn.finalize(total, [Const(0)] * len(m_dims) + [col]))
    body.append(IfThen(binary("<", col, n), (Store(out, col, cast(value, out.dtype)),)))
    grid = grid_for(ceil_div(n_dim, COLUMNS), target)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(*defn.inputs, out), tuple(body), (COLUMNS, 1, 1), grid,
                    scratch=(acc,), attrs={"rule": "quantized-gemv"})


def _block(info: QuantizedMatmulInfo, word_at, base, group, index: int, lane, acc) -> list:
    """Block ``index`` of the group at word ``base``: its scales, the words its bytes span, then
    the lane loop adding d * sum(x q) (+ m * sum(x) for Q4_1) into each lane's partial sum."""
    fmt, block_bytes = info.format, FORMATS[info.format].bytes
    d, m = FORMATS[fmt].scale(Block(word_at, index * block_bytes, base), 0)
    scale, low = Local(f"scale{index}", "f32"), Local(f"low{index}", "f32")
    stmts = [Declare(scale, d)] + ([Declare(low, m)] if m is not None else [])
    steps = lane_values(fmt, index * block_bytes, LANES)
    words = {}
    for start, _, _ in steps:
        for offset in span_words(start, LANES):
            if offset not in words:
                words[offset] = Local(f"w{index}_{offset}", "u32")
                stmts.append(Declare(words[offset], word_at(binary("+", base, Const(offset)))))
    values = FORMATS[fmt].values
    first = binary("+", binary("*", group, Const(values * FORMATS[fmt].group_blocks)), Const(index * values))
    # Every step starts at the same byte of a word: one multiplier and one set of masks for all.
    multiplier = Local("multiplier", "u32")
    inner = [Declare(multiplier, lane_multiplier(steps[0][0], lane))]
    masks = [Local(f"after{j}", "u32") for j in range(len(lane_masks(steps[0][0], LANES, lane)))]
    inner += [Declare(var, value) for var, value in zip(masks, lane_masks(steps[0][0], LANES, lane))]
    tops: dict[int, Local] = {}  # a step's byte moved to the top of its word (shared by both nibbles)
    dot, xsum = None, None
    for start, value_index, high in steps:
        if start not in tops:
            tops[start] = Local(f"top{len(tops)}", "u32")
            span = [words[o] for o in span_words(start, LANES)]
            inner.append(Declare(tops[start], binary("*", lane_word(span, masks), multiplier)))
        x = cast(Load(info.x, binary("+", first, binary("+", lane, Const(value_index)))), "f32")
        product = binary("*", x, lane_value(fmt, tops[start], high))
        dot = product if dot is None else binary("+", dot, product)
        xsum = x if xsum is None else binary("+", xsum, x)
    update = binary("*", scale, dot)
    if m is not None:
        update = binary("+", update, binary("*", low, xsum))
    inner.append(Store(acc, lane, binary("+", Load(acc, lane), update)))
    stmts.append(For(lane, Const(0), Const(LANES), tuple(inner)))
    return stmts
