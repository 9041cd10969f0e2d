"""quantized_matmul: x @ W^T with W in GGUF blocks (Q4_0, Q4_1, Q8_0), dequantized as it is read.

The weight is the raw block data of W (N rows of K values), viewed as uint32
words: shape (N, K / 32 * block bytes / 4). No dequantized copy of W ever
exists: every kernel computes a value from its block's bytes where it needs
it. Block layouts (ggml):

- Q4_0, 18 bytes: f16 scale d, then 16 bytes of 4-bit q; value = d * (q - 8)
- Q4_1, 20 bytes: f16 scale d, f16 minimum m, then 16 bytes; value = d * q + m
- Q8_0, 34 bytes: f16 scale d, then 32 signed bytes q; value = d * q

In a 4-bit block the first 16 values are the low nibbles of the 16 bytes and
the last 16 their high nibbles.

``activations="q8"`` rounds x first, in blocks of 32 along K, to 8-bit integers with a float
scale, as llama.cpp's CPU kernels do, so that a CPU computes the dot products in integer SIMD:
d = max|x| / 127, q = round-half-even(x * (1 / d)) (0 where d is 0), and x is read as q * d.
Each step is one f32 operation, so every kernel and this reference round x identically. The
default (``""``) reads x as it is. ``transform.quantize_activations`` sets it for targets whose
kind asks for it (docs/format.md).
"""

from __future__ import annotations

import numpy as np

from .. import arith
from ..ir.errors import DeductionError
from ..tir.compute import ComputeDef, Reduction, read
from ..tir.ir import Const, binary, cast, intrinsic, maximum, select
from ..tir.quant import BLOCK_BYTES, BLOCK_VALUES, QuantizedMatmulInfo, block_scale, block_value
from .common import FLOAT_DTYPES, result_tensor, tensor_input
from .lowering import clamp_index
from .registry import register_op

# How x is read: as it is, or rounded to 8 bits in blocks (the module's docstring).
ACTIVATIONS = ("", "q8")


