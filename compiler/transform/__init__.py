"""Passes: each a function IRModule -> IRModule."""

from .fuse_ops import fuse_ops
from .fuse_tir import fuse_tir
from .legalize import legalize_ops
from .simplify import dead_code_elimination, fold_constants

__all__ = ["dead_code_elimination", "fold_constants", "fuse_ops", "fuse_tir", "legalize_ops"]
