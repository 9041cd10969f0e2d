"""Loop-level kernels: the IR, compute definitions, pattern analysis and schedule rules."""

from .compute import ComputeDef, Reduction, RowDef, placeholder, read
from .ir import Buffer, PrimFunc
from .pattern import Pattern, analyze_pattern