def row_words(format: str, k) -> arith.PrimExpr:
    return arith.simplify(arith.as_expr(k) // BLOCK_VALUES * BLOCK_BYTES[format] // 4)


def _deduce(call, ctx):
    x, w = tensor_input(call, 0, ctx), tensor_input(call, 1, ctx)
    fmt, k = call.attr("format"), call.attr("k")
    if fmt not in BLOCK_BYTES:
        raise DeductionError("invalid attribute", f"quantized_matmul format {fmt!r} is not one of "
                             f"{', '.join(BLOCK_BYTES)}")
    if x.dtype and x.dtype not in FLOAT_DTYPES:
        raise DeductionError("dtype mismatch", f"quantized_matmul needs float activations, {ctx.show(call.args[0])} "
                             f"is {x.dtype}")
    if w.dtype and w.dtype != "uint32":
        raise DeductionError("dtype mismatch", f"quantized_matmul needs the weight's blocks as uint32 words, "
                             f"{ctx.show(call.args[1])} is {w.dtype}")
    if not isinstance(k, int) or k % (2 * BLOCK_VALUES):
        raise DeductionError("invalid attribute", f"quantized_matmul needs K as a multiple of 64, got {k}")
    if call.attr("activations") not in ACTIVATIONS:
        raise DeductionError("invalid attribute", f"quantized_matmul activations {call.attr('activations')!r} is "
                             f"not one of {', '.join(repr(a) for a in ACTIVATIONS)}")
    if w.shape is not None:
        words = ctx.analyzer.as_int(w.shape[1])
        if words is not None and words != k // BLOCK_VALUES * BLOCK_BYTES[fmt] // 4:
            raise DeductionError("shape mismatch", f"{ctx.show(call.args[1])} has {words} words per row, a {fmt} "
                                 f"row of K = {k} has {k // BLOCK_VALUES * BLOCK_BYTES[fmt] // 4}")
    dtype = call.attr("out_dtype") or x.dtype
    if x.shape is None or w.shape is None:
        return result_tensor(None, dtype, x.ndim, x.vdevice)
    last = ctx.analyzer.as_int(x.shape[-1])
    if last is not None and last != k:
        raise DeductionError("shape mismatch", f"{ctx.show(call.args[0])} has K = {last}, the weight has K = {k}")
    return result_tensor(tuple(x.shape[:-1]) + (w.shape[0],), dtype, vdevice=x.vdevice)


# -- numpy reference ---------------------------------------------------------------------


def dequantize(words: np.ndarray, fmt: str, k: int) -> np.ndarray:
    """W (N, K) as float32 from its blocks."""
    raw = np.ascontiguousarray(words).view(np.uint8).reshape(words.shape[0], -1, BLOCK_BYTES[fmt])
    d = raw[..., 0:2].copy().view(np.float16).astype(np.float32)  # (N, blocks, 1)
    if fmt == "q8_0":
        q = raw[..., 2:34].view(np.int8).astype(np.float32)
        values = d * q
    else:
        offset = 2 if fmt == "q4_0" else 4
        packed = raw[..., offset:offset + 16]
        q = np.concatenate([packed & 15, packed >> 4], axis=-1).astype(np.float32)
        if fmt == "q4_0":
            values = d * (q - 8)
        else:
            m = raw[..., 2:4].copy().view(np.float16).astype(np.float32)
            values = d * q + m
    return values.reshape(words.shape[0], k)


def round_activations_q8(x: np.ndarray) -> np.ndarray:
    """x as ``activations="q8"`` reads it: rounded in blocks of 32 along the last axis, in f32."""
    blocks = np.asarray(x, np.float32).reshape(*x.shape[:-1], -1, BLOCK_VALUES)
    scale = np.max(np.abs(blocks), axis=-1, keepdims=True) / np.float32(127)
    inverse = np.divide(np.float32(1), scale, out=np.zeros_like(scale), where=scale != 0)
    return (np.rint(blocks * inverse) * scale).astype(np.float32).reshape(x.shape)


def _reference(x, weight, format, k, out_dtype, activations=""):
    w = dequantize(weight, format, k).astype(np.float64)
    read = round_activations_q8(x) if activations == "q8" else x
    return (read.astype(np.float64) @ w.T).astype(out_dtype or x.dtype)


# -- kernels -------------------------------------------------------------------------------


def _legalize(call, ctx):
    x, w = ctx.inputs
    out = ctx.output
    fmt, k, activations = call.attr("format"), call.attr("k"), call.attr("activations")
    acc = "f32"

    def read_x(rows, kk):
        value = cast(read(x, *rows, kk), acc)
        if activations != "q8":
            return value
        # The rounding of x's block, computed where it is read: 32 reads per value, so rules that
        # matter (quantized_gemv) take x whole instead; this body serves every other one.
        start = binary("*", binary("/", kk, Const(BLOCK_VALUES)), Const(BLOCK_VALUES))
        # A balanced tree of max: C's max() is a macro over _Generic that repeats its first
        # operand, so a chain 32 deep would expand 2^31 times.
        level = [intrinsic("abs", cast(read(x, *rows, binary("+", start, Const(j))), acc))
                 for j in range(BLOCK_VALUES)]
        while len(level) > 1:
            level = [maximum(a, b) for a, b in zip(level[::2], level[1::2])]
        amax = level[0]
        scale = binary("/", amax, Const(127.0, acc))
        inverse = select(binary("!=", scale, Const(0.0, acc)), binary("/", Const(1.0, acc), scale), Const(0.0, acc))
        return binary("*", intrinsic("round", binary("*", value, inverse)), scale)

    def body(idx, ridx):
        (kk,) = ridx
        n = idx[-1]

        def word_at(i):
            return read(w, n, i)

        block = binary("/", kk, Const(BLOCK_VALUES))
        d, m = block_scale(fmt, word_at, block)
        value = block_value(fmt, word_at, block, binary("%", kk, Const(BLOCK_VALUES)), d, m)
        return binary("*", read_x(idx[:-1], kk), value)

    info = QuantizedMatmulInfo(x, w, fmt, k, activations)
    return ComputeDef(ctx.kernel_name, (x, w), out, body, Reduction((arith.IntImm(k),), "sum", 0.0),
                      accumulate_dtype=acc, attrs={"quantized_matmul": info})


register_op("quantized_matmul", inputs=("x", "weight"),
            attrs={"format": "q4_1", "k": 0, "out_dtype": "", "activations": ""},
            deduce=_deduce, reference=_reference, legalize=_legalize)


# -- quantized_take: rows of a quantized table (embeddings) -------------------------------------


def _deduce_take(call, ctx):
    w, ids = tensor_input(call, 0, ctx), tensor_input(call, 1, ctx)
    if w.dtype and w.dtype != "uint32":
        raise DeductionError("dtype mismatch", f"quantized_take needs the table's blocks as uint32 words, "
                             f"{ctx.show(call.args[0])} is {w.dtype}")
    if ids.dtype and ids.dtype not in ("int32", "int64"):
        raise DeductionError("dtype mismatch", f"quantized_take needs integer indices, {ctx.show(call.args[1])} "
                             f"is {ids.dtype}")
    k = call.attr("k")
    dtype = call.attr("out_dtype") or "float32"
    if ids.shape is None:
        return result_tensor(None, dtype, -1 if ids.ndim < 0 else ids.ndim + 1)
    return result_tensor(tuple(ids.shape) + (arith.IntImm(k),), dtype)


def _take_reference(weight, ids, format, k, out_dtype):
    table = dequantize(weight, format, k)
    return table[ids].astype(out_dtype or "float32")


def _legalize_take(call, ctx):
    w, ids = ctx.inputs
    out = ctx.output
    fmt = call.attr("format")

    def body(idx):
        row = read(ids, *idx[:-1])
        row = clamp_index(cast(row, "i32"), w.shape[0])

        def word_at(i):
            return read(w, row, i)

        kk = idx[-1]
        block = binary("/", kk, Const(BLOCK_VALUES))
        d, m = block_scale(fmt, word_at, block)
        return cast(block_value(fmt, word_at, block, binary("%", kk, Const(BLOCK_VALUES)), d, m), out.dtype)

    return ComputeDef(ctx.kernel_name, (w, ids), out, body)


register_op("quantized_take", inputs=("weight", "indices"), attrs={"format": "q8_0", "k": 0, "out_dtype": ""},
            deduce=_deduce_take, reference=_take_reference, legalize=_legalize_take)
