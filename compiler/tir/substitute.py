"""Rewrites of a kernel body that several passes need: redirect buffers (see transform/unalias.py),
replace locals by expressions (loop unrolling, renaming)."""

from __future__ import annotations

from .ir import (
    INDEX,
    Assign,
    Binary,
    Buffer,
    Declare,
    Evaluate,
    For,
    IfThen,
    Load,
    Local,
    Span,
    Store,
    TExpr,
    ThreadLoop,
    binary,
    map_children,
)


def rewrite_body(body: tuple, expr, var=None, buffer=None) -> tuple:
    """``body`` with ``expr`` applied to every expression a statement holds, ``var`` to every local a
    statement names (declared, assigned, loop variable) and ``buffer`` to every buffer stored to.
    ``expr`` sees whole expressions and recurses itself (``map_children``)."""
    var = var or (lambda v: v)
    buffer = buffer or (lambda b: b)

    def stmt(s):
        if isinstance(s, Declare):
            return Declare(var(s.var), expr(s.value))
        if isinstance(s, Assign):
            return Assign(var(s.var), expr(s.value))
        if isinstance(s, Store):
            return Store(buffer(s.buffer), expr(s.index), expr(s.value), s.lanes)
        if isinstance(s, Evaluate):
            return Evaluate(expr(s.value))
        if isinstance(s, IfThen):
            return IfThen(expr(s.cond), tuple(stmt(x) for x in s.then), tuple(stmt(x) for x in s.otherwise))
        if isinstance(s, For):
            return For(var(s.var), expr(s.start), expr(s.stop), tuple(stmt(x) for x in s.body), s.step, s.unroll)
        if isinstance(s, ThreadLoop):
            return ThreadLoop(var(s.var), s.threads, tuple(stmt(x) for x in s.body))
        return s

    return tuple(stmt(s) for s in body)


def substitute_buffers(body: tuple, mapping: dict[Buffer, Buffer]) -> tuple:
    """``body`` with every load and store of a buffer in ``mapping`` redirected to its image."""

    def expr(e: TExpr) -> TExpr:
        if isinstance(e, Load):
            return Load(mapping.get(e.buffer, e.buffer), expr(e.index), e.lanes)
        if isinstance(e, Span):
            return Span(mapping.get(e.buffer, e.buffer), expr(e.start), expr(e.extent))
        return map_children(e, expr)

    return rewrite_body(body, expr, buffer=lambda b: mapping.get(b, b))


def substitute_locals(body: tuple, mapping: dict[str, TExpr]) -> tuple:
    """``body`` with every local named in ``mapping`` replaced by its image: a constant (an unrolled
    loop's variable) or another local (a rename, which renames declarations and assignments too).
    Index arithmetic that becomes constant is folded, as ``binary`` folds it when kernels are built."""

    def expr(e: TExpr) -> TExpr:
        if isinstance(e, Local):
            return mapping.get(e.name, e)
        e = map_children(e, expr)
        if isinstance(e, Binary) and e.dtype == INDEX and e.a.dtype == INDEX and e.b.dtype == INDEX:
            return binary(e.op, e.a, e.b)
        return e

    def var(v: Local) -> Local:
        image = mapping.get(v.name, v)
        if not isinstance(image, Local):
            raise ValueError(f"cannot substitute {image!r} for {v.name}, which the body declares or assigns")
        return image

    return rewrite_body(body, expr, var)
