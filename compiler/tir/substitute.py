"""Replace buffers in a kernel body: the one rewrite several passes need (see transform/unalias.py)."""

from __future__ import annotations

from dataclasses import replace

from .ir import Assign, Binary, Buffer, Call, Cast, Declare, For, IfThen, Load, Select, Store, TExpr, Unary


def substitute_buffers(body: tuple, mapping: dict[Buffer, Buffer]) -> tuple:
    """``body`` with every load and store of a buffer in ``mapping`` redirected to its image."""

    def expr(e: TExpr) -> TExpr:
        if isinstance(e, Load):
            return Load(mapping.get(e.buffer, e.buffer), expr(e.index), e.lanes)
        if isinstance(e, Binary):
            return Binary(e.op, expr(e.a), expr(e.b), e.dtype)
        if isinstance(e, Unary):
            return Unary(e.op, expr(e.x), e.dtype)
        if isinstance(e, Cast):
            return Cast(expr(e.x), e.dtype)
        if isinstance(e, Select):
            return Select(expr(e.cond), expr(e.a), expr(e.b), e.dtype)
        if isinstance(e, Call):
            return Call(e.name, tuple(expr(a) for a in e.args), e.dtype)
        return e

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
