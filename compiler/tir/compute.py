"""Compute definitions: what an operator computes, before any schedule.

An operator's legalization describes each output element as an expression of
the output's index variables, reading inputs with multi-dimensional
``TensorRead``s (as TVM's ``te.compute`` does). Schedule rules then decide how
threads cover the elements. Keeping the reads multi-dimensional lets
``analyze_pattern`` classify the computation from its structure alone.

- ``ComputeDef``: out[i...] = body(i...), or a reduction
  out[i...] = finalize(combine over r... of body(i..., r...)).
- ``RowDef``: a normalization over one axis that needs several passes over
  the same row (softmax, log_softmax, rms_norm, layer_norm, argmax/argmin).
- ``OpaqueDef``: a computation no loop nest over the output describes (rows
  written in place into a KV cache, sampling a token); the schedule rule of
  its kind writes the whole kernel. Pattern analysis and fusion see it as
  opaque.

A ``ComputeDef`` may carry, in ``attrs``, a hint that lets a schedule rule see
structure the loop nest hides: ``"matmul"`` (``MatmulInfo``), ``"transpose"``
(``TransposeInfo``), ``"quantized_matmul"`` (``QuantizedMatmulInfo`` in
``tir.quant``). The hints describe the computation; which rule runs, and how,
is decided by ``tir.schedule`` for the target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .. import arith
from .ir import FLOAT_DTYPES, INDEX, Buffer, Const, Local, Select, TExpr, binary, from_prim

# Tensor dtype -> the scalar type kernels compute with.
VALUE_DTYPE = {"float32": "f32", "float16": "f16", "float64": "f64", "int32": "i32", "uint32": "u32", "bool": "bool",
               "int64": "i32", "int8": "i32", "uint8": "u32", "int16": "i32", "uint16": "u32", "uint64": "u32"}
# Integer dtypes narrower than their 32-bit kernel type: bits per element. A kernel computes them
# in i32 or u32 and wraps each result it makes to the dtype's range (``wrap``), as numpy's integers
# wrap, before it is stored or read by a fused consumer.
NARROW_BITS = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16}


def wrap(value: TExpr, dtype: str) -> TExpr:
    """``value`` (of ``dtype``'s kernel type) wrapped into a narrow integer ``dtype``'s range, with
    the arithmetic every kernel language has (no bit operations in tir): an unsigned value modulo
    2**bits; a signed one, sign-extended from its low bits. Other dtypes pass unchanged."""
    bits = NARROW_BITS.get(dtype)
    if bits is None:
        return value
    span = Const(1 << bits, value.dtype)
    if value.dtype == "u32":
        return binary("%", value, span)
    low = binary("%", binary("+", binary("%", value, span), span), span)  # in [0, 2**bits)
    half = Const(1 << (bits - 1), "i32")
    return Select(binary(">=", low, half), binary("-", low, span), low, "i32")


@dataclass(frozen=True, eq=False)
class TensorRead(TExpr):
    """``buffer[indices...]`` before flattening; only compute definitions hold these."""

    buffer: Buffer
    indices: tuple[TExpr, ...]

    @property
    def dtype(self) -> str:
        return self.buffer.dtype


def placeholder(name: str, dtype: str, shape) -> Buffer:
    if dtype not in VALUE_DTYPE:
        raise ValueError(f"no kernel type for dtype {dtype}")
    return Buffer(name, VALUE_DTYPE[dtype], tuple(arith.as_expr(d) for d in shape), "global", dtype)


def read(buffer: Buffer, *indices) -> TensorRead:
    if len(indices) != len(buffer.shape):
        raise ValueError(f"{buffer.name} has rank {len(buffer.shape)}, read with {len(indices)} indices")
    return TensorRead(buffer, tuple(i if isinstance(i, TExpr) else Const(int(i)) for i in indices))


@dataclass(frozen=True)
class Reduction:
    extents: tuple[arith.PrimExpr, ...]
    combiner: str  # sum, prod, max, min
    init: float | int


@dataclass(eq=False)
class ComputeDef:
    """One output; ``body(spatial_indices)`` or, with ``reduction``, ``body(spatial, reduce)``."""

    name: str
    inputs: tuple[Buffer, ...]
    output: Buffer
    body: Callable
    reduction: Reduction | None = None
    finalize: Callable | None = None  # (accumulator, spatial indices) -> value
    accumulate_dtype: str = ""  # e.g. f32 for f16 sums
    attrs: dict = field(default_factory=dict)

    def axes(self) -> list[Local]:
        return [Local(f"i{k}") for k in range(len(self.output.shape))]

    def reduce_axes(self) -> list[Local]:
        return [Local(f"r{k}") for k in range(len(self.reduction.extents))] if self.reduction else []

    def value(self, axes, reduce_axes=None) -> TExpr:
        return self.body(axes, reduce_axes) if self.reduction else self.body(axes)


@dataclass(eq=False)
class RowDef:
    """A multi-pass reduction along one axis of ``x`` viewed as (outer, row, inner)."""

    name: str
    kind: str  # softmax, log_softmax, rms_norm, layer_norm, argmax, argmin
    inputs: tuple[Buffer, ...]  # x first, then per-row parameters (weight, bias)
    output: Buffer
    outer: arith.PrimExpr
    row: arith.PrimExpr
    inner: arith.PrimExpr
    epsilon: float = 0.0
    attrs: dict = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class MatmulInfo:
    """A batched (batch..., M, K) x (batch..., K, N) product: how a batch index finds its matrices
    (broadcast batch dimensions repeat a matrix)."""

    a: Buffer
    b: Buffer
    batch_shape: tuple[arith.PrimExpr, ...]
    m: arith.PrimExpr
    n: arith.PrimExpr
    k: arith.PrimExpr
    a_matrix: Callable[[list[TExpr]], TExpr]  # batch indices -> flat offset of A's matrix
    b_matrix: Callable[[list[TExpr]], TExpr]
    a_vector: bool = False  # a 1-D operand: the output has no row (or column) axis
    b_vector: bool = False


@dataclass(frozen=True, eq=False)
class TransposeInfo:
    """out[b, c, r] = in[b, r, c] for an input viewed as (batch, rows, cols)."""

    batch: arith.PrimExpr
    rows: arith.PrimExpr
    cols: arith.PrimExpr


# -- kernel value types ----------------------------------------------------------------


def accumulate_type(dtype: str) -> str:
    """Sums of f16 run in f32: 16-bit accumulators lose too much."""
    return "f32" if dtype == "f16" else dtype


def const(value, dtype):
    """``value`` as a constant of kernel type ``dtype``."""
    if dtype in FLOAT_DTYPES:
        return Const(float(value), dtype)
    if dtype == "bool":
        return Const(bool(value), "bool")
    return Const(int(value), dtype)


def lowest(dtype: str):
    """The identity of max for ``dtype``."""
    return {"f32": float("-inf"), "f16": float("-inf"), "f64": float("-inf"), "i32": -(2**31), "u32": 0}[dtype]


def highest(dtype: str):
    """The identity of min for ``dtype``."""
    return {"f32": float("inf"), "f16": float("inf"), "f64": float("inf"), "i32": 2**31 - 1, "u32": 2**32 - 1}[dtype]


@dataclass(eq=False)
class OpaqueDef:
    """The buffers and parameters of a computation that the schedule rule for ``kind`` writes whole."""

    name: str
    kind: str  # the rule: kv-cache-write, sample-token
    inputs: tuple[Buffer, ...]
    output: Buffer
    params: dict = field(default_factory=dict)  # what the rule needs beyond the buffers, by name
    more_outputs: tuple[Buffer, ...] = ()  # of an operator whose value is a tuple: fields 1, 2, ...


def row_major_index(indices, shape) -> TExpr:
    """Flat offset of ``indices`` in a contiguous row-major tensor of ``shape``."""
    flat: TExpr = Const(0)
    for index, dim in zip(indices, shape):
        flat = binary("+", binary("*", flat, from_prim(dim)), index)
    return flat


def unravel(flat: TExpr, shape) -> list[TExpr]:
    """Indices of the element at ``flat`` in row-major ``shape`` (the inverse of the above)."""
    indices: list[TExpr] = []
    rest = flat
    for dim in reversed(shape[1:]):
        d = from_prim(dim)
        indices.append(binary("%", rest, d))
        rest = binary("/", rest, d)
    indices.append(rest)
    return list(reversed(indices)) if shape else []


def index(value: int) -> Const:
    return Const(value, INDEX)
