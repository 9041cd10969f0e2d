"""inline_functions: calls of small graph functions become the callee's bindings.

Run before fusion, so that a helper's operators fuse with its caller's, and so that the VM
sees no calls it would have to make. The rules:

- the callee is a graph function of the module called directly (``cls.f(...)``; a call through
  a variable is not inlined) with at most ``max_size`` bindings, counting those inside the arms
  of its ifs;
- never a function that can reach itself through calls (recursion), nor a fused ``Primitive``
  function, nor the function being rebuilt;
- a call inside a dataflow block inlines only a callee that can live there: pure, with no
  control flow and no impure calls (its blocks are flattened into the caller's block); a call
  outside dataflow blocks inlines any such callee, its dataflow blocks staying dataflow blocks;
- functions are processed callees first, so a helper's own small calls are inlined before its
  size is measured.

Each parameter is replaced by its argument. The callee's symbolic variables map to the caller's
expressions through the arguments' struct info (``subfn(s: (k, 2, 2))`` called with
``(n, 2, 2)`` maps k to n); a parameter whose argument does not prove its annotation (a coarser
argument, or ``(q,)`` for ``(k * 2,)``) is checked with ``R.match_cast`` as the call would
have checked it, which also defines the variables the argument could not give. Symbolic
variables the callee defines itself (its match_casts) are renamed when the caller already uses
the name; the callee's ``tir_var_upper_bound`` does not carry over (the caller's bounds apply).

A function with the attribute ``"inline": False`` is never inlined (its calls stay calls).

Every match_cast an inlined call leaves (a check of an argument or of the result, or one of the
callee's own) is listed in the caller's attribute ``"inlined_checks"`` by its variable, with what
it checks: ``{"x_in": "argument 'x_in' of inner_square"}``. A failed check then names the
function the user called, not only the match_cast of the function it was inlined into (the
reference interpreter and the VM say ``argument 'x_in' of inner_square (inlined into main)``);
a helper's own list carries over when the helper is inlined in turn.

Entry points: every function of a module is one, unless it carries the attribute
``"private": True`` (``R.func_attr({"private": True})``; ``lambda_lift`` marks what it lifts).
A private function that was inlined and that no function refers to any more is removed; an
entry point always stays, since a user may call it by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import arith
from ..ir.builder import BlockBuilder, analyzer_for
from ..ir.check import INLINED_CHECKS
from ..ir.deduce import bind_plain_vars
from ..ir.expr import (
    Call,
    DataflowBlock,
    DataflowVar,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    If,
    MatchCast,
    Op,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
)
from ..ir.module import IRModule
from ..ir.printer import function_symbolic_vars
from ..ir.struct_info import FuncStructInfo, StructInfo, defining_vars, is_base_of, map_sinfo_exprs, sinfo_vars
from .rewrite import recursive_functions, referenced_globals, walk_bindings

DEFAULT_MAX_SIZE = 16


def inline_functions(mod: IRModule, max_size: int = DEFAULT_MAX_SIZE) -> IRModule:
    """Inline calls of graph functions with at most ``max_size`` bindings (rules in the module doc)."""
    graph = mod.graph_functions()
    refs = {name: referenced_globals(func) & set(graph) for name, func in graph.items()}
    recursive = recursive_functions(refs)
    functions = dict(mod.functions)
    inlined: set[str] = set()
    for name in _callees_first(graph, refs):
        inliner = _Inliner(IRModule(functions, mod.global_infos), name, recursive, max_size)
        func = inliner.rebuild(functions[name])
        if inliner.inlined:
            functions[name] = func
            inlined |= inliner.inlined
    # Private helpers nothing refers to any more go; a helper referring to another is removed first.
    while True:
        used = set().union(*(referenced_globals(f) for f in functions.values() if isinstance(f, Function)))
        dead = [n for n in inlined if n in functions and n not in used and functions[n].attr("private")]
        if not dead:
            return IRModule(functions, mod.global_infos)
        for name in dead:
            del functions[name]


@dataclass
class _Site:
    """Where bindings are being emitted: the caller's own, or a callee's inlined at a call."""

    callee: str | None = None  # the function whose bindings these are, when inlined
    checks: dict | None = None  # the callee's "inlined_checks": what its match_casts check
    result: VarBinding | None = None  # the callee binding that becomes the call's variable
    call_var: Var | None = None
    flatten: bool = False  # the call is in a dataflow block: the callee's blocks merge into it


class _Inliner:
    def __init__(self, mod: IRModule, name: str, recursive: set[str], max_size: int):
        self.mod, self.name, self.recursive, self.max_size = mod, name, recursive, max_size
        self.inlined: set[str] = set()

    def rebuild(self, func: Function) -> Function:
        self.bb = BlockBuilder(self.mod)
        self.analyzer = analyzer_for(dict(func.attrs))
        self.names = {p.name_hint for p in func.params} | {b.var.name_hint for b in walk_bindings(func.body)}
        self.symbols = {v.name for v in function_symbolic_vars(func)}
        self.checks = dict(func.attr(INLINED_CHECKS) or {})  # its own match_casts keep their names
        with self.bb.function(self.name, func.params, dict(func.attrs), func.pure, func.ret_struct_info):
            vmap: dict[Var, Expr] = {}
            self._blocks(func.body.blocks, vmap, {}, _Site(), in_dataflow=False)
            self.bb.emit_func_output(self._result(func.body.body, vmap, {}, "gv"))
        rebuilt = self.bb.get()[self.name]
        return rebuilt.with_attr(INLINED_CHECKS, self.checks) if self.checks else rebuilt

    # -- emitting ----------------------------------------------------------------------

    def _blocks(self, blocks, vmap, smap, site: _Site, in_dataflow: bool) -> None:
        for block in blocks:
            if isinstance(block, DataflowBlock) and not in_dataflow:
                with self.bb.dataflow():
                    for binding in block.bindings:
                        self._binding(binding, vmap, smap, site, True)
            else:
                for binding in block.bindings:
                    self._binding(binding, vmap, smap, site, in_dataflow)

    def _binding(self, binding, vmap, smap, site: _Site, in_dataflow: bool) -> None:
        var, value = binding.var, binding.value
        if not site.callee:
            name, output, annotation = var.name_hint, not isinstance(var, DataflowVar), var.struct_info
        elif binding is site.result:
            name, annotation = site.call_var.name_hint, None
            output = not isinstance(site.call_var, DataflowVar) if site.flatten else True
        else:
            name, annotation = self._fresh(var.name_hint), None
            output = not site.flatten and not isinstance(var, DataflowVar)
        output = output and in_dataflow
        if isinstance(binding, MatchCast):
            if site.callee:  # the callee's own symbolic variables, renamed where the caller has the name
                self._define_symbols(binding.struct_info, smap)
            new = self.bb.match_cast(_subst(value, vmap, smap), _subst_sinfo(binding.struct_info, smap), name)
            if site.callee:  # the callee's own match_cast, or one that stands for a call it inlined
                self.checks[new.name_hint] = (site.checks or {}).get(var.name_hint) or \
                    f"match_cast of {var.name_hint} in {site.callee}"
        elif isinstance(value, If):
            arms = []
            for arm in (value.true_branch, value.false_branch):
                with self.bb.branch() as branch:
                    self._blocks(arm.blocks, vmap, smap, _Site(callee=site.callee, checks=site.checks), False)
                    branch.result = self._result(arm.body, vmap, smap, "gv")
                arms.append(branch.seq)
            new = self.bb.emit_if(_subst(value.cond, vmap, smap), arms[0], arms[1], name, annotation)
        elif isinstance(value, Call) and self._inlinable(_subst(value, vmap, smap), in_dataflow):
            # Checked after substitution: a callee's call through a parameter may now name a global.
            new = self._inline(_subst(value, vmap, smap), var if not site.callee else None, name, output,
                               in_dataflow)
        else:
            emit = self.bb.emit_output if output else self.bb.emit
            new = emit(_subst(value, vmap, smap), name, annotation)
        vmap[var] = new

    def _result(self, body: Expr, vmap, smap, name: str) -> Expr:
        """A sequence's result; a small call there is inlined too."""
        if isinstance(body, Call) and self._inlinable(body, False):
            return self._inline(_subst(body, vmap, smap), None, self._fresh(name), False, False)
        return _subst(body, vmap, smap)

    # -- inlining ----------------------------------------------------------------------

    def _inlinable(self, call: Call, in_dataflow: bool) -> bool:
        if not isinstance(call.op, GlobalVar) or call.op.name == self.name or call.op.name in self.recursive:
            return False
        callee = self.mod.functions.get(call.op.name)
        if not isinstance(callee, Function) or callee.attr("Primitive") or len(callee.params) != len(call.args):
            return False
        if callee.attr("inline") is False:  # the author asked for a call (R.func_attr({"inline": False}))
            return False
        if _size(callee.body) > self.max_size:
            return False
        return not in_dataflow or _dataflow_safe(callee, self.mod)

    def _inline(self, call: Call, call_var: Var | None, name: str, output: bool, in_dataflow: bool) -> Expr:
        callee: Function = self.mod[call.op.name]
        self.inlined.add(call.op.name)
        smap: dict[str, arith.PrimExpr] = {}
        for param, arg in zip(callee.params, call.args):
            bind_plain_vars(param.struct_info, arg.struct_info, smap)
        vmap: dict[Var, Expr] = {}
        checked = []
        for param, arg in zip(callee.params, call.args):
            known = all(v.name in smap for v in sinfo_vars(param.struct_info))
            if isinstance(param.struct_info, FuncStructInfo) and isinstance(arg.struct_info, FuncStructInfo):
                # A function argument: the call checks only that it is callable, and its signature's
                # own variables are its own, so (k,) -> (k,) fits (m,) -> (m,).
                vmap[param] = arg
            elif known and is_base_of(_subst_sinfo(param.struct_info, smap), arg.struct_info, self.analyzer):
                vmap[param] = arg
            else:
                checked.append((param, arg))
        # Check what the call would have checked; the parameters that define new variables go first.
        checked.sort(key=lambda pa: all(v.name in smap for v in defining_vars(pa[0].struct_info)))
        for param, arg in checked:
            self._define_symbols(param.struct_info, smap)
            vmap[param] = self.bb.match_cast(arg, _subst_sinfo(param.struct_info, smap), self._fresh(param.name_hint))
            self.checks[vmap[param].name_hint] = f"argument '{param.name_hint}' of {call.op.name}"
        result = _result_binding(callee)
        site = _Site(callee=call.op.name, checks=callee.attr(INLINED_CHECKS), result=result,
                     call_var=call_var or Var(name), flatten=in_dataflow)
        self._blocks(callee.body.blocks, vmap, smap, site, in_dataflow)
        if result is not None:
            new = vmap[result.var]
        else:  # the result is a parameter, a tuple or a constant: bind it under the call's name
            emit = self.bb.emit_output if output else self.bb.emit
            new = emit(_subst(callee.body.body, vmap, smap), name)
        expected = call_var.struct_info if call_var is not None else None
        if expected is not None and not is_base_of(expected, new.struct_info, self.analyzer):
            # Deduction through the body says less than the callee's signature promised: assert it.
            new = self.bb.match_cast(new, expected, self._fresh(name))
            self.checks[new.name_hint] = f"result of {call.op.name}"
            if output:
                new = self.bb.emit_output(new, self._fresh(name))
        return new

    def _fresh(self, hint: str) -> str:
        base = hint.rstrip("0123456789") or hint
        name, count = hint, 0
        while name in self.names:
            name, count = f"{base}{count}", count + 1
        self.names.add(name)
        return name

    def _define_symbols(self, pattern: StructInfo, smap: dict) -> None:
        """The callee variables ``pattern`` defines that are not mapped yet get caller names."""
        for sym in defining_vars(pattern):
            if sym.name not in smap:
                name, count = sym.name, 1
                while name in self.symbols:
                    name, count = f"{sym.name}{count}", count + 1
                self.symbols.add(name)
                smap[sym.name] = arith.Var(name)


