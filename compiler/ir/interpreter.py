"""Reference interpreter: run graph functions on numpy arrays.

It is the ground truth that compiled programs are compared with, so it is
strict: arguments are checked against the parameter annotations (binding
symbolic variables as they are first seen), every match_cast is checked, and
every computed value is checked against the struct info deduced for it, which
also tests deduction itself on real data.

It needs nothing of the operator layer above it (tessera.op): an operator call
runs through the numpy reference that its ``Op`` node carries, and a library
call (``call_dps_library``, ``call_pure_packed``, an ``ExternFunc``) through
the ``library=`` argument or the table of ``tessera.ir.library``, which the
operator modules fill when they are imported. A module that holds operator
calls was built through the operator registry, so by then the table is full.
"""

from __future__ import annotations

import contextvars
import sys
import threading
from typing import Any

import numpy as np

from .. import arith
from .check import ShapeValue, bind_value, check_value, match_cast_origin
from .errors import RuntimeCheckError
from .expr import (
    Call,
    Constant,
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
)
from .library import get_library_function
from .module import IRModule
from .printer import print_binding, print_expr, print_sinfo
from .struct_info import (
    StructInfo,
    TensorStructInfo,
    defining_vars,
)

MAX_CALL_DEPTH = 10000  # as the Python VM's (tessera.vm.interpreter): deeper is a runaway recursion
# Each call of the program nests about a dozen Python frames here (call, sequence, binding, If, ...),
# so Python's default limit of 1,000 frames holds fewer than a hundred calls: an ONNX Loop of a few
# hundred iterations (one recursive call each) would die in a RecursionError. A call nested
# DEEP_AFTER calls down therefore continues on a thread of its own, whose stack (DEEP_STACK_BYTES,
# reserved, touched only as used) holds MAX_CALL_DEPTH calls, with Python's recursion limit raised to
# FRAMES_PER_CALL frames a call while it runs (Python's limit is per process, so it is restored when
# the last such thread ends). A program that still exhausts it (a call whose body nests If in If
# past FRAMES_PER_CALL frames) gets the same clear error as one past MAX_CALL_DEPTH.
DEEP_AFTER = 32
DEEP_STACK_BYTES = 256 << 20
FRAMES_PER_CALL = 64


def interpret(mod: IRModule, func_name: str, *args, library: dict | None = None, kernel_runner=None):
    """Run ``mod[func_name]`` on ``args`` (numpy arrays, ints, tuples) and return its result.

    ``kernel_runner`` (e.g. ``tessera.vm.kernel_runner.default_runner()``) runs the
    kernels of ``call_tir``; without one, modules with kernels cannot run here.
    """
    return Interpreter(mod, library, kernel_runner).call(func_name, list(args))


