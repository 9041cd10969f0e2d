"""GEMMs on C targets (M > 1: prefill, BERT, ViT) through the f32 micro-kernels over packed panels
(codegen/c/microkernels_gemm.c). Not written yet: ``applies`` declines every definition."""

from __future__ import annotations

from ..compute import ComputeDef
from ..ir import PrimFunc


def applies(defn: ComputeDef, target) -> bool:
    return False


def schedule_cpu_gemm(defn: ComputeDef, target, name: str) -> PrimFunc:
    raise NotImplementedError("cpu_gemm: no definition applies yet")
