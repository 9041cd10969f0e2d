"""Default GPU schedule rules, chosen by the pattern analysis of a compute definition.

``schedule`` is the one place that picks a rule: from the kind of definition
(``ComputeDef``, ``RowDef``, ``OpaqueDef``), its pattern hints and pattern, and
the target's limits and capabilities. Operators only describe computations
(tessera.op); ``legalize_ops`` (tessera.transform) brings the two together.
"""

from __future__ import annotations

from dataclasses import replace

from ... import arith
from ..compute import ComputeDef, OpaqueDef, RowDef
from ..ir import SCALAR_PREFIX, Local, PrimFunc, walk_expr, walk_stmts
from ..pattern import Pattern, analyze_pattern
from . import conv, cpu_gemm
from .attention import schedule_attention, schedule_attention_merge
from .injective import schedule_injective, schedule_injective_rows, vectorize_elementwise
from .kv_cache import schedule_kv_cache_write, schedule_rope_append
from .matmul import (
    is_gemv,
    is_lane_rows,
    schedule_gemm,
    schedule_gemm_registers,
    schedule_gemv,
    schedule_gemv_columns,
    schedule_matmul_lanes,
)
from .quantized import schedule_quantized_matmul
from .quantized_gemv import applies as quantized_gemv_applies
from .quantized_gemv import schedule_quantized_gemv
from .quantized_gemv_q8 import applies as quantized_gemv_q8_applies
from .quantized_gemv_q8 import schedule_quantized_gemv_q8
from .reduction import schedule_reduction, schedule_rows
from .sampling import schedule_sample_token
from .transpose import schedule_transpose

# A reduction this short runs serially in one thread per output element.
SERIAL_REDUCTION_LIMIT = 64

# The rule of each kind of OpaqueDef: it writes the whole kernel, attributes included.
OPAQUE_RULES = {
    "attention": schedule_attention,
    "attention-merge": schedule_attention_merge,
    "kv-cache-write": schedule_kv_cache_write,
    "rope-append": schedule_rope_append,
    "sample-token": schedule_sample_token,
}

# Rules for the micro-kernels of C targets, asked first, in order: each module's ``applies(defn,
# target)`` says whether its schedule takes the definition.
MICRO_KERNEL_RULES = (
    (cpu_gemm.applies, cpu_gemm.schedule_cpu_gemm),
    (conv.applies, conv.schedule_conv),
)


def schedule(defn: ComputeDef | RowDef | OpaqueDef, target, name: str) -> PrimFunc:
    if isinstance(defn, OpaqueDef):
        return OPAQUE_RULES[defn.kind](defn, target, name)
    pattern = analyze_pattern(defn)
    chosen = next((rule for applies, rule in MICRO_KERNEL_RULES if applies(defn, target)), None)
    if chosen is not None:
        func = chosen(defn, target, name)
    elif isinstance(defn, RowDef):
        func = schedule_rows(defn, target, name)
    elif "quantized_matmul" in defn.attrs:
        info = defn.attrs["quantized_matmul"]
        m_total = _product(defn.output.shape[:-1])
        if quantized_gemv_q8_applies(info, m_total, target):
            func = schedule_quantized_gemv_q8(defn, info, target, name)
        elif info.activations:
            # Rules below read x as it is; the generic reduction reads it through the op's body,
            # which rounds it (op/quantized.py).
            func = schedule_reduction(defn, target, name)
        elif quantized_gemv_applies(info, m_total, target):
            func = schedule_quantized_gemv(defn, info, target, name)
        else:
            func = schedule_quantized_matmul(defn, info, target, name)
    elif "transpose" in defn.attrs:
        func = schedule_transpose(defn, defn.attrs["transpose"], target, name)
    elif "matmul" in defn.attrs:
        info = defn.attrs["matmul"]
        if target.cpu_adapter and target.serial_threads and is_lane_rows(info):
            rule = schedule_matmul_lanes
        elif target.cpu_adapter:
            rule = schedule_gemv_columns if is_gemv(info) else schedule_gemm_registers
        else:
            rule = schedule_gemv if is_gemv(info) else schedule_gemm
        func = rule(defn, info, target, name)
    elif target.cpu_adapter and target.serial_threads:
        # Threads that run one after another gain nothing from a workgroup tree: every reduction,
        # long or short, runs serially per output element, inside loops over rows. (A serial target
        # with cpu_adapter off asks for the GPU-shaped rules below.)
        func = schedule_injective_rows(defn, target, name)
    elif defn.reduction is not None:
        extent = arith.Analyzer().as_int(arith.simplify(_product(defn.reduction.extents)))
        if extent is not None and extent <= SERIAL_REDUCTION_LIMIT:
            func = schedule_injective(defn, target, name)
        else:
            func = schedule_reduction(defn, target, name)
    else:
        vectorized = vectorize_elementwise(defn, target, name) if pattern == Pattern.ELEMWISE else None
        func = vectorized or schedule_injective(defn, target, name)
    return replace(func, scalars=_all_scalars(func), attrs={**func.attrs, "pattern": pattern.value})


def _all_scalars(func: PrimFunc) -> tuple[str, ...]:
    """The buffers' symbolic sizes plus any other symbolic value the body uses (an arange's start)."""
    names = dict.fromkeys(func.scalars)
    for _, exprs in walk_stmts(func.body):
        for root in exprs:
            for e in walk_expr(root):
                if isinstance(e, Local) and e.name.startswith(SCALAR_PREFIX):
                    names.setdefault(e.name[len(SCALAR_PREFIX):])
    for g in func.grid:
        for v in arith.free_vars(g):
            names.setdefault(v.name)
    return tuple(names)


def _product(dims):
    total = arith.IntImm(1)
    for d in dims:
        total = total * d
    return total