# -- substitution ------------------------------------------------------------------------


def _subst(expr: Expr, vmap: dict, smap: dict) -> Expr:
    """``expr`` with variables and symbolic variables replaced; struct info is left to deduction."""
    if isinstance(expr, Var):
        return vmap.get(expr, expr)
    if isinstance(expr, Tuple):
        return Tuple(tuple(_subst(f, vmap, smap) for f in expr.fields))
    if isinstance(expr, TupleGetItem):
        return TupleGetItem(_subst(expr.tuple_value, vmap, smap), expr.index)
    if isinstance(expr, ShapeExpr):
        return ShapeExpr(tuple(_prim(v, smap) for v in expr.values))
    if isinstance(expr, PrimValue):
        return PrimValue(_prim(expr.value, smap))
    if isinstance(expr, Call):
        op = _subst(expr.op, vmap, smap) if isinstance(expr.op, Var) else expr.op
        return Call(op, tuple(_subst(a, vmap, smap) for a in expr.args),
                    tuple((k, _attr(v, smap)) for k, v in expr.attrs),
                    tuple(_subst_sinfo(s, smap) for s in expr.sinfo_args))
    if isinstance(expr, If):
        return If(_subst(expr.cond, vmap, smap), expr.true_branch, expr.false_branch)
    return expr


