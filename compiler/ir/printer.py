"""Print modules as TVMScript-style Python scripts; ``tessera.script`` parses them back.

The printed form is also the debugger: error messages quote bindings with
``print_binding``. The format is documented in docs/script.md.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from .. import arith
from .expr import (
    Binding,
    Call,
    Constant,
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
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    attr_prims,
)
from .module import IRModule
from .struct_info import (
    FuncStructInfo,
    ObjectStructInfo,
    PrimStructInfo,
    ShapeStructInfo,
    StructInfo,
    TensorStructInfo,
    TupleStructInfo,
    sinfo_vars,
)

INDENT = "    "
HEADER = "# from tessera.script import ir as I, relax as R, tir as T"
SINFO_KEYWORD = {"call_tir": "out_sinfo", "call_dps_library": "out_sinfo"}
NAMED_CALLEE = ("call_dps_library", "call_pure_packed")


# -- primitive pieces ---------------------------------------------------------


def print_prim(expr, quoted: bool = False) -> str:
    text = arith.to_source(expr, "T.")
    if quoted and not isinstance(arith.as_expr(expr), arith.IntImm):
        return json.dumps(text)
    return text


def print_literal(value: Any) -> str:
    """Attribute values and function attributes: Python literals with double-quoted strings."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, arith.PrimExpr):
        return print_prim(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(print_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{print_literal(k)}: {print_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot print attribute value {value!r}")


def _float(value: float) -> str:
    if math.isnan(value):
        return 'float("nan")'
    if math.isinf(value):
        return 'float("inf")' if value > 0 else 'float("-inf")'
    return repr(float(value))


def print_sinfo(sinfo: StructInfo, signature: bool = False) -> str:
    """``signature``: symbolic dims as strings, as in a function's parameter list."""
    if isinstance(sinfo, ObjectStructInfo):
        return "R.Object"
    if isinstance(sinfo, PrimStructInfo):
        if sinfo.value is not None:
            return f"R.Prim(value={print_prim(sinfo.value, signature)})"
        return f"R.Prim({json.dumps(sinfo.dtype)})"
    if isinstance(sinfo, ShapeStructInfo):
        if sinfo.values is not None:
            return "R.Shape([" + ", ".join(print_prim(v, signature) for v in sinfo.values) + "])"
        return f"R.Shape(ndim={sinfo.ndim})"
    if isinstance(sinfo, TensorStructInfo):
        parts = []
        if sinfo.shape is not None:
            dims = [print_prim(d, signature) for d in sinfo.shape]
            parts.append("(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")")
        if sinfo.dtype:
            parts.append(f"dtype={json.dumps(sinfo.dtype)}")
        if sinfo.shape is None:
            parts.append(f"ndim={sinfo.ndim}")
        if sinfo.vdevice:
            parts.append(f"vdevice={json.dumps(sinfo.vdevice)}")
        return "R.Tensor(" + ", ".join(parts) + ")"
    if isinstance(sinfo, TupleStructInfo):
        return "R.Tuple(" + ", ".join(print_sinfo(f, signature) for f in sinfo.fields) + ")"
    if isinstance(sinfo, FuncStructInfo):
        ret = print_sinfo(sinfo.ret, signature)
        purity = "" if sinfo.pure else ", pure=False"
        if sinfo.params is None:
            return f"R.Callable(ret={ret}{purity})"
        params = ", ".join(print_sinfo(p, signature) for p in sinfo.params)
        comma = "," if len(sinfo.params) == 1 else ""
        return f"R.Callable(({params}{comma}), {ret}{purity})"
    raise TypeError(f"cannot print struct info {sinfo!r}")


# -- expressions ----------------------------------------------------------------


def print_expr(expr: Expr, elide_weights: bool = False) -> str:
    """``elide_weights``: named constants by dtype and shape, without their values (docs/script.md)."""
    if isinstance(expr, Var):
        return expr.name_hint
    if isinstance(expr, GlobalVar):
        return f"cls.{expr.name}"
    if isinstance(expr, ExternFunc):
        return f"R.ExternFunc({json.dumps(expr.global_symbol)})"
    if isinstance(expr, Op):
        return f"R.{expr.name}"
    if isinstance(expr, Constant):
        return _print_constant(expr.data, expr.name, elide_weights)
    if isinstance(expr, ShapeExpr):
        return "R.shape([" + ", ".join(print_prim(v) for v in expr.values) + "])"
    if isinstance(expr, PrimValue):
        return f"R.prim_value({print_prim(expr.value)})"
    if isinstance(expr, StringImm):
        return f"R.str({json.dumps(expr.value)})"
    if isinstance(expr, Tuple):
        if not expr.fields:
            return "R.tuple()"
        inner = ", ".join(print_expr(f, elide_weights) for f in expr.fields)
        return f"({inner},)" if len(expr.fields) == 1 else f"({inner})"
    if isinstance(expr, TupleGetItem):
        return f"{print_expr(expr.tuple_value, elide_weights)}[{expr.index}]"
    if isinstance(expr, Call):
        return _print_call(expr, elide_weights)
    if isinstance(expr, If):
        return f"R.If({print_expr(expr.cond)}, ...)"
    if isinstance(expr, Function):
        return "R.function(...)"
    if isinstance(expr, SeqExpr):
        return print_expr(expr.body, elide_weights)
    raise TypeError(f"cannot print {type(expr).__name__}")


def _print_call(call: Call, elide_weights: bool) -> str:
    args = [print_expr(a, elide_weights) for a in call.args]
    if isinstance(call.op, Op) and call.op.name in NAMED_CALLEE and call.args:
        callee = call.args[0]  # library and runtime functions are named by a plain string
        if isinstance(callee, (StringImm, ExternFunc)):
            args[0] = json.dumps(callee.value if isinstance(callee, StringImm) else callee.global_symbol)
    if isinstance(call.op, Op):
        defaults = call.op.attr_defaults
        positional = call.op.positional_attrs
        args += [print_literal(call.attr(k)) for k in positional]
        args += [f"{k}={print_literal(v)}" for k, v in call.attrs
                 if k not in positional and v != defaults.get(k, object())]
        if call.sinfo_args:
            keyword = SINFO_KEYWORD.get(call.op.name, "sinfo_args")
            args.append(f"{keyword}={_print_sinfo_args(call.sinfo_args)}")
        return f"R.{call.op.name}({', '.join(args)})"
    if isinstance(call.op, ExternFunc):
        args.insert(0, json.dumps(call.op.global_symbol))
        if call.sinfo_args:
            args.append(f"sinfo_args={_print_sinfo_args(call.sinfo_args)}")
        return f"R.call_packed({', '.join(args)})"
    return f"{print_expr(call.op, elide_weights)}({', '.join(args)})"


def _print_sinfo_args(sinfos) -> str:
    if len(sinfos) == 1:
        return print_sinfo(sinfos[0])
    return "[" + ", ".join(print_sinfo(s) for s in sinfos) + "]"


def elided_weight(dtype: str, shape) -> np.ndarray:
    """The data of a weight read from text that left its values out (``R.const(..., dtype, shape=,
    name=)``): zeros that take no memory, and that print left out again, never as zeros."""
    return np.broadcast_to(np.zeros((), dtype), tuple(shape))


def is_elided(data: np.ndarray) -> bool:
    """Data made by ``elided_weight``: one zero seen at every position (every stride 0)."""
    return data.ndim > 0 and data.base is not None and data.base.ndim == 0 and not any(data.strides)


def _print_constant(data: np.ndarray, name: str = "", elide_weights: bool = False) -> str:
    if name and data.ndim and (elide_weights or is_elided(data)):
        # A weight by name, dtype and shape: the text of a model stays the size of its program.
        return f"R.const(..., {json.dumps(str(data.dtype))}, shape={print_literal(list(data.shape))}, " \
               f"name={json.dumps(name)})"

    def values(a):
        if a.ndim == 0:
            item = a.item()
            return _float(item) if isinstance(item, float) else repr(item)
        return "[" + ", ".join(values(x) for x in a) + "]"

    dtype = json.dumps(str(data.dtype))
    # A weight keeps its name: the executable's tensor cache refers to it by that name.
    named = f", name={json.dumps(name)}" if name else ""
    if data.size == 0:
        return f"R.const([], {dtype}, shape={print_literal(list(data.shape))}{named})"
    return f"R.const({values(data)}, {dtype}{named})"


# -- bindings, blocks, functions, modules ------------------------------------------


def print_binding(binding: Binding, elide_weights: bool = False) -> str:
    """One binding on one line, e.g. ``lv0: R.Tensor((n, 4), dtype="float32") = R.exp(x)``."""
    var = binding.var
    annotation = print_sinfo(var.struct_info)
    if isinstance(binding, MatchCast):
        return f"{var.name_hint}: {annotation} = R.match_cast({print_expr(binding.value, elide_weights)}, " \
               f"{print_sinfo(binding.struct_info)})"
    if isinstance(binding.value, If):
        return f"{var.name_hint}: {annotation} = R.If({print_expr(binding.value.cond)}, ...)"
    return f"{var.name_hint}: {annotation} = {print_expr(binding.value, elide_weights)}"


class _FunctionPrinter:
    def __init__(self, elide_weights: bool = False):
        self.lines: list[str] = []
        self.elide_weights = elide_weights

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def function(self, name: str, func: Function, depth: int) -> None:
        self.emit(depth, "@R.function" if func.pure else "@R.function(pure=False)")
        params = ", ".join(f"{p.name_hint}: {print_sinfo(p.struct_info, signature=True)}"
                           for p in func.params)
        ret = print_sinfo(func.ret_struct_info, signature=True)
        self.emit(depth, f"def {name}({params}) -> {ret}:")
        for var in function_symbolic_vars(func):
            self.emit(depth + 1, f"{var.name} = T.int64()")
        if func.attrs:
            self.emit(depth + 1, f"R.func_attr({print_literal(dict(func.attrs))})")
        self.seq_body(func.body.blocks, depth + 1)
        self.emit(depth + 1, f"return {print_expr(func.body.body, self.elide_weights)}")

    def seq_body(self, blocks, depth: int) -> None:
        for block in blocks:
            if isinstance(block, DataflowBlock):
                self.emit(depth, "with R.dataflow():")
                for binding in block.bindings:
                    self.binding(binding, depth + 1)
                outputs = [b.var.name_hint for b in block.bindings if not isinstance(b.var, DataflowVar)]
                self.emit(depth + 1, f"R.output({', '.join(outputs)})")
            else:
                for binding in block.bindings:
                    self.binding(binding, depth)

    def binding(self, binding: Binding, depth: int) -> None:
        if isinstance(binding, VarBinding) and isinstance(binding.value, Function):
            # A local function prints as a nested def; its name is the variable it is bound to.
            self.function(binding.var.name_hint, binding.value, depth)
            return
        if isinstance(binding, VarBinding) and isinstance(binding.value, If):
            node, var = binding.value, binding.var
            annotation = print_sinfo(var.struct_info)
            self.emit(depth, f"if {print_expr(node.cond)}:")
            for branch, keyword in ((node.true_branch, None), (node.false_branch, "else:")):
                if keyword:
                    self.emit(depth, keyword)
                self.seq_body(branch.blocks, depth + 1)
                result = print_expr(branch.body, self.elide_weights)
                self.emit(depth + 1, f"{var.name_hint}: {annotation} = {result}")
            return
        self.emit(depth, print_binding(binding, self.elide_weights))


def function_symbolic_vars(func: Function) -> list[arith.Var]:
    """Every symbolic variable the function mentions, in order of first appearance."""
    found: dict[arith.Var, None] = {}

    def add_sinfo(sinfo):
        for v in sinfo_vars(sinfo):
            found.setdefault(v)

    def add_expr(expr):
        if isinstance(expr, ShapeExpr):
            for value in expr.values:
                for v in arith.free_vars(value):
                    found.setdefault(v)
        elif isinstance(expr, PrimValue):
            for v in arith.free_vars(expr.value):
                found.setdefault(v)
        elif isinstance(expr, Tuple):
            for f in expr.fields:
                add_expr(f)
        elif isinstance(expr, Call):
            for a in expr.args:
                add_expr(a)
            for _, value in expr.attrs:
                for prim in attr_prims(value):
                    for v in arith.free_vars(prim):
                        found.setdefault(v)
            for s in expr.sinfo_args:
                add_sinfo(s)
        elif isinstance(expr, If):
            add_seq(expr.true_branch)
            add_seq(expr.false_branch)

    def add_seq(seq: SeqExpr):
        for block in seq.blocks:
            for binding in block.bindings:
                add_sinfo(binding.var.struct_info)
                if isinstance(binding, MatchCast):
                    add_sinfo(binding.struct_info)
                add_expr(binding.value)
        add_expr(seq.body)

    for p in func.params:
        add_sinfo(p.struct_info)
    add_sinfo(func.ret_struct_info)
    add_seq(func.body)
    return list(found)


def print_function(name: str, func: Function) -> str:
    printer = _FunctionPrinter()
    printer.function(name, func, 0)
    return "\n".join(printer.lines) + "\n"


def print_module(mod: IRModule, elide_weights: bool = False) -> str:
    """``elide_weights``: weights (named constants) by name, dtype and shape: ``R.const(..., "float32",
    shape=[64], name="model.norm.weight")``, which reads back as a weight of unknown values."""
    printer = _FunctionPrinter(elide_weights)
    printer.emit(0, HEADER)
    printer.emit(0, "")
    printer.emit(0, "")
    printer.emit(0, "@I.ir_module")
    printer.emit(0, "class Module:")
    if mod.vdevices:
        devices = ", ".join(f"I.vdevice({json.dumps(d.kind)}, {d.index}, {json.dumps(d.memory_scope)})"
                            for d in mod.vdevices)
        printer.emit(1, f'I.module_global_infos({{"vdevice": [{devices}]}})')
        printer.emit(0, "")
    names = list(mod.functions)
    for index, name in enumerate(names):
        func = mod.functions[name]
        if index:
            printer.emit(0, "")
        if isinstance(func, Function):
            printer.function(name, func, 1)
        else:
            printer.lines.extend(_print_kernel(name, func).splitlines())
    if not names:
        printer.emit(1, "pass")
    return "\n".join(printer.lines) + "\n"


def _print_kernel(name: str, func: Any) -> str:
    # Kernels belong to tir, a layer above the graph IR: imported only when a module holds one.
    from ..tir.ir import PrimFunc
    from ..tir.script import print_prim_func

    if not isinstance(func, PrimFunc):
        raise TypeError(f"cannot print module member '{name}' of type {type(func).__name__}")
    return print_prim_func(func, name, depth=1)
