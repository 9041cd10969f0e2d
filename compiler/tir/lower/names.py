"""Fresh local names for lowering passes: a pass that adds a local must not capture another."""

from __future__ import annotations

from ..ir import SCALAR_PREFIX, Assign, Declare, For, Local, PrimFunc, ThreadLoop, walk_expr, walk_stmts


class NameSupply:
    """Names not yet used in one kernel (locals, buffers, scalars), handed out once each."""

    def __init__(self, func: PrimFunc):
        taken = {b.name for b in func.params + func.scratch} | {SCALAR_PREFIX + s for s in func.scalars}
        for stmt, exprs in walk_stmts(func.body):
            if isinstance(stmt, (Declare, Assign, For, ThreadLoop)):
                taken.add(stmt.var.name)
            for root in exprs:
                taken.update(e.name for e in walk_expr(root) if isinstance(e, Local))
        self.taken = taken

    def fresh(self, base: str) -> str:
        name, suffix = base, 1
        while name in self.taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        self.taken.add(name)
        return name
