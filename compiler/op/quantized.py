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
"""

from __future__ import annotations

import numpy as np

from .. import arith
from ..ir.errors import DeductionError
from ..tir.compute import ComputeDef, Reduction, read
from ..tir.ir import Const, binary, cast
from ..tir.quant import BLOCK_BYTES, BLOCK_VALUES, QuantizedMatmulInfo, block_scale, block_value
from .common import FLOAT_DTYPES, result_tensor, tensor_input
from .lowering import clamp_index
from .registry import register_op


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


def _reference(x, weight, format, k, out_dtype):
    w = dequantize(weight, format, k).astype(np.float64)
    return (x.astype(np.float64) @ w.T).astype(out_dtype or x.dtype)


# -- kernels -------------------------------------------------------------------------------


def _legalize(call, ctx):
    x, w = ctx.inputs
    out = ctx.output
    fmt, k = call.attr("format"), call.attr("k")
    acc = "f32"

    def body(idx, ridx):
        (kk,) = ridx
        n = idx[-1]

        def word_at(i):
            return read(w, n, i)

        block = binary("/", kk, Const(BLOCK_VALUES))
        d, m = block_scale(fmt, word_at, block)
        value = block_value(fmt, word_at, block, binary("%", kk, Const(BLOCK_VALUES)), d, m)
        return binary("*", cast(read(x, *idx[:-1], kk), acc), value)

    info = QuantizedMatmulInfo(x, w, fmt, k)
    return ComputeDef(ctx.kernel_name, (x, w), out, body, Reduction((arith.IntImm(k),), "sum", 0.0),
                      accumulate_dtype=acc, attrs={"quantized_matmul": info})


register_op("quantized_matmul", inputs=("x", "weight"), attrs={"format": "q4_1", "k": 0, "out_dtype": ""},
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
