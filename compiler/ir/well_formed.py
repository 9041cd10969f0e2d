"""The well-formedness checker: structural rules every pass must preserve.

- every variable is bound once and used only where its binding is in scope;
  dataflow variables do not escape their dataflow block;
- symbolic variables are defined (as a plain dimension of a parameter or of a
  match_cast pattern) before they are used anywhere else;
- a nested function sees what is in scope where it is bound, and defines
  the plain dims of its own parameters;
- dataflow blocks are pure and free of control flow;
- struct info is consistent: an annotation is never more precise than what
  deduction gives (it may place an unplaced value on a device, and an alias
  ``v = x`` may name another virtual device of x's physical device), results
  agree with the return annotation, globals exist and virtual devices are
  named by their canonical names (docs/vdevice.md).

A violation raises WellFormedError quoting the offending binding in printed form.
"""

from __future__ import annotations

from .. import arith
from .builder import analyzer_for
from .deduce import DeduceContext, deduce
from .errors import DeductionError, UnknownVDeviceError, WellFormedError
from .expr import (
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
    attr_prims,
)
from .module import IRModule
from .printer import print_binding, print_expr, print_sinfo
from .struct_info import (
    StructInfo,
    defining_vars,
    describe,
    is_base_of,
    placed_as_annotated,
    renamed_on_one_device,
    sinfo_vars,
    tensor_paths,
)


class _Quoted:
    """A binding's printed form, made only when a message quotes it: a model's bindings hold its
    weights, which print as long as their values (and are quoted by name and shape)."""

    def __init__(self, binding):
        self.binding = binding

    def __str__(self) -> str:
        return print_binding(self.binding, elide_weights=True)


def check_well_formed(mod: IRModule) -> None:
    vdevices = set(mod.vdevice_names)
    for name, func in mod.functions.items():
        if isinstance(func, Function):
            _FunctionChecker(mod, name, func, vdevices).check()


