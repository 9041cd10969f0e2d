"""Struct info: what the compiler knows about a value at compile time.

Relax's annotations, as frozen dataclasses. Knowledge can be precise
(``Tensor((n, 4), "float32")``), coarse (``Tensor(ndim=2)``) or absent
(``Object``); deduction falls back to coarser info instead of failing.
Shapes hold canonical ``tessera.arith`` expressions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from .. import arith
from ..arith import PrimExpr

DTYPES = (
    "float64", "float32", "float16", "bfloat16",
    "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8", "bool",
)


def check_dtype(dtype: str) -> str:
    if dtype != "" and dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    return dtype


def as_dim(value) -> PrimExpr:
    """A shape dimension from an int, a PrimExpr, or text such as "n" or "n * 4"."""
    if isinstance(value, str):
        return arith.Var(value) if value.isidentifier() else arith.parse_expr(value)
    return arith.as_expr(value)


class StructInfo:
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ObjectStructInfo(StructInfo):
    """Nothing is known about the value."""


@dataclass(frozen=True, slots=True)
class PrimStructInfo(StructInfo):
    dtype: str = "int64"
    value: PrimExpr | None = None

    def __post_init__(self):
        check_dtype(self.dtype)


@dataclass(frozen=True, slots=True)
class ShapeStructInfo(StructInfo):
    """A shape value; ``values`` when known, else only ``ndim`` (-1: unknown)."""

    values: tuple[PrimExpr, ...] | None = None
    ndim: int = -1

    def __post_init__(self):
        if self.values is not None:
            object.__setattr__(self, "values", tuple(as_dim(v) for v in self.values))
            object.__setattr__(self, "ndim", len(self.values))


@dataclass(frozen=True, slots=True)
class TensorStructInfo(StructInfo):
    """A tensor; ``shape`` when known, else only ``ndim`` (-1: unknown). ``vdevice``: the canonical name
    (``"webgpu:0"``) of the module's virtual device it lives on, None when unplaced (docs/vdevice.md;
    ``tessera.ir.resolve_vdevices`` turns other specs into canonical names)."""

    shape: tuple[PrimExpr, ...] | None = None
    dtype: str = ""
    ndim: int = -1
    vdevice: str | None = None

    def __post_init__(self):
        check_dtype(self.dtype)
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(as_dim(v) for v in self.shape))
            object.__setattr__(self, "ndim", len(self.shape))


@dataclass(frozen=True, slots=True)
class TupleStructInfo(StructInfo):
    fields: tuple[StructInfo, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))


@dataclass(frozen=True, slots=True)
class FuncStructInfo(StructInfo):
    """A callable: parameter infos (None when unknown) and the result's info."""

    params: tuple[StructInfo, ...] | None
    ret: StructInfo
    pure: bool = True


# Short constructors in the spirit of R.Tensor / R.Shape.


def Tensor(shape: Sequence | None = None, dtype: str = "", ndim: int = -1,
           vdevice: str | None = None) -> TensorStructInfo:
    return TensorStructInfo(None if shape is None else tuple(shape), dtype, ndim, vdevice)


def Shape(values: Sequence | None = None, ndim: int = -1) -> ShapeStructInfo:
    return ShapeStructInfo(None if values is None else tuple(values), ndim)


def Tuple(*fields: StructInfo) -> TupleStructInfo:
    return TupleStructInfo(tuple(fields))


# ---------------------------------------------------------------------------
# Relations between struct infos.


def sinfo_vars(sinfo: StructInfo) -> list[arith.Var]:
    """Free symbolic variables of ``sinfo``, in order, each once.

    A callable's signature binds its own parameters' plain dims (like a
    function's), so those are not free in it.
    """
    found: dict[arith.Var, None] = {}
    if isinstance(sinfo, FuncStructInfo):
        own = {v.name for p in sinfo.params or () for v in defining_vars(p)}
        inner = [v for p in sinfo.params or () for v in sinfo_vars(p)] + sinfo_vars(sinfo.ret)
        return list(dict.fromkeys(v for v in inner if v.name not in own))
    if isinstance(sinfo, TupleStructInfo):
        for field in sinfo.fields:
            for var in sinfo_vars(field):
                found.setdefault(var)
        return list(found)
    for expr in _sinfo_exprs(sinfo):
        for var in arith.free_vars(expr):
            found.setdefault(var)
    return list(found)


