"""Forward struct-info deduction for every expression form.

Deduction is local: an expression's info follows from its operands' infos
and, for calls to functions, from the callee's *signature* alone. When
nothing precise can be said the result is coarse (ndim only), never an error;
an error means the inputs are provably incompatible.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import arith
from .errors import DeductionError
from .expr import (
    Call,
    Constant,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    If,
    Op,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
)
from .struct_info import (
    FuncStructInfo,
    ObjectStructInfo,
    PrimStructInfo,
    ShapeStructInfo,
    StructInfo,
    TensorStructInfo,
    TupleStructInfo,
    defining_vars,
    describe,
    erase_to_ndim,
    map_sinfo_exprs,
    unify,
)


class DeduceContext:
    """What deduction may consult: variable bounds and the module's function signatures."""

    def __init__(self, analyzer: arith.Analyzer | None = None,
                 global_sinfo: Callable[[str], StructInfo | None] | None = None,
                 show: Callable[[Expr], str] | None = None):
        self.analyzer = analyzer or arith.Analyzer(nonnegative=True)
        self._global_sinfo = global_sinfo or (lambda name: None)
        self._show = show

    def simplify(self, expr) -> arith.PrimExpr:
        return self.analyzer.simplify(expr)

    def canonical(self, sinfo: StructInfo) -> StructInfo:
        return map_sinfo_exprs(sinfo, self.analyzer.simplify)

    def global_sinfo(self, name: str) -> StructInfo | None:
        return self._global_sinfo(name)

    def show(self, expr: Expr) -> str:
        """How an operand is named in messages: the variable name or its printed form."""
        if isinstance(expr, Var):
            return expr.name_hint
        if self._show is not None:
            return self._show(expr)
        return type(expr).__name__


def deduce(expr: Expr, ctx: DeduceContext) -> StructInfo:
    """Struct info of ``expr`` whose operands already carry struct info."""
    if isinstance(expr, (Var, Constant, ShapeExpr, PrimValue, StringImm, ExternFunc, Function)):
        return expr.struct_info
    if isinstance(expr, Tuple):
        return TupleStructInfo(tuple(_operand_sinfo(f) for f in expr.fields))
    if isinstance(expr, TupleGetItem):
        return _deduce_get_item(expr, ctx)
    if isinstance(expr, GlobalVar):
        return ctx.global_sinfo(expr.name) or ObjectStructInfo()
    if isinstance(expr, Call):
        return ctx.canonical(_deduce_call(expr, ctx))
    if isinstance(expr, If):
        return _deduce_if(expr, ctx)
    if isinstance(expr, SeqExpr):
        return _operand_sinfo(expr.body)
    raise TypeError(f"cannot deduce struct info of {type(expr).__name__}")


def _operand_sinfo(expr: Expr) -> StructInfo:
    sinfo = expr.sinfo
    if sinfo is None:
        raise TypeError(f"operand {expr!r} has not been normalized")
    return sinfo


def _deduce_get_item(expr: TupleGetItem, ctx: DeduceContext) -> StructInfo:
    sinfo = _operand_sinfo(expr.tuple_value)
    if isinstance(sinfo, ObjectStructInfo):
        return ObjectStructInfo()
    if not isinstance(sinfo, TupleStructInfo):
        raise DeductionError("type mismatch",
                             f"{ctx.show(expr.tuple_value)} is a {describe(sinfo)}, not a tuple")
    if not -len(sinfo.fields) <= expr.index < len(sinfo.fields):
        raise DeductionError("index out of range", f"{ctx.show(expr.tuple_value)} has "
                             f"{len(sinfo.fields)} fields, index {expr.index}")
    return sinfo.fields[expr.index]


def _deduce_if(expr: If, ctx: DeduceContext) -> StructInfo:
    cond = _operand_sinfo(expr.cond)
    scalar_tensor = isinstance(cond, TensorStructInfo) and cond.ndim in (0, -1)
    if not (scalar_tensor or isinstance(cond, (PrimStructInfo, ObjectStructInfo))):
        raise DeductionError("type mismatch", f"the condition {ctx.show(expr.cond)} is a {describe(cond)}, "
                             "not a scalar")
    return unify(_operand_sinfo(expr.true_branch), _operand_sinfo(expr.false_branch), ctx.analyzer)


def _deduce_call(call: Call, ctx: DeduceContext) -> StructInfo:
    if isinstance(call.op, Op):
        return call.op.deduce(call, ctx)
    if isinstance(call.op, ExternFunc):
        return call.sinfo_args[0] if call.sinfo_args else ObjectStructInfo()
    callee = _operand_sinfo(call.op)
    if isinstance(callee, ObjectStructInfo):
        return ObjectStructInfo()
    if not isinstance(callee, FuncStructInfo):
        raise DeductionError("type mismatch", f"{ctx.show(call.op)} is a {describe(callee)}, not a function")
    return call_with_signature(callee, call.args, ctx, ctx.show(call.op))