class Interpreter:
    def __init__(self, mod: IRModule, library: dict | None = None, kernel_runner=None):
        self.mod = mod
        self.library = dict(library or {})
        self.kernel_runner = kernel_runner
        self.depth = 0  # calls of the program now running, nested

    def call(self, func_name: str, args: list) -> Any:
        func = self.mod[func_name]
        if not isinstance(func, Function):
            raise RuntimeCheckError(f"'{func_name}' is not a graph function")
        return self._call_function(func_name, func, args)

    def _call_function(self, name: str, func: Function, args: list, captured: _Frame | None = None) -> Any:
        """``captured``: the frame a local function was defined in; it sees that frame's variables,
        and its symbolic variables except those its parameters define (as every signature does)."""
        if self.depth >= MAX_CALL_DEPTH:
            raise CallDepthError(f"calls nested deeper than {MAX_CALL_DEPTH} (runaway recursion in {name}?)")
        if self.depth == DEEP_AFTER:
            return _on_deep_stack(lambda: self._enter(name, func, args, captured))
        return self._enter(name, func, args, captured)

    def _enter(self, name: str, func: Function, args: list, captured: _Frame | None) -> Any:
        self.depth += 1
        try:
            return self._run_function(name, func, args, captured)
        except RecursionError:
            raise CallDepthError(f"calls nested {self.depth} deep in {name} exhaust the interpreter's Python "
                                 f"stack ({FRAMES_PER_CALL * MAX_CALL_DEPTH} frames; runaway recursion?)") from None
        finally:
            self.depth -= 1

    def _run_function(self, name: str, func: Function, args: list, captured: _Frame | None) -> Any:
        if len(args) != len(func.params):
            raise RuntimeCheckError(f"{name} takes {len(func.params)} arguments "
                                    f"({', '.join(p.name_hint for p in func.params)}), got {len(args)}")
        frame = _Frame(name)
        frame.function = func
        if captured is not None:
            own = {v.name for p in func.params for v in defining_vars(p.struct_info)}
            frame.env = dict(captured.env)
            frame.sym = {k: v for k, v in captured.sym.items() if k not in own}
        args = [_as_value(a) for a in args]
        # Plain dims of all parameters bind first, so (n, 4) and (n * 4,) check in any order.
        for param, value in zip(func.params, args):
            bind_value(param.struct_info, value, frame.sym)
        for param, value in zip(func.params, args):
            check_value(value, param.struct_info, frame.sym, f"argument '{param.name_hint}' of {name}")
            frame.env[param] = value
        result = self._seq(func.body, frame)
        check_value(result, func.ret_struct_info, frame.sym, f"the result of {name}")
        return result

    def _seq(self, seq: SeqExpr, frame: _Frame) -> Any:
        for block in seq.blocks:
            for binding in block.bindings:
                self._binding(binding, frame)
        return self._eval(seq.body, frame)

    def _binding(self, binding, frame: _Frame) -> None:
        try:
            if isinstance(binding.value, Function):
                value = _LocalFunction(self, f"{frame.name}.{binding.var.name_hint}", binding.value, frame)
            else:
                value = self._eval(binding.value, frame)
        except CallDepthError:
            raise  # naming each of thousands of calling bindings would bury the message
        except RuntimeCheckError as error:
            # A recursion passes the error up through the same bindings many times: each is named once.
            where, message = f" (in {print_binding(binding)})", str(error)
            raise RuntimeCheckError(message if where in message else message + where) from None
        except (ValueError, IndexError, FloatingPointError, ZeroDivisionError) as error:
            where = print_binding(binding)
            raise RuntimeCheckError(f"{type(error).__name__}: {error} (in {where})") from None
        if isinstance(binding, MatchCast):
            bind_value(binding.struct_info, value, frame.sym)
            check_value(value, binding.struct_info, frame.sym,
                        lambda: match_cast_origin(frame.function, frame.name, binding.var.name_hint)
                        or f"match_cast in {print_binding(binding)}")
        else:
            check_value(value, binding.var.struct_info, frame.sym,
                        lambda: f"the deduced struct info of {print_binding(binding)}")
        frame.env[binding.var] = value

    # -- expressions ------------------------------------------------------------

    def _eval(self, expr: Expr, frame: _Frame) -> Any:
        if isinstance(expr, Var):
            return frame.env[expr]
        if isinstance(expr, Constant):
            return expr.data
        if isinstance(expr, ShapeExpr):
            return ShapeValue(frame.int(v) for v in expr.values)
        if isinstance(expr, PrimValue):
            return frame.int(expr.value)
        if isinstance(expr, StringImm):
            return expr.value
        if isinstance(expr, Tuple):
            return tuple(self._eval(f, frame) for f in expr.fields)
        if isinstance(expr, TupleGetItem):
            return self._eval(expr.tuple_value, frame)[expr.index]
        if isinstance(expr, If):
            cond = self._eval(expr.cond, frame)
            branch = expr.true_branch if bool(np.asarray(cond).item()) else expr.false_branch
            return self._seq(branch, frame)
        if isinstance(expr, SeqExpr):
            return self._seq(expr, frame)
        if isinstance(expr, Call):
            return self._call_expr(expr, frame)
        if isinstance(expr, GlobalVar):
            return _Closure(self, expr.name)
        if isinstance(expr, Function):
            return _LocalFunction(self, f"{frame.name}.<local>", expr, frame)
        if isinstance(expr, ExternFunc):
            return self._library(expr.global_symbol)
        raise RuntimeCheckError(f"cannot evaluate {type(expr).__name__}")

    def _call_expr(self, call: Call, frame: _Frame) -> Any:
        args = [self._eval(a, frame) for a in call.args]
        if isinstance(call.op, Op):
            return self._op(call, args, frame)
        if isinstance(call.op, ExternFunc):
            return self._library(call.op.global_symbol)(*args)
        if isinstance(call.op, GlobalVar):
            return self._call_function(call.op.name, self.mod[call.op.name], args)
        callee = self._eval(call.op, frame)
        if not callable(callee):
            raise RuntimeCheckError(f"{call.op!r} is not callable")
        return callee(*args)

    def _op(self, call: Call, args: list, frame: _Frame) -> Any:
        name = call.op.name
        if name == "call_tir":
            kernel = call.args[0].name
            if self.kernel_runner is None or kernel not in self.mod.functions:
                raise RuntimeCheckError(f"call_tir to kernel '{kernel}' needs a compiled kernel and a "
                                        "kernel runner; the reference interpreter alone runs graph "
                                        "operators and library calls")
            func = self.mod[kernel]
            scalars = dict(zip(func.scalars, args[2])) if len(args) > 2 else {}
            outputs = self.kernel_runner.run(func, list(args[1]), scalars)
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        if name == "call_dps_library":
            outputs = [_allocate(s, frame) for s in call.sinfo_args]
            extra = list(args[2]) if len(args) > 2 else []
            self._callee(args[0])(*args[1], *outputs, *extra)
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        if name == "call_pure_packed":
            return self._callee(args[0])(*args[1:])
        if name in _LOWERED:
            return _LOWERED[name](self, call, args, frame)
        if call.op.reference is None:
            raise RuntimeCheckError(f"operator {name} has no numpy reference")
        attrs = {k: frame.attr(v) for k, v in call.attrs}
        return call.op.reference(*args, **attrs)

    def _callee(self, value):
        return value if callable(value) else self._library(value)

    def _library(self, name: str):
        if name in self.library:
            return self.library[name]
        try:
            return get_library_function(name)
        except KeyError as error:
            raise RuntimeCheckError(str(error.args[0])) from None