class _FunctionChecker:
    def __init__(self, mod: IRModule, name: str, func: Function, vdevices: set[str]):
        self.mod, self.name, self.func, self.vdevices = mod, name, func, vdevices
        self.analyzer = analyzer_for(dict(func.attrs))
        self.ctx = DeduceContext(self.analyzer, self._global_sinfo, print_expr)
        self.scope: set[Var] = set()
        self.bound_ever: set[Var] = set()
        self.symbols: set[str] = set()
        self.where = f"function '{name}'"

    def fail(self, message: str) -> WellFormedError:
        return WellFormedError(f"in {self.where}: {message}")

    def _global_sinfo(self, name: str):
        func = self.mod.functions.get(name)
        return getattr(func, "struct_info", None)

    # -- function ------------------------------------------------------------------

    def check(self) -> None:
        self._function(self.func)

    def _function(self, func: Function) -> None:
        for param in func.params:
            if isinstance(param, DataflowVar):
                raise self.fail(f"parameter '{param.name_hint}' is a dataflow variable")
            if param in self.bound_ever:
                raise self.fail(f"parameter '{param.name_hint}' appears twice")
            self.scope.add(param)
            self.bound_ever.add(param)
            self.symbols.update(v.name for v in defining_vars(param.struct_info))
        for param in func.params:
            self._check_sinfo(param.struct_info, f"parameter {param.name_hint}: "
                              f"{print_sinfo(param.struct_info, signature=True)}")
        self._check_sinfo(func.ret_struct_info, f"the return annotation {print_sinfo(func.ret_struct_info)}")
        body_sinfo = self._seq(func.body)
        if body_sinfo is not None and not is_base_of(
                func.ret_struct_info, placed_as_annotated(body_sinfo, func.ret_struct_info), self.analyzer):
            raise self.fail(f"the body returns {describe(body_sinfo)} but the function is annotated "
                            f"{describe(func.ret_struct_info)}")

    def _seq(self, seq: SeqExpr) -> StructInfo | None:
        for block in seq.blocks:
            dataflow = isinstance(block, DataflowBlock)
            local: list[Var] = []
            for binding in block.bindings:
                self._binding(binding, dataflow)
                if isinstance(binding.var, DataflowVar):
                    local.append(binding.var)
            for var in local:  # dataflow variables end with their block
                self.scope.discard(var)
        self._uses(seq.body, f"the result {print_expr(seq.body)}")
        return seq.body.sinfo

    def _binding(self, binding, dataflow: bool) -> None:
        text = _Quoted(binding)
        var = binding.var
        if var in self.bound_ever:
            raise self.fail(f"'{var.name_hint}' is bound twice (in {text})")
        if isinstance(var, DataflowVar) and not dataflow:
            raise self.fail(f"dataflow variable '{var.name_hint}' is bound outside a dataflow block "
                            f"(in {text})")
        value = binding.value
        if dataflow:
            self._check_pure(value, text)
        if isinstance(value, Function):
            self._nested_function(var, value)
        elif isinstance(value, If):
            self._uses(value.cond, text)
            saved = set(self.scope)
            self._seq(value.true_branch)
            self.scope = set(saved)
            self._seq(value.false_branch)
            self.scope = saved
        else:
            self._uses(value, text)
        if isinstance(binding, MatchCast):
            new = {v.name for v in defining_vars(binding.struct_info)}
            self.symbols.update(new)
            self._check_sinfo(binding.struct_info, text)
            if not is_base_of(binding.struct_info, var.struct_info, self.analyzer) \
                    or not is_base_of(var.struct_info, binding.struct_info, self.analyzer):
                raise self.fail(f"the variable of a match_cast must carry the pattern's struct info "
                                f"(in {text})")
        else:
            self._check_sinfo(var.struct_info, text)
            self._check_consistent(var, value, text)
        self.scope.add(var)
        self.bound_ever.add(var)

    def _nested_function(self, var: Var, func: Function) -> None:
        """A local function sees what is in scope where it is defined; its parameters define their
        plain symbolic dims, other symbolic variables it uses must already be defined here."""
        saved = (set(self.scope), set(self.symbols), self.where)
        self.where = f"{saved[2]}, nested function '{var.name_hint}'"
        self._function(func)
        self.scope, self.symbols, self.where = saved

    # -- rules -----------------------------------------------------------------------

    def _check_pure(self, value: Expr, text: str) -> None:
        if isinstance(value, If):
            raise self.fail(f"control flow in a dataflow block (in {text})")
        if not isinstance(value, Call):
            return
        op = value.op
        pure = True
        if isinstance(op, Op):
            pure = op.pure
        elif isinstance(op, ExternFunc):
            pure = False
        elif isinstance(op, GlobalVar):
            callee = self.mod.functions.get(op.name)
            pure = getattr(callee, "pure", True)
        if not pure:
            raise self.fail(f"impure call in a dataflow block (in {text}); use R.call_pure_packed "
                            "for a pure runtime function or move it out of the block")

    def _uses(self, expr: Expr, text: str) -> None:
        """Every variable, global and symbolic variable used by ``expr`` must be defined."""
        if isinstance(expr, Var):
            if expr not in self.scope:
                if isinstance(expr, DataflowVar) and expr in self.bound_ever:
                    raise self.fail(f"dataflow variable '{expr.name_hint}' is used outside its "
                                    f"dataflow block (in {text})")
                raise self.fail(f"'{expr.name_hint}' is used before it is bound (in {text})")
        elif isinstance(expr, GlobalVar):
            if expr.name not in self.mod.functions:
                raise self.fail(f"the module has no function '{expr.name}' (in {text})")
        elif isinstance(expr, ShapeExpr):
            for value in expr.values:
                self._prim_uses(value, text)
        elif isinstance(expr, PrimValue):
            self._prim_uses(expr.value, text)
        elif isinstance(expr, Tuple):
            for field in expr.fields:
                self._uses(field, text)
        elif isinstance(expr, TupleGetItem):
            self._uses(expr.tuple_value, text)
        elif isinstance(expr, Call):
            self._uses(expr.op, text)
            for arg in expr.args:
                self._uses(arg, text)
            for key, value in expr.attrs:
                for prim in attr_prims(value):
                    self._prim_uses(prim, text)
                if key == "vdevice":  # an operator attribute of this name holds a vdevice's name
                    self._check_vdevice(value, text)
            for sinfo in expr.sinfo_args:
                self._check_sinfo(sinfo, text)
        elif isinstance(expr, (If, Function, SeqExpr)):
            raise self.fail(f"a nested {type(expr).__name__} must be bound to a variable first (in {text})")

    def _prim_uses(self, expr: arith.PrimExpr, text: str) -> None:
        for var in arith.free_vars(expr):
            if var.name not in self.symbols:
                raise self.fail(f"symbolic variable '{var.name}' is used before it is defined "
                                f"(in {text}); define it as a plain dimension of a parameter or "
                                "a match_cast pattern")

    def _check_sinfo(self, sinfo: StructInfo, text: str) -> None:
        for var in sinfo_vars(sinfo):
            if var.name not in self.symbols:
                raise self.fail(f"symbolic variable '{var.name}' is used before it is defined "
                                f"(in {text}); define it as a plain dimension of a parameter or "
                                "a match_cast pattern")
        for _, tensor in tensor_paths(sinfo):
            if tensor.vdevice:
                self._check_vdevice(tensor.vdevice, text)

    def _check_vdevice(self, name, text: str) -> None:
        """Struct info holds canonical names only: two spellings of one device would compare unequal."""
        if name in self.vdevices:
            return
        canonical = None
        if isinstance(name, str):
            try:
                canonical = self.mod.resolve_vdevice(name)
            except UnknownVDeviceError:
                pass
        if canonical is None:
            known = ", ".join(self.mod.vdevice_names) or "none"
            raise self.fail(f"virtual device {name!r} is not declared in the module (declared: {known}) (in {text})")
        raise self.fail(f"virtual device {name!r} is not a canonical name; write {canonical!r} "
                        f"(tessera.ir.resolve_vdevices canonicalizes a module) (in {text})")

    def _check_consistent(self, var: Var, value: Expr, text: str) -> None:
        if isinstance(value, If):
            return
        try:
            deduced = deduce(value, self.ctx)
        except DeductionError as error:
            raise self.fail(f"{error} (in {text})") from None
        placed = placed_as_annotated(deduced, var.struct_info)
        if isinstance(value, Var):
            placed = renamed_on_one_device(placed, var.struct_info, self.mod.physical_device)
        if not is_base_of(var.struct_info, placed, self.analyzer):
            raise self.fail(f"'{var.name_hint}' is annotated {describe(var.struct_info)} but its value "
                            f"has {describe(deduced)} (in {text})")
