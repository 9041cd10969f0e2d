"""lambda_lift: every nested function becomes a private function of the module.

A nested ``def`` (a ``Function`` bound to a variable inside another function) may use
variables and symbolic variables of the function around it. Lifting it makes a module-level
function of it, named ``<owner>_<local>`` (made unique), marked private
(``R.func_attr({"private": True})``: no caller outside the module needs it, so
``inline_functions`` may drop it once nothing calls it). What it captured becomes trailing
parameters, in order of first use: each captured variable, then one ``R.Prim(value=n)``
parameter per symbolic variable ``n`` that neither its parameters' plain dims nor its own
match_casts define. Calls of the local pass them: ``scale(flat)`` becomes
``cls.main_scale(flat, w, R.prim_value(n))``. A local that captures nothing may also be used as
a value (passed to a function, returned); it becomes the global itself. A local that captures
values and is used other than by calling it is an error: without closures in the VM there is
nothing to pass.

Nested functions are lifted inside out, so a function nested two deep becomes a global first,
and the calls of it that pass its captures make them captures of the function around it.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir.errors import TesseraError
from ..ir.expr import (
    Call,
    Expr,
    Function,
    GlobalVar,
    If,
    MatchCast,
    PrimValue,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    with_struct_info,
)
from ..ir.module import IRModule
from ..ir.printer import function_symbolic_vars, print_binding, print_expr
from ..ir.struct_info import PrimStructInfo, defining_vars
from .rewrite import rewrite_function, rewrite_seq, substitute_vars, used_vars, walk_bindings


class LambdaLiftError(TesseraError):
    """A nested function that cannot become a module-level function."""


def lambda_lift(mod: IRModule) -> IRModule:
    """Lift every nested function to a private global function of the module (see the module doc)."""
    taken = set(mod.functions)
    functions: dict = {}
    for name, func in mod.functions.items():
        if not isinstance(func, Function) or not any(isinstance(b.value, Function) for b in walk_bindings(func.body)):
            functions[name] = func  # nothing to lift: the function stays the same object
            continue
        lifter = _Lifter(taken)
        functions[name] = lifter.function(func, name)
        functions.update(lifter.lifted)  # each lifted function follows its owner
    return IRModule(functions, mod.global_infos)


class _Lifter:
    def __init__(self, taken: set[str]):
        self.taken = taken
        self.lifted: dict[str, Function] = {}
        # local function variable -> (its global, the arguments its captures add to every call)
        self.locals: dict[Var, tuple[GlobalVar, tuple[Expr, ...]]] = {}

    def function(self, func: Function, prefix: str) -> Function:
        return rewrite_function(func, lambda binding, dataflow: self._binding(binding, prefix), self._uses)

    def _binding(self, binding, prefix: str) -> list:
        value = binding.value
        if isinstance(binding, VarBinding) and isinstance(value, Function):
            name = f"{prefix}_{binding.var.name_hint}"
            self._lift(binding.var, self.function(value, name), name)
            return []
        try:
            if isinstance(value, If):  # rewrite_seq has already rewritten both arms
                value = with_struct_info(replace(value, cond=self._uses(value.cond)), value.struct_info)
            else:
                value = self._uses(value)
        except LambdaLiftError as error:
            raise LambdaLiftError(f"{error} (in {print_binding(binding)})") from None
        return [replace(binding, value=value)]

    def _lift(self, var: Var, inner: Function, name: str) -> None:
        captured = _free_vars(inner)
        names = _var_names(inner)
        fresh = [Var(_fresh(v.name_hint, names), v.struct_info) for v in captured]  # not dataflow vars
        body = _substitute_seq(inner.body, dict(zip(captured, fresh)))
        params = inner.params + tuple(fresh)
        candidate = Function(params, body, inner.ret_struct_info, inner.attrs, inner.pure)
        defined = _defined_symbols(candidate)
        symbols = [s for s in function_symbolic_vars(candidate) if s.name not in defined]
        params += tuple(Var(_fresh(s.name, names), PrimStructInfo("int64", s)) for s in symbols)
        attrs = {**dict(inner.attrs), "private": True}
        lifted = Function(params, body, inner.ret_struct_info, tuple(attrs.items()), inner.pure)
        global_name = _fresh(name, self.taken, separator="_")
        self.lifted[global_name] = lifted
        extra = tuple(captured) + tuple(PrimValue(s) for s in symbols)
        self.locals[var] = (GlobalVar(global_name, lifted.struct_info), extra)

    def _uses(self, expr: Expr) -> Expr:
        """``expr`` with each local function replaced by its global; calls pass the captures."""
        if isinstance(expr, Var) and expr in self.locals:
            global_var, extra = self.locals[expr]
            if extra:
                captures = ", ".join(print_expr(e) for e in extra)
                raise LambdaLiftError(f"nested function '{expr.name_hint}' captures {captures} and is used as a "
                                      "value; only calls of a capturing nested function can be lifted")
            return global_var
        if isinstance(expr, Call):
            args = tuple(self._uses(a) for a in expr.args)
            if isinstance(expr.op, Var) and expr.op in self.locals:
                global_var, extra = self.locals[expr.op]
                return with_struct_info(Call(global_var, args + extra, expr.attrs, expr.sinfo_args), expr.struct_info)
            return with_struct_info(replace(expr, op=self._uses(expr.op), args=args), expr.struct_info)
        if isinstance(expr, Tuple):
            return Tuple(tuple(self._uses(f) for f in expr.fields))
        if isinstance(expr, TupleGetItem):
            return with_struct_info(TupleGetItem(self._uses(expr.tuple_value), expr.index), expr.struct_info)
        return expr


def _substitute_seq(seq: SeqExpr, mapping: dict[Var, Expr]) -> SeqExpr:
    def substitute(binding, dataflow):
        value = binding.value
        if isinstance(value, If):
            value = with_struct_info(replace(value, cond=substitute_vars(value.cond, mapping)), value.struct_info)
        else:
            value = substitute_vars(value, mapping)
        return [replace(binding, value=value)]

    return rewrite_seq(seq, substitute, lambda body: substitute_vars(body, mapping))


def _free_vars(func: Function) -> list[Var]:
    """Variables ``func`` uses but does not bind, in order of first use."""
    used: dict[Var, None] = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            used.update(used_vars(binding.value))  # an if's arms included
    used.update(used_vars(func.body.body))
    bound = set(func.params) | {b.var for b in walk_bindings(func.body)}
    return [v for v in used if v not in bound]


def _defined_symbols(func: Function) -> set[str]:
    defined = {v.name for p in func.params for v in defining_vars(p.struct_info)}
    for binding in walk_bindings(func.body):
        if isinstance(binding, MatchCast):
            defined.update(v.name for v in defining_vars(binding.struct_info))
    return defined


def _var_names(func: Function) -> set[str]:
    return {p.name_hint for p in func.params} | {b.var.name_hint for b in walk_bindings(func.body)}


def _fresh(name: str, taken: set[str], separator: str = "") -> str:
    """``name``, or ``name`` plus the first number that makes it unused; the result is taken."""
    fresh, count = name, 1
    while fresh in taken:
        fresh, count = f"{name}{separator}{count}", count + 1
    taken.add(fresh)
    return fresh
