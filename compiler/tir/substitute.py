"""Replace buffers in a kernel body: the one rewrite several passes need (see transform/unalias.py)."""

from __future__ import annotations

from dataclasses import replace

from .ir import Assign, Buffer, Declare, For, IfThen, Load, Store, TExpr, map_children


def substitute_buffers(body: tuple, mapping: dict[Buffer, Buffer]) -> tuple:
    """``body`` with every load and store of a buffer in ``mapping`` redirected to its image."""

    def expr(e: TExpr) -> TExpr:
        if isinstance(e, Load):
            return Load(mapping.get(e.buffer, e.buffer), expr(e.index), e.lanes)
        return map_children(e, expr)

    def stmt(s):
        if isinstance(s, (Declare, Assign)):
            return replace(s, value=expr(s.value))
        if isinstance(s, Store):
            return Store(mapping.get(s.buffer, s.buffer), expr(s.index), expr(s.value), s.lanes)
        if isinstance(s, IfThen):
            return IfThen(expr(s.cond), tuple(stmt(x) for x in s.then), tuple(stmt(x) for x in s.otherwise))
        if isinstance(s, For):
            return replace(s, start=expr(s.start), stop=expr(s.stop), body=tuple(stmt(x) for x in s.body))
        return s

    return tuple(stmt(s) for s in body)