class CallDepthError(RuntimeCheckError):
    """Calls nested past MAX_CALL_DEPTH, or past what the interpreter's Python stack holds."""


_deep_lock = threading.Lock()
_deep_runs = [0, 0]  # deep threads running, and the recursion limit before the first of them


def _on_deep_stack(work):
    """``work()`` on a thread with a stack for MAX_CALL_DEPTH calls (see DEEP_AFTER), in a copy of
    this context (numpy's errstate lives there); its result or its exception, as if run here."""
    outcome: list = []
    context = contextvars.copy_context()

    def run():
        try:
            outcome.append((True, context.run(work)))
        except BaseException as error:  # handed to the caller, which raises it
            outcome.append((False, error))

    with _deep_lock:  # the recursion limit and threading's stack size are the process's
        if _deep_runs[0] == 0:
            _deep_runs[1] = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_deep_runs[1], FRAMES_PER_CALL * MAX_CALL_DEPTH))
        _deep_runs[0] += 1
        previous = threading.stack_size(DEEP_STACK_BYTES)
        try:
            thread = threading.Thread(target=run, name="tessera-interpret", daemon=True)
            thread.start()
        except BaseException:
            _end_deep_run()
            raise
        finally:
            threading.stack_size(previous)
    try:
        thread.join()
    finally:
        with _deep_lock:
            _end_deep_run()
    ok, value = outcome[0]
    if ok:
        return value
    raise value


