"""BlockBuilder: build functions binding by binding, deducing struct info as you go.

    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            lv0 = bb.emit(op.matmul(x, w))
            gv = bb.emit_output(op.exp(lv0))
        bb.emit_func_output(gv)
    mod = bb.get()

Every emitted expression is normalized first: nested calls become their own
bindings (A-normal form) and every node gets its struct info by forward
deduction. A deduction error names the binding it happened in.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from .. import arith
from .deduce import DeduceContext, deduce
from .errors import DeductionError, WellFormedError
from .expr import (
    LEAF_TYPES,
    Binding,
    BindingBlock,
    Call,
    DataflowBlock,
    DataflowVar,
    Expr,
    Function,
    GlobalVar,
    If,
    MatchCast,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    with_struct_info,
)
from .module import IRModule
from .struct_info import (
    StructInfo,
    defining_vars,
    describe,
    erase_to_ndim,
    is_base_of,
    placed_as_annotated,
    renamed_on_one_device,
)


@dataclass
class _FunctionFrame:
    name: str
    params: list[Var]
    attrs: dict[str, Any]
    pure: bool
    ret_sinfo: StructInfo | None
    analyzer: arith.Analyzer
    blocks: list[BindingBlock] = field(default_factory=list)
    bindings: list[Binding] = field(default_factory=list)
    in_dataflow: bool = False
    names: set[str] = field(default_factory=set)
    counters: dict[str, int] = field(default_factory=dict)
    bound_operands: dict[int, tuple] = field(default_factory=dict)  # id(expr) -> (expr, var)


@dataclass
class _Branch:
    result: Expr | None = None
    seq: SeqExpr | None = None


def analyzer_for(attrs: dict[str, Any]) -> arith.Analyzer:
    """Symbolic variables are sizes (>= 0); ``tir_var_upper_bound`` and ``tir_var_lower_bound``
    narrow them (a sequence length of at least 1 makes ``x[n - 1:n]`` one row long)."""
    upper = dict(attrs.get("tir_var_upper_bound", {}) or {})
    lower = dict(attrs.get("tir_var_lower_bound", {}) or {})
    bounds = {name: (int(lower.get(name, 0)), None if name not in upper else int(upper[name]))
              for name in set(upper) | set(lower)}
    return arith.Analyzer(bounds, nonnegative=True)


class BlockBuilder:
    def __init__(self, mod: IRModule | None = None,
                 signatures: dict[str, StructInfo] | None = None):
        """``signatures``: struct info of functions not built yet (a parser knows them up front)."""
        self._functions: dict[str, Any] = dict(mod.functions) if mod else {}
        self._signatures = dict(signatures or {})
        self._global_infos = dict(mod.global_infos) if mod else {}
        self._frame: _FunctionFrame | None = None

    # -- module level -------------------------------------------------------

    def add_func(self, func: Any, name: str) -> GlobalVar:
        self._functions[name] = func
        return GlobalVar(name, getattr(func, "struct_info", None))

    def set_global_infos(self, key: str, infos: Sequence) -> None:
        self._global_infos[key] = tuple(infos)

    def get(self) -> IRModule:
        if self._frame is not None:
            raise WellFormedError(f"function '{self._frame.name}' is still being built")
        return IRModule(self._functions, self._global_infos)

    def context(self) -> DeduceContext:
        analyzer = self._frame.analyzer if self._frame else arith.Analyzer(nonnegative=True)
        return DeduceContext(analyzer, self._global_sinfo, _show_expr)

    def _global_sinfo(self, name: str) -> StructInfo | None:
        func = self._functions.get(name)
        if func is None:
            return self._signatures.get(name)
        return getattr(func, "struct_info", None)

    # -- functions ------------------------------------------------------------

    @contextmanager
    def function(self, name: str, params: Sequence[Var], attrs: dict[str, Any] | None = None,
                 pure: bool = True, ret_struct_info: StructInfo | None = None,
                 reserved_names: Sequence[str] = ()):
        """``reserved_names``: names the function's new variables must not take (a nested function
        is built by a builder of its own, and must not shadow the enclosing function's names)."""
        if self._frame is not None:
            raise WellFormedError("functions cannot be nested in the builder; add them to the module")
        attrs = dict(attrs or {})
        frame = _FunctionFrame(name, list(params), attrs, pure, ret_struct_info, analyzer_for(attrs))
        frame.names.update(p.name_hint for p in params)
        frame.names.update(reserved_names)
        self._frame = frame
        try:
            yield
            if name not in self._functions:
                raise WellFormedError(f"function '{name}' ended without emit_func_output")
        finally:
            self._frame = None

    def emit_func_output(self, output: Expr | Sequence[Expr]) -> GlobalVar:
        frame = self._require_frame()
        if frame.in_dataflow:
            raise WellFormedError("emit_func_output must come after the dataflow block")
        if isinstance(output, (list, tuple)):
            output = Tuple(tuple(output))
        body = self.normalize(output)
        self._close_block()
        ret = frame.ret_sinfo
        body_sinfo = body.sinfo
        param_vars = {v.name for p in frame.params for v in defining_vars(p.struct_info)}
        # The signature cannot mention variables defined inside the body.
        visible = erase_to_ndim(body_sinfo, keep=lambda v: v.name in param_vars)
        if ret is None:
            ret = visible
        elif not is_base_of(ret, placed_as_annotated(body_sinfo, ret), frame.analyzer):
            raise DeductionError("return mismatch", f"function '{frame.name}' returns "
                                 f"{describe(body_sinfo)}, annotated {describe(ret)}")
        func = Function(tuple(frame.params), SeqExpr(tuple(frame.blocks), body), ret,
                        tuple(frame.attrs.items()), frame.pure)
        return self.add_func(func, frame.name)

    # -- blocks ---------------------------------------------------------------

    @contextmanager
    def dataflow(self):
        frame = self._require_frame()
        if frame.in_dataflow:
            raise WellFormedError("dataflow blocks cannot be nested")
        self._close_block()
        frame.in_dataflow = True
        try:
            yield
        finally:
            frame.in_dataflow = False
        if frame.bindings:
            frame.blocks.append(DataflowBlock(tuple(frame.bindings)))
            frame.bindings = []

    @contextmanager
    def branch(self):
        """Collect the bindings of one arm of an If; set ``.result`` inside, read ``.seq`` after."""
        frame = self._require_frame()
        if frame.in_dataflow:
            raise WellFormedError("dataflow blocks cannot contain control flow")
        saved_blocks, saved_bindings = frame.blocks, frame.bindings
        frame.blocks, frame.bindings = [], []
        arm = _Branch()
        try:
            yield arm
            if arm.result is None:
                raise WellFormedError("a branch needs a result expression")
            body = self.normalize(arm.result)
            self._close_block()
            arm.seq = SeqExpr(tuple(frame.blocks), body)
        finally:
            frame.blocks, frame.bindings = saved_blocks, saved_bindings

    def _close_block(self) -> None:
        frame = self._require_frame()
        if frame.bindings:
            frame.blocks.append(BindingBlock(tuple(frame.bindings)))
            frame.bindings = []

    # -- bindings -------------------------------------------------------------

    def emit(self, expr: Expr, name_hint: str = "", annotation: StructInfo | None = None) -> Var:
        """Bind ``expr`` to a new variable (a dataflow variable inside a dataflow block)."""
        frame = self._require_frame()
        return self._emit(expr, name_hint, annotation, dataflow=frame.in_dataflow)

    def emit_output(self, expr: Expr, name_hint: str = "", annotation: StructInfo | None = None) -> Var:
        """Bind ``expr`` to a variable visible after the current dataflow block."""
        frame = self._require_frame()
        if not frame.in_dataflow:
            raise WellFormedError("emit_output is only valid inside a dataflow block")
        return self._emit(expr, name_hint, annotation, dataflow=False)

    def match_cast(self, value: Expr, sinfo: StructInfo, name_hint: str = "") -> Var:
        """Assert at run time that ``value`` matches ``sinfo``; new symbolic variables become bound."""
        frame = self._require_frame()
        name = self._fresh_name(name_hint, "lv" if frame.in_dataflow else "gv")
        value = self._normalize_operand(value)
        var_type = DataflowVar if frame.in_dataflow else Var
        var = var_type(name, sinfo)
        frame.bindings.append(MatchCast(var, value, sinfo))
        return var

    def emit_if(self, cond: Expr, true_branch: SeqExpr, false_branch: SeqExpr, name_hint: str = "",
                annotation: StructInfo | None = None) -> Var:
        return self.emit(If(self._normalize_operand(cond), true_branch, false_branch), name_hint, annotation)

    def _emit(self, expr: Expr, name_hint: str, annotation: StructInfo | None, dataflow: bool) -> Var:
        default = "lv" if dataflow else "gv"
        try:
            value = self.normalize(expr)  # may emit nested calls first
        except DeductionError as error:
            name = self._fresh_name(name_hint, default, peek=True)
            raise error.at(f"{name} = {_show_expr(expr)}") from None
        name = self._fresh_name(name_hint, default)
        sinfo = value.sinfo
        if annotation is not None:
            sinfo = self._check_annotation(name, value, sinfo, annotation)
        var = (DataflowVar if dataflow else Var)(name, sinfo)
        self._require_frame().bindings.append(VarBinding(var, value))
        return var

    def _check_annotation(self, name: str, value: Expr, deduced: StructInfo,
                          annotation: StructInfo) -> StructInfo:
        analyzer = self._require_frame().analyzer
        deduced = placed_as_annotated(deduced, annotation)
        if isinstance(value, Var):  # an alias may rename a vdevice of the same physical device
            deduced = renamed_on_one_device(deduced, annotation, IRModule({}, self._global_infos).physical_device)
        if is_base_of(annotation, deduced, analyzer):
            return deduced if is_base_of(deduced, annotation, analyzer) else annotation
        binding = f"{name} = {_show_expr(value)}"
        if is_base_of(deduced, annotation, analyzer):
            raise DeductionError("annotation too specific", f"deduced {describe(deduced)}, annotated "
                                 f"{describe(annotation)}; use R.match_cast to assert it", binding)
        raise DeductionError("annotation mismatch", f"deduced {describe(deduced)}, annotated "
                             f"{describe(annotation)}", binding)

    def _fresh_name(self, name_hint: str, default: str, peek: bool = False) -> str:
        """``name_hint`` if given and unused, else a numbered name: lv0, lv1, gv0, x1 ..."""
        frame = self._require_frame()
        hint = name_hint or default
        if name_hint and name_hint not in frame.names:
            name = name_hint
        else:
            count = frame.counters.get(hint, 0)
            while f"{hint}{count}" in frame.names:
                count += 1
            name = f"{hint}{count}"
            if not peek:
                frame.counters[hint] = count + 1
        if not peek:
            frame.names.add(name)
        return name

    def _require_frame(self) -> _FunctionFrame:
        if self._frame is None:
            raise WellFormedError("no function is being built: use `with bb.function(...)`")
        return self._frame

    # -- normalization --------------------------------------------------------

    def normalize(self, expr: Expr) -> Expr:
        """``expr`` with struct info on every node; nested calls are emitted as bindings."""
        ctx = self.context()
        if isinstance(expr, Var):
            return expr
        if isinstance(expr, LEAF_TYPES):
            if isinstance(expr, GlobalVar) and expr.struct_info is None:
                return with_struct_info(expr, deduce(expr, ctx))
            return expr
        if isinstance(expr, Tuple):
            fields = tuple(self._normalize_operand(f) for f in expr.fields)
            return Tuple(fields)
        if isinstance(expr, TupleGetItem):
            node = TupleGetItem(self._normalize_operand(expr.tuple_value), expr.index)
            return with_struct_info(node, deduce(node, ctx))
        if isinstance(expr, Call):
            op = expr.op if isinstance(expr.op, LEAF_TYPES) else self._normalize_operand(expr.op)
            op = self.normalize(op) if isinstance(op, GlobalVar) else op
            args = tuple(self._normalize_operand(a) for a in expr.args)
            node = replace(expr, op=op, args=args, struct_info=None)
            return with_struct_info(node, deduce(node, ctx))
        if isinstance(expr, If):
            node = If(self._normalize_operand(expr.cond), expr.true_branch, expr.false_branch)
            return with_struct_info(node, deduce(node, ctx))
        if isinstance(expr, SeqExpr):
            return with_struct_info(expr, deduce(expr, ctx))
        if isinstance(expr, Function):
            return expr
        raise TypeError(f"cannot normalize {type(expr).__name__}")

    def _normalize_operand(self, expr: Expr) -> Expr:
        """Operands are leaves or tuples; anything else is bound to a variable first.

        The same expression object used as an operand twice is bound once: model code passes
        unbound expressions around (a normed input feeds q, k and v) and must not compute them
        again for every use. A field of a call's tuple (``TupleGetItem``) is bound too: passes read
        an operator's tensor arguments as variables."""
        if isinstance(expr, Call | If | TupleGetItem):
            frame = self._require_frame()
            bound = frame.bound_operands.get(id(expr))
            if bound is not None and bound[0] is expr:
                return bound[1]
            var = self.emit(expr)
            frame.bound_operands[id(expr)] = (expr, var)  # the expression is kept, so its id stays its own
            return var
        return self.normalize(expr)


def _show_expr(expr: Expr) -> str:
    from .printer import print_expr

    return print_expr(expr)
