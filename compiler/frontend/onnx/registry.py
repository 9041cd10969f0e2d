"""Converters from ONNX nodes to IR expressions, chosen by op type and opset.

Each converter declares the first opset whose semantics it implements (``since``) and the
attributes it understands; the importer takes the newest converter whose ``since`` is at most the
model's default-domain opset. An attribute the converter does not list is an error, never ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ... import arith
from ...ir.expr import Constant, Expr
from ...ir.struct_info import TensorStructInfo
from .errors import OnnxImportError, node_label
from .shape_values import SymbolicInts

MIN_OPSET = 11


@dataclass(frozen=True)
class Converter:
    op_type: str
    since: int
    attrs: frozenset[str]
    fn: Callable


_CONVERTERS: dict[str, list[Converter]] = {}


def converter(op_types: str | tuple[str, ...], since: int = MIN_OPSET, attrs: tuple[str, ...] = ()):
    """Register ``fn(ctx) -> Expr | list[Expr]`` for ``op_types`` from opset ``since`` on."""
    names = (op_types,) if isinstance(op_types, str) else op_types

    def register(fn):
        for name in names:
            entries = _CONVERTERS.setdefault(name, [])
            if any(entry.since == since for entry in entries):
                raise ValueError(f"converter for {name} since opset {since} is registered twice")
            entries.append(Converter(name, since, frozenset(attrs), fn))
            entries.sort(key=lambda entry: entry.since)
        return fn

    return register


def find_converter(op_type: str, opset: int) -> Converter | None:
    chosen = None
    for entry in _CONVERTERS.get(op_type, ()):
        if entry.since <= opset:
            chosen = entry
    return chosen


def supported_ops() -> list[str]:
    return sorted(_CONVERTERS)


class NodeContext:
    """What a converter sees of one node: its inputs as expressions (None where omitted), their
    values where they are known constants, its attributes, and a way to fail that names it."""

    def __init__(self, node, index: int, opset: int, inputs: list[Expr | None], attrs: dict,
                 analyzer: arith.Analyzer, emit: Callable[[Expr], Expr] | None = None):
        self.node, self.index, self.opset = node, index, opset
        self.inputs, self.attrs, self.analyzer = inputs, attrs, analyzer
        self.emit = emit  # binds an expression now, so that its struct info is known
        self.block_key = None  # which block the node is converted into (shape values materialize per block)

    # -- failing ---------------------------------------------------------------

    def error(self, message: str, kind: str = "unsupported") -> OnnxImportError:
        return OnnxImportError(f"{node_label(self.node, self.index)} ({self.node.op_type}, opset {self.opset}): "
                               f"{message}", kind)

    # -- inputs ----------------------------------------------------------------

    def input(self, index: int) -> Expr:
        value = self.inputs[index] if index < len(self.inputs) else None
        if value is None:
            raise self.error(f"input {index} is required", "invalid")
        if isinstance(value, SymbolicInts):  # a shape value used as a tensor: made one, once per block
            value = value.materialize(self.emit, self.block_key)
        return value

    def has_input(self, index: int) -> bool:
        return index < len(self.inputs) and self.inputs[index] is not None

    def constant(self, index: int, what: str) -> np.ndarray:
        """The value of input ``index``, which must be known when importing (an initializer or a
        Constant): the IR needs ``what`` (a shape, axes) at compile time."""
        value = self.inputs[index] if index < len(self.inputs) else None
        if isinstance(value, Constant):
            return value.data
        if isinstance(value, SymbolicInts):
            raise self.error(f"{what} (input {index}) is computed from symbolic dimensions "
                             f"({', '.join(str(v) for v in value.values)}), but must be a constant here; "
                             "fix the dimensions with shapes=")
        error = self.error(f"{what} (input {index}) must be a constant (an initializer or a Constant node): "
                           "the IR takes it at compile time")
        error.constant_input = self.source_input(index)
        raise error

    def shape_value(self, index: int, what: str) -> list:
        """Input ``index`` as a list of shape expressions (ints, or expressions over the shape
        variables): a constant, or a shape value computed from the inputs' dimensions. A value that
        depends on the data at run time is an error: the IR takes shapes at compile time."""
        value = self.inputs[index] if index < len(self.inputs) else None
        if isinstance(value, SymbolicInts):
            return list(value.values)
        if isinstance(value, Constant) and value.data.dtype.kind in "iu":
            return [arith.IntImm(int(v)) for v in value.data.reshape(-1)]
        if value is None:
            raise self.error(f"{what} (input {index}) is required", "invalid")
        if isinstance(value, Constant):
            raise self.error(f"{what} (input {index}) must hold integers, not {value.data.dtype}", "invalid")
        error = self.error(f"{what} (input {index}) depends on the data at run time; the IR takes it at "
                           "compile time (a constant, or computed from the inputs' shapes)")
        error.constant_input = self.source_input(index)
        raise error

    def source_input(self, index: int) -> str:
        """The one graph input that input ``index`` is computed from (through any nodes but Shape
        and Size, which read only dimensions), so that a caller able to fix an input (the node-test
        runner) knows which; else the input's own name."""
        name = self.node.input[index] if index < len(self.node.input) else ""
        graph = getattr(getattr(self, "importer", None), "graph", None)
        if graph is None or not name:
            return name
        producers = {out: node for node in graph.node for out in node.output}
        inputs = {value.name for value in graph.input} - {tensor.name for tensor in graph.initializer}
        found, seen, todo = set(), set(), [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            if current in inputs:
                found.add(current)
            elif current in producers and producers[current].op_type not in ("Shape", "Size"):
                todo.extend(i for i in producers[current].input if i)
        return found.pop() if len(found) == 1 else name

    def tensor(self, index: int) -> TensorStructInfo:
        value = self.inputs[index] if index < len(self.inputs) else None
        sinfo = value.struct_info if isinstance(value, SymbolicInts) else self.input(index).struct_info
        if not isinstance(sinfo, TensorStructInfo):
            raise self.error(f"input {index} is not a tensor", "invalid")
        return sinfo

    def dims(self, index: int) -> tuple:
        """Input ``index``'s dimensions (PrimExprs); its rank must be known."""
        sinfo = self.tensor(index)
        if sinfo.shape is None:
            raise self.error(f"the shape of input {index} is unknown; give it with shapes=")
        return tuple(sinfo.shape)

    def static_dims(self, index: int, what: str) -> tuple[int, ...]:
        dims = self.dims(index)
        values = tuple(self.analyzer.as_int(d) for d in dims)
        if any(v is None for v in values):
            shown = "(" + ", ".join(str(d) for d in dims) + ")"
            raise self.error(f"{what} needs the static shape of input {index}, which is {shown}; fix it with shapes=")
        return values

    def rank(self, index: int) -> int:
        sinfo = self.tensor(index)
        if sinfo.shape is not None:
            return len(sinfo.shape)
        if sinfo.ndim < 0:
            raise self.error(f"the rank of input {index} is unknown")
        return sinfo.ndim

    def dtype(self, index: int) -> str:
        return self.tensor(index).dtype

    # -- attributes ------------------------------------------------------------

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    def ints(self, name: str, default=None):
        value = self.attrs.get(name)
        return default if value is None else tuple(int(v) for v in value)