def _sinfo_exprs(sinfo: StructInfo) -> Iterable[PrimExpr]:
    if isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None:
        yield from sinfo.shape
    elif isinstance(sinfo, ShapeStructInfo) and sinfo.values is not None:
        yield from sinfo.values
    elif isinstance(sinfo, PrimStructInfo) and sinfo.value is not None:
        yield sinfo.value
    elif isinstance(sinfo, TupleStructInfo):
        for field in sinfo.fields:
            yield from _sinfo_exprs(field)
    elif isinstance(sinfo, FuncStructInfo):
        for param in sinfo.params or ():
            yield from _sinfo_exprs(param)
        yield from _sinfo_exprs(sinfo.ret)


def defining_vars(sinfo: StructInfo) -> list[arith.Var]:
    """Variables that matching a value against ``sinfo`` binds: bare dims and prim values."""
    found: dict[arith.Var, None] = {}

    def visit(s: StructInfo) -> None:
        dims: Iterable[PrimExpr] = ()
        if isinstance(s, TensorStructInfo) and s.shape is not None:
            dims = s.shape
        elif isinstance(s, ShapeStructInfo) and s.values is not None:
            dims = s.values
        elif isinstance(s, PrimStructInfo) and s.value is not None:
            dims = (s.value,)
        elif isinstance(s, TupleStructInfo):
            for field in s.fields:
                visit(field)
        for dim in dims:
            if isinstance(dim, arith.Var):
                found.setdefault(dim)

    visit(sinfo)
    return list(found)


def map_sinfo_exprs(sinfo: StructInfo, fn) -> StructInfo:
    """Apply ``fn`` to every expression inside ``sinfo``."""
    if isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None:
        return TensorStructInfo(tuple(fn(d) for d in sinfo.shape), sinfo.dtype, -1, sinfo.vdevice)
    if isinstance(sinfo, ShapeStructInfo) and sinfo.values is not None:
        return ShapeStructInfo(tuple(fn(d) for d in sinfo.values))
    if isinstance(sinfo, PrimStructInfo) and sinfo.value is not None:
        return PrimStructInfo(sinfo.dtype, fn(sinfo.value))
    if isinstance(sinfo, TupleStructInfo):
        return TupleStructInfo(tuple(map_sinfo_exprs(f, fn) for f in sinfo.fields))
    if isinstance(sinfo, FuncStructInfo):
        params = None if sinfo.params is None else tuple(map_sinfo_exprs(p, fn) for p in sinfo.params)
        return FuncStructInfo(params, map_sinfo_exprs(sinfo.ret, fn), sinfo.pure)
    return sinfo


def erase_to_ndim(sinfo: StructInfo, keep=lambda var: True) -> StructInfo:
    """Drop shape values that mention a variable for which ``keep`` is false."""

    def known(exprs) -> bool:
        return all(keep(v) for e in exprs for v in arith.free_vars(e))

    if isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None and not known(sinfo.shape):
        return TensorStructInfo(None, sinfo.dtype, sinfo.ndim, sinfo.vdevice)
    if isinstance(sinfo, ShapeStructInfo) and sinfo.values is not None and not known(sinfo.values):
        return ShapeStructInfo(None, sinfo.ndim)
    if isinstance(sinfo, PrimStructInfo) and sinfo.value is not None and not known([sinfo.value]):
        return PrimStructInfo(sinfo.dtype)
    if isinstance(sinfo, TupleStructInfo):
        return TupleStructInfo(tuple(erase_to_ndim(f, keep) for f in sinfo.fields))
    if isinstance(sinfo, FuncStructInfo):
        if known(list(_sinfo_exprs(sinfo))):
            return sinfo
        return FuncStructInfo(None, ObjectStructInfo(), sinfo.pure)
    return sinfo


