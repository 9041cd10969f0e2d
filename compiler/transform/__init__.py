"""Passes: each a function IRModule -> IRModule."""

from .fuse_by_pattern import FusionPattern, find_matches, fuse_ops_by_pattern
from .fuse_ops import fuse_ops
from .fuse_tir import fuse_tir
from .inline import inline_functions
from .instruments import CheckAfterEachPass, DumpIR, PassCheckError, PassInstrument, PassTimings, PrintAfter
from .lambda_lift import lambda_lift
from .legalize import legalize_ops
from .lower_vm import explicit_allocation, to_non_dataflow, vm_shape_lowering
from .mixed_precision import to_mixed_precision
from .pipeline import Pipeline
from .plan_memory import plan_memory
from .quantize_activations import quantize_activations
from .realize_vdevice import realize_vdevice
from .reshape_checks import check_reshapes
from .simplify import dead_code_elimination, fold_constants, normalize
from .split_weights import split_oversized_weights
from .unalias import unalias_kernel_args
from .update_vdevice import update_vdevice

__all__ = ["CheckAfterEachPass", "DumpIR", "FusionPattern", "PassCheckError", "PassInstrument", "PassTimings",
           "Pipeline", "PrintAfter", "check_reshapes", "dead_code_elimination", "explicit_allocation",
           "find_matches", "fold_constants", "fuse_ops", "fuse_ops_by_pattern", "fuse_tir", "inline_functions",
           "lambda_lift", "legalize_ops", "normalize", "quantize_activations", "plan_memory", "realize_vdevice",
           "split_oversized_weights", "to_mixed_precision", "to_non_dataflow", "update_vdevice", "vm_shape_lowering"]