def _prim(expr, smap: dict):
    return arith.substitute(expr, smap) if smap else expr


def _attr(value, smap: dict):
    if isinstance(value, arith.PrimExpr):
        return _prim(value, smap)
    if isinstance(value, (tuple, list)):
        return type(value)(_attr(v, smap) for v in value)
    return value


def _subst_sinfo(sinfo: StructInfo, smap: dict) -> StructInfo:
    return map_sinfo_exprs(sinfo, lambda e: _prim(e, smap)) if smap else sinfo


# -- facts about functions -----------------------------------------------------------------


def _size(seq: SeqExpr) -> int:
    return sum(1 for _ in walk_bindings(seq))


def _result_binding(func: Function) -> VarBinding | None:
    body = func.body.body
    for block in func.body.blocks:
        for binding in block.bindings:
            if binding.var is body and isinstance(binding, VarBinding):
                return binding
    return None


def _dataflow_safe(func: Function, mod: IRModule) -> bool:
    """Whether ``func``'s bindings may join a dataflow block: pure, no control flow."""
    if not func.pure:
        return False
    for binding in walk_bindings(func.body):
        value = binding.value
        if isinstance(value, (If, Function)):
            return False
        if isinstance(value, Call):
            if isinstance(value.op, ExternFunc) or isinstance(value.op, Op) and not value.op.pure:
                return False
            if isinstance(value.op, GlobalVar) and not getattr(mod.functions.get(value.op.name), "pure", True):
                return False
    return True


def _callees_first(graph: dict, refs: dict[str, set[str]]) -> list[str]:
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for callee in sorted(refs[name]):
            visit(callee)
        order.append(name)

    for name in graph:
        visit(name)
    return order