def call_with_signature(callee: FuncStructInfo, args, ctx: DeduceContext, name: str) -> StructInfo:
    """Result of calling a function with ``args``, deduced from the signature alone.

    The parameters' plain symbolic dimensions are bound to the arguments'
    dimensions, then the result annotation is rewritten in the caller's terms.
    A dimension of the result whose variables stay unbound makes that part coarse.
    """
    if callee.params is None:
        return callee.ret
    if len(callee.params) != len(args):
        raise DeductionError("arity mismatch", f"{name} takes {len(callee.params)} arguments, "
                             f"got {len(args)}")
    bound: dict[str, arith.PrimExpr] = {}
    arg_infos = [_operand_sinfo(a) for a in args]
    for param, arg_info in zip(callee.params, arg_infos):
        bind_plain_vars(param, arg_info, bound)
    for index, (param, arg, arg_info) in enumerate(zip(callee.params, args, arg_infos)):
        expected = map_sinfo_exprs(param, lambda e: arith.substitute(e, bound))
        reason = provable_mismatch(expected, arg_info, ctx.analyzer)
        if reason:
            raise DeductionError("argument mismatch", f"argument {index} of {name}: {ctx.show(arg)} has "
                                 f"{describe(arg_info)}, the parameter needs {describe(param)} ({reason})")
    ret = map_sinfo_exprs(callee.ret, lambda e: arith.substitute(e, bound))
    param_vars = {v.name for p in callee.params for v in defining_vars(p)}
    # Variables of the callee that the arguments did not bind are meaningless here.
    return erase_to_ndim(ret, keep=lambda v: v.name not in param_vars or v.name in bound)


def bind_plain_vars(param: StructInfo, arg: StructInfo, bound: dict) -> None:
    """Bind (by name, into ``bound``) each plain symbolic dim of ``param`` not yet bound to the
    argument's dim at the same place."""
    pairs = []
    if isinstance(param, TensorStructInfo) and isinstance(arg, TensorStructInfo):
        pairs = zip(param.shape or (), arg.shape or ()) if param.ndim == arg.ndim else ()
    elif isinstance(param, ShapeStructInfo) and isinstance(arg, ShapeStructInfo):
        pairs = zip(param.values or (), arg.values or ()) if param.ndim == arg.ndim else ()
    elif isinstance(param, PrimStructInfo) and isinstance(arg, PrimStructInfo):
        if param.value is not None and arg.value is not None:
            pairs = [(param.value, arg.value)]
    elif isinstance(param, TupleStructInfo) and isinstance(arg, TupleStructInfo):
        for p, a in zip(param.fields, arg.fields):
            bind_plain_vars(p, a, bound)
    for p_dim, a_dim in pairs:
        if isinstance(p_dim, arith.Var) and p_dim.name not in bound:
            bound[p_dim.name] = a_dim


def provable_mismatch(expected: StructInfo, actual: StructInfo, analyzer: arith.Analyzer) -> str | None:
    """Why no value can satisfy both infos, or None if some might (checked at run time)."""
    if isinstance(expected, ObjectStructInfo) or isinstance(actual, ObjectStructInfo):
        return None
    if type(expected) is not type(actual):
        return f"a {describe(actual)} is not a {describe(expected)}"
    if isinstance(expected, TensorStructInfo):
        if expected.dtype and actual.dtype and expected.dtype != actual.dtype:
            return f"dtype {actual.dtype} is not {expected.dtype}"
        if expected.ndim >= 0 and actual.ndim >= 0 and expected.ndim != actual.ndim:
            return f"rank {actual.ndim} is not {expected.ndim}"
        if expected.vdevice and actual.vdevice and expected.vdevice != actual.vdevice:
            return f"it is on {actual.vdevice}, not {expected.vdevice}; move it with R.to_vdevice"
        return _dims_mismatch(expected.shape, actual.shape, analyzer)
    if isinstance(expected, ShapeStructInfo):
        if expected.ndim >= 0 and actual.ndim >= 0 and expected.ndim != actual.ndim:
            return f"rank {actual.ndim} is not {expected.ndim}"
        return _dims_mismatch(expected.values, actual.values, analyzer)
    if isinstance(expected, PrimStructInfo):
        if expected.dtype != actual.dtype:
            return f"dtype {actual.dtype} is not {expected.dtype}"
        if expected.value is not None and actual.value is not None:
            return _dims_mismatch((expected.value,), (actual.value,), analyzer)
        return None
    if isinstance(expected, TupleStructInfo):
        if len(expected.fields) != len(actual.fields):
            return f"{len(actual.fields)} fields is not {len(expected.fields)}"
        for e, a in zip(expected.fields, actual.fields):
            reason = provable_mismatch(e, a, analyzer)
            if reason:
                return reason
    return None


def _dims_mismatch(expected, actual, analyzer: arith.Analyzer) -> str | None:
    if expected is None or actual is None:
        return None
    for axis, (e, a) in enumerate(zip(expected, actual)):
        diff = analyzer.as_int(arith.as_expr(e) - a)
        if diff is not None and diff != 0:
            return f"dimension {axis} is {a}, not {analyzer.simplify(e)}"
    return None
