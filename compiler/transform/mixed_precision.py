"""to_mixed_precision: keep a model's activations and state in float16, accumulate in float32.

GPUs with 16-bit floats (WebGPU's shader-f16) read and write half the bytes per activation and per
KV-cache entry, which is what decode and long contexts are bound by. Rounding every value to
float16 is not what one wants, though: sums of many terms, softmax and positions past 2048 (the
largest integer float16 holds exactly is 2048) lose too much. As TVM's ToMixedPrecision does,
this pass decides per operator from its registered ``precision`` (tessera.op.registry):

- "always" (matmul, quantized_matmul, attention, conv2d, the KV-cache write): inputs become
  float16 and so does the result; the kernels accumulate in float32 (their ComputeDefs say so).
  An op with one float operand and an ``out_dtype`` (quantized_matmul) reads that operand as it
  comes and writes float16: a float32 norm's output needs no cast kernel and loses nothing;
- "follow" (elementwise ops, norms, reshapes, embeddings): float16 when every computed float
  input is float16 (constants follow them), float32 otherwise;
- "never" (sampling, opaque calls, calls of other functions): float32 inputs;
- "keep" (rope_append): inputs as they come; the op's kernel reads float16 q/k/v and caches and
  float32 angles, and computes in float32.

In a Llama this keeps the big tensors in float16 (the KV cache, q/k/v, attention's output, the
MLP's activations) and the residual stream in float32: the embedding is float32, and a float16
projection added to the float32 sum gives float32 (llama.cpp keeps the residual in float32 too;
with a float16 residual, SmolLM2's final logits were 0.066 from transformers'). The norms
then read float32 and RoPE computes in float32 from float32 positions (float16 holds integers
exactly only up to 2048); both hand float16 to the ops after them.

State parameters (``state_params``: the KV cache) that were float32 become float16: the runtime
allocates them from the signature. Other parameters and every function's result keep their
dtypes, so a caller sees the same signature; the op that computes a float32 result reads float32
(a model's logits, which choose the tokens, are not computed from float16-rounded inputs), and a
result that still comes out in float16 is cast back where it is made. Constants met in float16
are converted once, at compile time, under their own name plus ``_f16``. Functions with control
flow are left in float32 (not handled yet).

Float16 is a storage type: elementwise kernels compute a float16 result in float32 and round it
once, when stored (op/lowering.py), and a fused kernel hands its members' results to each other
unrounded (transform/fuse_tir.py). On SmolLM2 the last position's logits come within 0.02 of
transformers' float32 (0.056 when SiLU and friends ran in float16 arithmetic).
"""

from __future__ import annotations

import numpy as np

from ..ir.builder import analyzer_for
from ..ir.deduce import DeduceContext, deduce
from ..ir.expr import (
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    Expr,
    Function,
    If,
    MatchCast,
    Op,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    with_struct_info,
)
from ..ir.module import IRModule
from ..ir.struct_info import TensorStructInfo
from ..op.registry import make_call
from .rewrite import map_graph_functions, walk_bindings

WIDE = "float32"


def to_mixed_precision(mod: IRModule, dtype: str = "float16") -> IRModule:
    if dtype != "float16":
        raise ValueError(f"to_mixed_precision: only float16 is supported, got {dtype!r}")
    converted: dict[int, Constant] = {}  # one float16 copy of each constant, shared by all functions
    return map_graph_functions(mod, lambda name, func: func if func.attr("Primitive") or _has_control_flow(func)
                               else _FunctionRewriter(mod, func, converted).run())


def _has_control_flow(func: Function) -> bool:
    return any(isinstance(b.value, If) for b in walk_bindings(func.body))


def _is_float(sinfo, dtype: str | None = None) -> bool:
    return isinstance(sinfo, TensorStructInfo) and sinfo.dtype in ((dtype,) if dtype else (WIDE, "float16"))


