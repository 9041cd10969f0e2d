"""quantized_matmul: x @ W^T with W in GGUF blocks, dequantized as it is read.

The weight is the raw block data of W (N rows of K values), each row's blocks
padded to a whole number of 32-bit words and viewed as uint32: shape
(N, ceil(K / values per block * block bytes / 4)). No dequantized copy of W
ever exists: every kernel computes a value from its block's bytes where it
needs it (tir/quant.py). Block layouts (ggml; d, m, dmin are f16):

- Q4_0, 32 values in 18 bytes: d, 16 bytes of 4-bit q; value = d * (q - 8)
- Q4_1, 20 bytes: d, m, 16 bytes of 4-bit q; value = d * q + m
- Q5_0, 22 bytes: d, 4 bytes of fifth bits, 16 bytes of 4-bit q; value = d * (q - 16)
- Q5_1, 24 bytes: d, m, fifth bits, 16 bytes; value = d * q + m
- Q8_0, 34 bytes: d, 32 signed bytes q; value = d * q

In those 32-value blocks the first 16 values are the low nibbles of the 16
bytes and the last 16 their high nibbles; value j's fifth bit is bit j of the
32-bit field. K-quants are super-blocks of 256 values with a scale (and
minimum) per sub-block, themselves quantized against the block's d (and dmin):

- Q2_K, 84 bytes: 16 bytes of 4-bit scale and minimum per 16 values, 64 bytes
  of 2-bit q, d, dmin; value = d * scale * q - dmin * min
- Q3_K, 110 bytes: 32 bytes of high bits, 64 bytes of 2-bit q, 12 bytes of
  6-bit scales per 16 values, d; value = d * (scale - 32) * (q - 4 * !high)
- Q4_K, 144 bytes: d, dmin, 12 bytes of 6-bit scales and minimums per 32
  values, 128 bytes of 4-bit q; value = d * scale * q - dmin * min
- Q5_K, 176 bytes: Q4_K's fields with 32 bytes of fifth bits before the q
- Q6_K, 210 bytes: 128 bytes of low 4 bits, 64 bytes of high 2 bits, 16
  signed 8-bit scales per 16 values, d; value = d * scale * (q - 32)

tir/quant.py says where each sub-block's bits sit. A K-quant needs K to be a
multiple of 256 (llama.cpp's quantizer falls back to Q5_0, Q5_1 or Q8_0 for
rows that are not).

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
from ..tir.quant import BLOCK_VALUES, FORMATS, QuantizedMatmulInfo, value_at
from .common import FLOAT_DTYPES, operands_vdevice, result_tensor, tensor_input
from .lowering import clamp_index
from .registry import register_op

# How x is read: as it is, or rounded to 8 bits in blocks (the module's docstring).
ACTIVATIONS = ("", "q8")
# The formats whose blocks meet q8 activations in this project's integer micro-kernels
# (codegen/c/microkernels.c, microkernels_kquant.c): every format the loader reads. llama.cpp rounds
# x for its K-quants to blocks of 256 with one scale (q8_K); blocks of 32 keep one rounding of x for
# every format of a model (Q4_K_M mixes Q4_K, Q6_K, Q5_0 and Q8_0) and round it more finely.
# transform.quantize_activations rounds the activations of these only.
Q8_ACTIVATION_FORMATS = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k")


def row_words(format: str, k) -> arith.PrimExpr:
    return arith.IntImm(FORMATS[format].row_words(int(k)))


def _check_blocks(name: str, call, arg, w, ctx) -> None:
    """The format is one kernels read, K a whole number of its blocks, and ``w`` (the struct info of
    ``arg``) uint32 words, as many per row as a row of K values of the format fills."""
    fmt, k = call.attr("format"), call.attr("k")
    if fmt not in FORMATS:
        raise DeductionError("invalid attribute", f"{name} format {fmt!r} is not one of {', '.join(FORMATS)}")
    if w.dtype and w.dtype != "uint32":
        raise DeductionError("dtype mismatch", f"{name} needs the weight's blocks as uint32 words, "
                             f"{ctx.show(arg)} is {w.dtype}")
    values = FORMATS[fmt].values
    if not isinstance(k, int) or k <= 0 or k % values:
        raise DeductionError("invalid attribute", f"{name} needs K as a multiple of {values} for {fmt}, got {k}")
    if w.shape is not None:
        words = ctx.analyzer.as_int(w.shape[1])
        if words is not None and words != FORMATS[fmt].row_words(k):
            raise DeductionError("shape mismatch", f"{ctx.show(arg)} has {words} words per row, a {fmt} row of "
                                 f"K = {k} has {FORMATS[fmt].row_words(k)}")


def _deduce(call, ctx):
    x, w = tensor_input(call, 0, ctx), tensor_input(call, 1, ctx)
    k = call.attr("k")
    if x.dtype and x.dtype not in FLOAT_DTYPES:
        raise DeductionError("dtype mismatch", f"quantized_matmul needs float activations, {ctx.show(call.args[0])} "
                             f"is {x.dtype}")
    _check_blocks("quantized_matmul", call, call.args[1], w, ctx)
    if call.attr("activations") not in ACTIVATIONS:
        raise DeductionError("invalid attribute", f"quantized_matmul activations {call.attr('activations')!r} is "
                             f"not one of {', '.join(repr(a) for a in ACTIVATIONS)}")
    dtype = call.attr("out_dtype") or x.dtype
    vdevice = operands_vdevice(call, ctx)
    if x.shape is None or w.shape is None:
        return result_tensor(None, dtype, x.ndim, vdevice)
    last = ctx.analyzer.as_int(x.shape[-1])
    if last is not None and last != k:
        raise DeductionError("shape mismatch", f"{ctx.show(call.args[0])} has K = {last}, the weight has K = {k}")
    return result_tensor(tuple(x.shape[:-1]) + (w.shape[0],), dtype, vdevice=vdevice)


# -- numpy reference ---------------------------------------------------------------------


def dequantize(words: np.ndarray, fmt: str, k: int) -> np.ndarray:
    """W (N, K) as float32 from its blocks, by ggml's own dequantization (the gguf package)."""
    import gguf

    f = FORMATS[fmt]
    blocks = np.ascontiguousarray(words).view(np.uint8)[:, :k // f.values * f.bytes]
    return gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[fmt.upper()]).reshape(words.shape[0], k)


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

        return binary("*", read_x(idx[:-1], kk), value_at(fmt, lambda i: read(w, n, i), kk))

    info = QuantizedMatmulInfo(x, w, fmt, k, activations)
    return ComputeDef(ctx.kernel_name, (x, w), out, body, Reduction((arith.IntImm(k),), "sum", 0.0),
                      accumulate_dtype=acc, attrs={"quantized_matmul": info})


