"""Default GPU schedule rules, chosen by the pattern analysis of a compute definition."""

from __future__ import annotations

from dataclasses import replace

from ... import arith
from ..compute import ComputeDef, RowDef
from ..ir import PrimFunc
from ..pattern import Pattern, analyze_pattern
from .injective import schedule_injective, vectorize_elementwise
from .matmul import is_gemv, schedule_gemm, schedule_gemm_registers, schedule_gemv, schedule_gemv_columns
from .quantized import schedule_quantized_matmul
from .reduction import schedule_reduction, schedule_rows
from .transpose import schedule_transpose

# A reduction this short runs serially in one thread per output element.
SERIAL_REDUCTION_LIMIT = 64


def schedule(defn: ComputeDef | RowDef, target, name: str) -> PrimFunc:
    pattern = analyze_pattern(defn)
    if isinstance(defn, RowDef):
        func = schedule_rows(defn, target, name)
    elif "quantized_matmul" in defn.attrs:
        func = schedule_quantized_matmul(defn, defn.attrs["quantized_matmul"], target, name)
    elif "transpose" in defn.attrs:
        func = schedule_transpose(defn, defn.attrs["transpose"], target, name)
    elif "matmul" in defn.attrs:
        info = defn.attrs["matmul"]
        if target.cpu_adapter:
            rule = schedule_gemv_columns if is_gemv(info) else schedule_gemm_registers
        else:
            rule = schedule_gemv if is_gemv(info) else schedule_gemm
        func = rule(defn, info, target, name)
    elif defn.reduction is not None:
        extent = arith.Analyzer().as_int(arith.simplify(_product(defn.reduction.extents)))
        if extent is not None and extent <= SERIAL_REDUCTION_LIMIT:
            func = schedule_injective(defn, target, name)
        else:
            func = schedule_reduction(defn, target, name)
    else:
        vectorized = vectorize_elementwise(defn, target, name) if pattern == Pattern.ELEMWISE else None
        func = vectorized or schedule_injective(defn, target, name)
    return replace(func, attrs={**func.attrs, "pattern": pattern.value})


def _product(dims):
    total = arith.IntImm(1)
    for d in dims:
        total = total * d
    return total