def _end_deep_run() -> None:
    """One deep thread fewer (under _deep_lock); after the last, Python's own recursion limit again."""
    _deep_runs[0] -= 1
    if _deep_runs[0] == 0:
        sys.setrecursionlimit(_deep_runs[1])


def _alloc_tensor(interp, call, args, frame):
    return np.zeros(tuple(args[0]), call.attr("dtype"))


def _placed_tensor(interp, call, args, frame):
    # Each placed tensor gets its own array: sharing storage is the VM's business, not the semantics'.
    return np.zeros(tuple(args[1]), call.attr("dtype"))


def _call_tir_dps(interp, call, args, frame):
    kernel = call.args[0].name
    if interp.kernel_runner is None or kernel not in interp.mod.functions:
        raise RuntimeCheckError(f"call_tir_dps to kernel '{kernel}' needs a compiled kernel and a kernel runner")
    func = interp.mod[kernel]
    operands = list(args[1])
    inputs, outputs = operands[: len(func.inputs)], operands[len(func.inputs):]
    scalars = dict(zip(func.scalars, args[2])) if len(args) > 2 else {}
    for destination, result in zip(outputs, interp.kernel_runner.run(func, inputs, scalars)):
        np.copyto(destination, result)
    return None


def _vm_check(interp, call, args, frame):
    sinfo = call.sinfo_args[0]
    bind_value(sinfo, args[0], frame.sym)
    check_value(args[0], sinfo, frame.sym, f"the check of {print_expr(call.args[0])}")
    return args[0]


# Operators of the lowered VM program (tessera/op/vm_builtin.py), run here for equivalence tests.
_LOWERED = {
    "builtin.alloc_tensor": _alloc_tensor,
    "memory.alloc_storage": lambda interp, call, args, frame: object(),
    "memory.alloc_tensor": _placed_tensor,
    "call_tir_dps": _call_tir_dps,
    "vm.check": _vm_check,
}


class _Frame:
    def __init__(self, name: str):
        self.name = name
        self.function: Function | None = None  # its attributes say what a pass's match_casts check
        self.env: dict[Var, Any] = {}
        self.sym: dict[str, int] = {}

    def int(self, expr) -> int:
        try:
            return arith.evaluate(expr, self.sym)
        except KeyError as error:
            raise RuntimeCheckError(f"{error.args[0]} in {self.name}") from None

    def attr(self, value):
        if isinstance(value, arith.PrimExpr):
            return self.int(value)
        if isinstance(value, tuple):
            return tuple(self.attr(v) for v in value)
        return value


class _Closure:
    def __init__(self, interpreter: Interpreter, name: str):
        self.interpreter, self.name = interpreter, name

    def __call__(self, *args):
        return self.interpreter.call(self.name, list(args))


class _LocalFunction:
    """A nested function's value: the function and the frame it was defined in."""

    def __init__(self, interpreter: Interpreter, name: str, func: Function, frame: _Frame):
        self.interpreter, self.name, self.func, self.frame = interpreter, name, func, frame

    def __call__(self, *args):
        return self.interpreter._call_function(self.name, self.func, list(args), captured=self.frame)


def _as_value(value):
    if isinstance(value, (np.ndarray, ShapeValue, str, _Closure)) or callable(value):
        return value
    if isinstance(value, (bool, int, np.integer)):
        return int(value)
    if isinstance(value, tuple):
        return tuple(_as_value(v) for v in value)
    if isinstance(value, (float, np.floating, list)):
        return np.asarray(value)
    return value


def _allocate(sinfo: StructInfo, frame: _Frame) -> np.ndarray:
    if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None or not sinfo.dtype:
        raise RuntimeCheckError(f"cannot allocate an output of {print_sinfo(sinfo)}: "
                                "out_sinfo needs a shape and a dtype")
    return np.zeros(tuple(frame.int(d) for d in sinfo.shape), sinfo.dtype)


