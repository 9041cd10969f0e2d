"""Transpose rule: swap the last two axes through a 32x33 workgroup tile, so that both the
reads and the writes of a workgroup touch consecutive addresses (the padding column keeps
the column reads of the tile free of bank conflicts)."""

from __future__ import annotations

from ... import arith
from ..compute import ComputeDef, TransposeInfo
from ..ir import (
    Barrier,
    Buffer,
    Builtin,
    Const,
    Declare,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Store,
    binary,
    from_prim,
    logical_and,
)
from .common import scalars_of

TILE, ROWS = 32, 8  # a 32 x 8 workgroup moves a 32 x 32 tile, four rows per thread
LID = Builtin("local_id", 0)


def schedule_transpose(defn: ComputeDef, info: TransposeInfo, target, name: str) -> PrimFunc:
    (x,) = defn.inputs
    out = defn.output
    tile = Buffer("tile", x.dtype, (arith.IntImm(TILE * (TILE + 1)),), "workgroup")
    rows, cols = from_prim(info.rows), from_prim(info.cols)
    tx, ty, r0, c0, batch = Local("tx"), Local("ty"), Local("row0"), Local("col0"), Local("batch")
    body = [Declare(tx, binary("%", LID, Const(TILE))), Declare(ty, binary("/", LID, Const(TILE))),
            Declare(c0, binary("*", Builtin("workgroup_id", 0), Const(TILE))),
            Declare(r0, binary("*", Builtin("workgroup_id", 1), Const(TILE))),
            Declare(batch, Builtin("workgroup_id", 2))]
    matrix = binary("*", batch, binary("*", rows, cols))
    for j in range(TILE // ROWS):
        r, c = Local(f"row{j + 1}"), Local(f"col{j + 1}")
        local_row = binary("+", ty, Const(ROWS * j))
        body += [Declare(r, binary("+", r0, local_row)), Declare(c, binary("+", c0, tx))]
        source = binary("+", matrix, binary("+", binary("*", r, cols), c))
        slot = binary("+", binary("*", local_row, Const(TILE + 1)), tx)
        value = Load(x, source)
        body.append(IfThen(logical_and(binary("<", r, rows), binary("<", c, cols)), (Store(tile, slot, value),)))
    body.append(Barrier())
    for j in range(TILE // ROWS):
        oc, orow = Local(f"oc{j}"), Local(f"or{j}")
        local_row = binary("+", ty, Const(ROWS * j))
        body += [Declare(oc, binary("+", c0, local_row)), Declare(orow, binary("+", r0, tx))]
        target_index = binary("+", matrix, binary("+", binary("*", oc, rows), orow))
        slot = binary("+", binary("*", tx, Const(TILE + 1)), local_row)
        body.append(IfThen(logical_and(binary("<", oc, cols), binary("<", orow, rows)),
                           (Store(out, target_index, Load(tile, slot)),)))
    grid = (arith.simplify((info.cols + TILE - 1) // TILE), arith.simplify((info.rows + TILE - 1) // TILE),
            info.batch)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(x, out), tuple(body), (TILE * ROWS, 1, 1), grid,
                    scratch=(tile,), attrs={"rule": "transpose"})
