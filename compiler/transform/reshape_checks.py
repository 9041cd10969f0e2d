"""``check_reshapes``: a run-time check for each reshape whose element count is not provable.

Deduction lets ``R.reshape(x, s)`` through when it cannot prove that the target shape holds as many
elements as x (``s`` an ``R.Shape`` the caller passes, or dims made of other symbolic variables):
whether they agree is known only when the function runs. The reshape kernel itself checks nothing,
so a caller's shape of 24 elements for x's 30 would give a (4, 6) of garbage, and one of more than
30 would read past x. This pass puts the comparison in the program, as a ``match_cast`` of x's
element count (a shape value, so no kernel) to the result's:

    lv0_count: R.Shape([a * b]) = R.match_cast(R.shape([m * n]), R.Shape([a * b]))
    lv0: R.Tensor((a, b), dtype="float32") = R.reshape(x, s)

Every runtime already checks a match_cast (the VM's ``match`` instruction), so none of them needs
anything new, and the function attribute ``"described_checks"`` says what the check stands for:
``reshape of x to (a, b) in main (R.reshape(x, s)), the element count of x: expected
R.Shape([a * b]), got shape (30,): dimension 0 is 30, not a * b = 24``. A reshape whose counts are
provably equal (every one of an LLM) is left alone.

The check comes as early as its symbolic variables allow within the reshape's own sequence (right
after the match_cast that defines the last of them, or first), so that a call is refused before
its kernels have run and written any state; it never leaves the arm of an ``If`` the reshape is in.
It runs before fusion, which would hide the reshape inside a kernel.
"""

from __future__ import annotations

from .. import arith
from ..ir.builder import analyzer_for
from ..ir.check import DESCRIBED_CHECKS
from ..ir.expr import (
    Call,
    DataflowBlock,
    DataflowVar,
    Function,
    If,
    MatchCast,
    Op,
    SeqExpr,
    ShapeExpr,
    Var,
    VarBinding,
    with_struct_info,
)
from ..ir.module import IRModule
from ..ir.printer import print_expr
from ..ir.struct_info import ShapeStructInfo, defining_vars
from ..op.manipulate import unproven_reshape_counts
from .rewrite import map_graph_functions, walk_bindings


def check_reshapes(mod: IRModule) -> IRModule:
    return map_graph_functions(mod, _check_function)


def _check_function(name: str, func: Function) -> Function:
    if func.attr("Primitive"):
        return func
    checker = _Checker(name, analyzer_for(dict(func.attrs)), func)
    body = checker.seq(func.body)
    if not checker.described:
        return func
    described = dict(func.attr(DESCRIBED_CHECKS) or {}) | checker.described
    return Function(func.params, body, func.ret_struct_info, func.attrs, func.pure).with_attr(
        DESCRIBED_CHECKS, described)


class _Checker:
    def __init__(self, name: str, analyzer: arith.Analyzer, func: Function):
        self.name, self.analyzer = name, analyzer
        self.taken = {p.name_hint for p in func.params} | {b.var.name_hint for b in walk_bindings(func.body)}
        self.described: dict[str, str] = {}

    def seq(self, seq: SeqExpr) -> SeqExpr:
        blocks = [list(block.bindings) for block in seq.blocks]
        # (block, index) -> the checks to put before that binding; (block, len(block)) is its end.
        checks: dict[tuple[int, int], list] = {}
        defined: dict[str, tuple[int, int]] = {}  # symbolic variable -> just after its match_cast here
        for b, bindings in enumerate(blocks):
            for i, binding in enumerate(bindings):
                value = binding.value
                if isinstance(value, If):
                    arms = (self.seq(value.true_branch), self.seq(value.false_branch))
                    bindings[i] = VarBinding(binding.var, with_struct_info(If(value.cond, *arms), value.struct_info))
                elif isinstance(binding, MatchCast):
                    defined.update((v.name, (b, i + 1)) for v in defining_vars(binding.struct_info))
                elif isinstance(value, Call) and isinstance(value.op, Op) and value.op.name == "reshape":
                    counts = unproven_reshape_counts(value, self.analyzer)
                    if counts is not None:
                        reads = {v.name for count in counts for v in arith.free_vars(count)}
                        where = max((defined[v] for v in reads if v in defined), default=(0, 0))
                        dataflow = isinstance(seq.blocks[where[0]], DataflowBlock)
                        checks.setdefault(where, []).append(self._check(binding, counts, dataflow))
        rebuilt = []
        for b, (block, bindings) in enumerate(zip(seq.blocks, blocks)):
            placed = []
            for i, binding in enumerate(bindings):
                placed += checks.get((b, i), []) + [binding]
            placed += checks.get((b, len(bindings)), [])
            rebuilt.append(type(block)(tuple(placed)))
        return SeqExpr(tuple(rebuilt), seq.body)

    def _check(self, binding, counts, dataflow: bool) -> MatchCast:
        size, count = counts
        x, out = binding.value.args[0], binding.var
        pattern = ShapeStructInfo((count,))
        var = (DataflowVar if dataflow else Var)(self._fresh(f"{out.name_hint}_count"), pattern)
        dims = binding.value.struct_info.shape  # as deduced: a -1 already resolved
        shown = "(" + ", ".join(map(str, dims)) + (",)" if len(dims) == 1 else ")")
        # The call as the printer shows it, as the reference interpreter's error quotes its binding.
        self.described[var.name_hint] = (f"reshape of {print_expr(x)} to {shown} in {self.name} "
                                         f"({print_expr(binding.value)}), the element count of {print_expr(x)}")
        return MatchCast(var, ShapeExpr((size,)), pattern)

    def _fresh(self, hint: str) -> str:
        name, n = hint, 1
        while name in self.taken:
            name, n = f"{hint}{n}", n + 1
        self.taken.add(name)
        return name
