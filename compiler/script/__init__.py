"""The text format: ``IRModule.script()`` prints it, ``from_source`` reads it back.

See docs/script.md for the syntax.
"""

from .parser import from_source

__all__ = ["from_source"]
