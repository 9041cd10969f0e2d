"""Converters from aten ops to IR expressions, chosen by overload name ("aten.linear.default").

A converter reads the node's arguments by their schema names (``ctx["dim"]``), already turned into
IR values: tensors as expressions, symbolic sizes as shape expressions (tessera.arith), the rest as
the Python values torch recorded. An argument a converter does not handle must fail through
``ctx.error``, never be ignored."""

from __future__ import annotations

from collections.abc import Callable

from ... import arith
from ...ir.expr import Expr
from ...ir.struct_info import TensorStructInfo
from .errors import TorchImportError

_CONVERTERS: dict[str, Callable] = {}

# torch dtypes the IR has, by torch's name (str(torch.float32) is "torch.float32").
DTYPES = {"float16": "float16", "float32": "float32", "float64": "float64", "bool": "bool",
          "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8"}


def converter(*overloads: str):
    """Register ``fn(ctx) -> Expr | list[Expr] | None`` for each aten overload name."""

    def register(fn):
        for name in overloads:
            if name in _CONVERTERS:
                raise ValueError(f"converter for {name} is registered twice")
            _CONVERTERS[name] = fn
        return fn

    return register


def find_converter(overload: str) -> Callable | None:
    return _CONVERTERS.get(overload)


def supported_ops() -> list[str]:
    return sorted(_CONVERTERS)


def ir_dtype(dtype, where: str) -> str:
    """A torch dtype as the IR names it, or one error naming ``where`` it was met."""
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise TorchImportError(f"{where}: dtype {name} is not supported")
    return DTYPES[name]


class NodeContext:
    """What a converter sees of one FX node: its arguments by schema name, the dtype torch deduced
    for its result, and a way to fail that names the node and its op."""

    def __init__(self, node, overload: str, args: dict, analyzer: arith.Analyzer, emit: Callable[[Expr], Expr]):
        self.node, self.overload, self.args = node, overload, args
        self.analyzer, self.emit = analyzer, emit

    def error(self, message: str, kind: str = "unsupported") -> TorchImportError:
        return TorchImportError(f"node '{self.node.name}' ({self.overload}): {message}", kind)

    # -- arguments -------------------------------------------------------------

    def __getitem__(self, name: str):
        return self.args.get(name)

    def tensor(self, name: str) -> Expr:
        value = self.args.get(name)
        if not isinstance(value, Expr) or not isinstance(value.struct_info, TensorStructInfo):
            raise self.error(f"argument '{name}' must be a tensor, got {type(value).__name__}", "invalid")
        return value

    def ints(self, name: str) -> tuple:
        value = self.args.get(name)
        if value is None:
            return ()
        return tuple(value) if isinstance(value, list | tuple) else (value,)

    # -- facts about values -----------------------------------------------------

    def dims(self, value: Expr) -> tuple:
        shape = value.struct_info.shape
        if shape is None:
            raise self.error("an input's shape is unknown", "invalid")
        return tuple(shape)

    def rank(self, value: Expr) -> int:
        return len(self.dims(value))

    def static_dims(self, value: Expr, what: str, start: int = 0) -> tuple[int, ...]:
        """The sizes of axes ``start`` on, which must be static (the axes before may be symbolic)."""
        dims = self.dims(value)[start:]
        ints = tuple(self.analyzer.as_int(d) for d in dims)
        if None in ints:
            raise self.error(f"{what} needs static sizes on axes {start} on, got {dims}")
        return ints

    def dtype(self, value: Expr) -> str:
        return value.struct_info.dtype

    def axis(self, axis: int, rank: int) -> int:
        if not -rank <= axis < max(rank, 1):
            raise self.error(f"dim {axis} is out of range for rank {rank}", "invalid")
        return axis + rank if axis < 0 else axis

    @property
    def out_dtype(self) -> str:
        """The dtype torch deduced for the (first) result."""
        val = self.node.meta.get("val")
        if isinstance(val, list | tuple):
            val = val[0]
        if val is None or not hasattr(val, "dtype"):
            raise self.error("the node carries no result metadata (meta['val'])", "invalid")
        return ir_dtype(val.dtype, f"node '{self.node.name}'")
