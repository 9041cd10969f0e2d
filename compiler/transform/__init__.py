"""Passes: each a function IRModule -> IRModule."""

from .legalize import legalize_ops

__all__ = ["legalize_ops"]