def tensor_paths(sinfo: StructInfo, prefix: tuple[int, ...] = ()) -> Iterable[tuple[tuple[int, ...], TensorStructInfo]]:
    """Every tensor inside ``sinfo`` with its place: () for a tensor, (i, ...) inside a tuple's field i."""
    if isinstance(sinfo, TensorStructInfo):
        yield prefix, sinfo
    elif isinstance(sinfo, TupleStructInfo):
        for index, field in enumerate(sinfo.fields):
            yield from tensor_paths(field, prefix + (index,))


def map_vdevices(sinfo: StructInfo, fn, prefix: tuple[int, ...] = ()) -> StructInfo:
    """``sinfo`` with each tensor's vdevice replaced by ``fn(vdevice, path)`` (the vdevice may be None).

    A callable's parameters and result are mapped too (with paths from ()): they name devices of the
    same module."""
    if isinstance(sinfo, TensorStructInfo):
        vdevice = fn(sinfo.vdevice, prefix)
        return sinfo if vdevice == sinfo.vdevice else replace(sinfo, vdevice=vdevice)
    if isinstance(sinfo, TupleStructInfo):
        return TupleStructInfo(tuple(map_vdevices(f, fn, prefix + (i,)) for i, f in enumerate(sinfo.fields)))
    if isinstance(sinfo, FuncStructInfo):
        params = None if sinfo.params is None else tuple(map_vdevices(p, fn) for p in sinfo.params)
        return FuncStructInfo(params, map_vdevices(sinfo.ret, fn), sinfo.pure)
    return sinfo


def placed_as_annotated(deduced: StructInfo, annotation: StructInfo) -> StructInfo:
    """``deduced`` with each tensor that names no vdevice placed where ``annotation`` puts it.

    An annotation may place a value that deduction leaves unplaced: `lv: R.Tensor(..., vdevice="wasm:0")
    = R.add(x, y)` says where lv is computed (RealizeVDevice then places x and y there too)."""
    where = dict(tensor_paths(annotation))
    return map_vdevices(deduced, lambda vdevice, path: vdevice or (where[path].vdevice if path in where else None))


def renamed_on_one_device(deduced: StructInfo, annotation: StructInfo,
                          physical_device: Callable[[str], tuple[str, int] | None]) -> StructInfo:
    """``deduced`` with each tensor's vdevice replaced by the annotation's where both name one
    physical device (``physical_device(name)``: IRModule.physical_device).

    Two vdevices of one target kind and device id (the ``webgpu`` and ``llvmpipe`` presets, say)
    share that device's memory: a tensor in it is as much on one as on the other, and
    ``R.to_vdevice`` between them copies nothing. ``explicit_allocation`` lowers such a move to the
    alias ``v = x``, annotated with the vdevice its readers were compiled for; the alias is a legal
    form (no byte moves, and the memory plan places both names on the same device), only the names
    differ. Vdevices on different physical devices still need a copy, so there nothing is renamed.
    The builder (so the parser) and the well-formedness check both apply this rule to an alias."""
    where = {path: tensor.vdevice for path, tensor in tensor_paths(annotation)}

    def rename(vdevice, path):
        wanted = where.get(path)
        if not (vdevice and wanted) or vdevice == wanted:
            return vdevice
        device = physical_device(vdevice)
        return wanted if device is not None and device == physical_device(wanted) else vdevice

    return map_vdevices(deduced, rename)