register_op("quantized_matmul", inputs=("x", "weight"),
            attrs={"format": "q4_1", "k": 0, "out_dtype": "", "activations": ""},
            deduce=_deduce, reference=_reference, legalize=_legalize, precision="always")


# -- quantized_take: rows of a quantized table (embeddings) -------------------------------------


def _deduce_take(call, ctx):
    w, ids = tensor_input(call, 0, ctx), tensor_input(call, 1, ctx)
    _check_blocks("quantized_take", call, call.args[0], w, ctx)
    if ids.dtype and ids.dtype not in ("int32", "int64"):
        raise DeductionError("dtype mismatch", f"quantized_take needs integer indices, {ctx.show(call.args[1])} "
                             f"is {ids.dtype}")
    k = call.attr("k")
    dtype = call.attr("out_dtype") or "float32"
    vdevice = operands_vdevice(call, ctx)
    if ids.shape is None:
        return result_tensor(None, dtype, -1 if ids.ndim < 0 else ids.ndim + 1, vdevice)
    return result_tensor(tuple(ids.shape) + (arith.IntImm(k),), dtype, vdevice=vdevice)


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

        return cast(value_at(fmt, lambda i: read(w, row, i), idx[-1]), out.dtype)

    return ComputeDef(ctx.kernel_name, (w, ids), out, body)


register_op("quantized_take", inputs=("weight", "indices"), attrs={"format": "q8_0", "k": 0, "out_dtype": ""},
            deduce=_deduce_take, reference=_take_reference, legalize=_legalize_take)