class _FunctionRewriter:
    def __init__(self, mod: IRModule, func: Function, converted: dict[int, Constant]):
        self.func, self.converted = func, converted
        self.ctx = DeduceContext(analyzer_for(dict(func.attrs or ())), global_sinfo=lambda name: (
            mod.functions[name].struct_info if name in mod.functions else None))
        self.env: dict[Var, Expr] = {}
        body = func.body.body
        fields = body.fields if isinstance(body, Tuple) else (body,)
        self.outputs = {f for f in fields if isinstance(f, Var)}

    def run(self) -> Function:
        state = set(self.func.attr("state_params") or ())
        params = []
        for p in self.func.params:
            if p.name_hint in state and _is_float(p.struct_info, WIDE):
                new = Var(p.name_hint, _with_dtype(p.struct_info, "float16"))
                self.env[p] = new
                params.append(new)
            else:
                params.append(p)
        blocks = []
        for block in self.func.body.blocks:
            dataflow = isinstance(block, DataflowBlock)
            self.casts: dict[tuple[Var, str], Var] = {}  # one cast of a value per block, shared by its readers
            bindings = [new for binding in block.bindings for new in self._binding(binding, dataflow)]
            blocks.append(type(block)(tuple(bindings)))
        body = SeqExpr(tuple(blocks), self._operand(self.func.body.body))
        return Function(tuple(params), body, self.func.ret_struct_info, self.func.attrs, self.func.pure)

    # -- bindings ----------------------------------------------------------------------------

    def _binding(self, binding, dataflow: bool) -> list:
        self.extra: list = []
        if isinstance(binding, MatchCast):  # its pattern names the dtype: give it what it expects
            value = self._cast(self._operand(binding.value), _dtype_of(binding.value.struct_info), dataflow)
            return self.extra + [MatchCast(binding.var, value, binding.struct_info)]
        value = binding.value
        if isinstance(value, Call) and isinstance(value.op, Op):
            new = self._call(value, dataflow, binding.var in self.outputs)
        elif isinstance(value, Call):  # a call of another function: its signature is float32
            args = tuple(self._cast(self._operand(a), _dtype_of(a.struct_info), dataflow) for a in value.args)
            new = Call(value.op, args, value.attrs, value.sinfo_args)
        else:
            new = self._operand(value)
        sinfo = deduce(new, self.ctx) if not isinstance(new, Var) else new.struct_info
        if not isinstance(new, Var):
            new = with_struct_info(new, sinfo)
        keep = binding.var.struct_info
        if binding.var in self.outputs and _dtype_of(sinfo) != _dtype_of(keep):
            tmp = self._fresh(binding.var.name_hint + "_f16", sinfo, dataflow)
            self.extra.append(VarBinding(tmp, new))
            return self.extra + [VarBinding(binding.var, self._astype(tmp, _dtype_of(keep)))]
        if sinfo == keep or binding.var in self.outputs:
            self.env[binding.var] = binding.var
            return self.extra + [VarBinding(binding.var, new)]
        var = type(binding.var)(binding.var.name_hint, sinfo)
        self.env[binding.var] = var
        return self.extra + [VarBinding(var, new)]

    def _call(self, call: Call, dataflow: bool, is_output: bool) -> Expr:
        args = [self._operand(a) for a in call.args]
        precision = call.op.precision
        if precision == "keep":  # the op reads mixed dtypes itself (rope_append: float32 angles)
            return Call(call.op, tuple(args), call.attrs, call.sinfo_args)
        if is_output and _dtype_of(call.struct_info) == WIDE:
            # What the function returns in float32 (a model's logits, which choose tokens) is
            # computed from float32 inputs: it costs one small kernel's reads.
            half = False
        elif precision == "always":
            half = True
        elif precision == "never":
            half = False
        else:  # float16 when every computed float input is (constants follow them)
            computed = [_dtype_of(leaf.struct_info) for a in args for leaf in _leaves(a)
                        if not isinstance(leaf, Constant) and _is_float(leaf.struct_info)]
            half = bool(computed) and all(d == "float16" for d in computed)
        if not half:
            args = [self._map_leaves(a, lambda e: self._cast(e, WIDE, dataflow) if _is_float(e.struct_info, "float16")
                                     else e) for a in args]
            return Call(call.op, tuple(args), call.attrs, call.sinfo_args)
        attrs = dict(call.attrs)
        floats = [leaf for a in args for leaf in _leaves(a) if _is_float(leaf.struct_info)]
        if precision == "always" and attrs.get("out_dtype") in ("", WIDE) and len(floats) == 1:
            # One float operand and a result dtype of its own (quantized_matmul's activations): it is
            # read as it comes, a float32 norm's output without a cast kernel or a rounding, and the
            # result is written in float16.
            attrs["out_dtype"] = "float16"
            if isinstance(floats[0], Var):
                return make_call(call.op.name, *args, sinfo_args=call.sinfo_args, **attrs)
        elif precision == "always" and attrs.get("out_dtype") in ("", WIDE):
            attrs["out_dtype"] = "float16"
        args = [self._map_leaves(a, lambda e: self._cast(e, "float16", dataflow) if _is_float(e.struct_info, WIDE)
                                 else e) for a in args]
        return make_call(call.op.name, *args, sinfo_args=call.sinfo_args, **attrs)

    # -- operands --------------------------------------------------------------------------------

    def _operand(self, expr: Expr) -> Expr:
        if isinstance(expr, Var):
            return self.env.get(expr, expr)
        if isinstance(expr, Tuple):
            return self._tuple(tuple(self._operand(f) for f in expr.fields))
        if isinstance(expr, TupleGetItem):
            inner = self._operand(expr.tuple_value)
            item = TupleGetItem(inner, expr.index)
            return with_struct_info(item, deduce(item, self.ctx))
        return expr

    def _tuple(self, fields) -> Tuple:
        value = Tuple(fields)
        return with_struct_info(value, deduce(value, self.ctx))

    def _map_leaves(self, expr: Expr, fn):
        if isinstance(expr, Tuple):
            return self._tuple(tuple(self._map_leaves(f, fn) for f in expr.fields))
        if isinstance(expr, (Var, Constant)):
            return fn(expr)
        return expr

    def _cast(self, expr: Expr, dtype: str | None, dataflow: bool) -> Expr:
        """``expr`` as ``dtype``: a constant converted now, a variable through an astype binding."""
        if dtype is None or not _is_float(expr.struct_info) or _dtype_of(expr.struct_info) == dtype:
            return expr
        if isinstance(expr, Constant):
            if dtype != "float16":
                return expr
            key = id(expr)
            if key not in self.converted:
                name = f"{expr.name}_f16" if expr.name else ""
                self.converted[key] = Constant(expr.data.astype(np.float16), name=name)
            return self.converted[key]
        if isinstance(expr, Var):
            if (expr, dtype) not in self.casts:
                value = self._astype(expr, dtype)
                var = self._fresh(f"{expr.name_hint}_{'f16' if dtype == 'float16' else 'f32'}", value.struct_info,
                                  dataflow)
                self.extra.append(VarBinding(var, value))
                self.casts[(expr, dtype)] = var
            return self.casts[(expr, dtype)]
        return expr

    def _astype(self, expr: Expr, dtype: str) -> Expr:
        call = make_call("astype", expr, dtype=dtype)
        return with_struct_info(call, deduce(call, self.ctx))

    @staticmethod
    def _fresh(name: str, sinfo, dataflow: bool) -> Var:
        return (DataflowVar if dataflow else Var)(name, sinfo)


def _leaves(expr: Expr):
    if isinstance(expr, Tuple):
        for f in expr.fields:
            yield from _leaves(f)
    elif isinstance(expr, (Var, Constant)):
        yield expr


def _dtype_of(sinfo) -> str | None:
    return sinfo.dtype if isinstance(sinfo, TensorStructInfo) else None


def _with_dtype(sinfo: TensorStructInfo, dtype: str) -> TensorStructInfo:
    return TensorStructInfo(sinfo.shape, dtype, sinfo.ndim, sinfo.vdevice)
