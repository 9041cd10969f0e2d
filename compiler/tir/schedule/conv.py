"""Convolutions and pooling on C targets (codegen/c/microkernels_conv.c). Not written yet:
``applies`` declines every definition."""

from __future__ import annotations

from ..compute import ComputeDef
from ..ir import PrimFunc


def applies(defn: ComputeDef, target) -> bool:
    return False


def schedule_conv(defn: ComputeDef, target, name: str) -> PrimFunc:
    raise NotImplementedError("conv: no definition applies yet")