def is_base_of(base: StructInfo, derived: StructInfo, analyzer: arith.Analyzer | None = None) -> bool:
    """True when every value described by ``derived`` is also described by ``base``."""
    analyzer = analyzer or arith.Analyzer()
    if isinstance(base, ObjectStructInfo):
        return True
    if isinstance(base, TensorStructInfo):
        if not isinstance(derived, TensorStructInfo):
            return False
        if base.dtype and base.dtype != derived.dtype:
            return False
        if base.vdevice and base.vdevice != derived.vdevice:
            return False
        return _dims_base_of(base.shape, base.ndim, derived.shape, derived.ndim, analyzer)
    if isinstance(base, ShapeStructInfo):
        if not isinstance(derived, ShapeStructInfo):
            return False
        return _dims_base_of(base.values, base.ndim, derived.values, derived.ndim, analyzer)
    if isinstance(base, PrimStructInfo):
        if not isinstance(derived, PrimStructInfo) or base.dtype != derived.dtype:
            return False
        if base.value is None:
            return True
        return derived.value is not None and analyzer.prove_equal(base.value, derived.value)
    if isinstance(base, TupleStructInfo):
        return (isinstance(derived, TupleStructInfo) and len(base.fields) == len(derived.fields)
                and all(is_base_of(b, d, analyzer) for b, d in zip(base.fields, derived.fields)))
    if isinstance(base, FuncStructInfo):
        if not isinstance(derived, FuncStructInfo):
            return False
        if base.pure and not derived.pure:
            return False
        if not is_base_of(base.ret, derived.ret, analyzer):
            return False
        if base.params is None:
            return True
        return (derived.params is not None and len(base.params) == len(derived.params)
                and all(is_base_of(d, b, analyzer) for b, d in zip(base.params, derived.params)))
    raise TypeError(f"unknown struct info {base!r}")


def _dims_base_of(base_dims, base_ndim, dims, ndim, analyzer) -> bool:
    if base_ndim != -1 and base_ndim != ndim:
        return False
    if base_dims is None:
        return True
    if dims is None:
        return False
    return all(analyzer.prove_equal(a, b) for a, b in zip(base_dims, dims))


def unify(a: StructInfo, b: StructInfo, analyzer: arith.Analyzer | None = None) -> StructInfo:
    """The most precise info describing both ``a`` and ``b`` (e.g. the two arms of an If)."""
    analyzer = analyzer or arith.Analyzer()
    if is_base_of(a, b, analyzer):
        return a
    if is_base_of(b, a, analyzer):
        return b
    if isinstance(a, TensorStructInfo) and isinstance(b, TensorStructInfo):
        dtype = a.dtype if a.dtype == b.dtype else ""
        vdevice = a.vdevice if a.vdevice == b.vdevice else None
        ndim = a.ndim if a.ndim == b.ndim else -1
        return TensorStructInfo(None, dtype, ndim, vdevice)
    if isinstance(a, ShapeStructInfo) and isinstance(b, ShapeStructInfo):
        return ShapeStructInfo(None, a.ndim if a.ndim == b.ndim else -1)
    if isinstance(a, PrimStructInfo) and isinstance(b, PrimStructInfo) and a.dtype == b.dtype:
        return PrimStructInfo(a.dtype)
    if (isinstance(a, TupleStructInfo) and isinstance(b, TupleStructInfo)
            and len(a.fields) == len(b.fields)):
        return TupleStructInfo(tuple(unify(x, y, analyzer) for x, y in zip(a.fields, b.fields)))
    return ObjectStructInfo()


def describe(sinfo: StructInfo) -> str:
    """Short human text, e.g. "(n, 4) float32" or "tensor of ndim 2"."""
    if isinstance(sinfo, TensorStructInfo):
        dtype = f" {sinfo.dtype}" if sinfo.dtype else ""
        dtype += f" on {sinfo.vdevice}" if sinfo.vdevice else ""
        if sinfo.shape is not None:
            return "(" + ", ".join(str(d) for d in sinfo.shape) + (",)" if sinfo.ndim == 1 else ")") + dtype
        return f"tensor of ndim {sinfo.ndim}{dtype}" if sinfo.ndim >= 0 else f"tensor{dtype}"
    if isinstance(sinfo, ShapeStructInfo):
        if sinfo.values is not None:
            return "shape [" + ", ".join(str(d) for d in sinfo.values) + "]"
        return f"shape of ndim {sinfo.ndim}"
    if isinstance(sinfo, PrimStructInfo):
        return sinfo.dtype + (f" {sinfo.value}" if sinfo.value is not None else "")
    if isinstance(sinfo, TupleStructInfo):
        return "tuple(" + ", ".join(describe(f) for f in sinfo.fields) + ")"
    if isinstance(sinfo, FuncStructInfo):
        return "function"
    return "object"
