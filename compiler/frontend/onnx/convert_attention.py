"""Attention (opsets 23-25): scaled dot-product attention with grouped heads, past keys and values,
an external cache (nonpad_kv_seqlen), masks, causal and sliding-window bias, softcap and a softmax
precision, as ONNX's reference computes it."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import Constant
from .convert_common import FLOATS, const, require_float
from .loader import DTYPES
from .registry import NodeContext, converter

# -- attention (opset 23) -------------------------------------------------------------------------


def _allowed_bias(allowed, dtype: str):
    """0 where ``allowed`` (a bool constant or expression), -inf elsewhere."""
    if isinstance(allowed, np.ndarray):
        return Constant(np.where(allowed, 0.0, -np.inf).astype(dtype))
    return R.where(allowed, const(0.0, dtype), const(-np.inf, dtype))


def _attention_bias(ctx: NodeContext, q_len: int, kv_len: int, offset, nonpad):
    """The additive bias (a constant or an expression, (…, q, kv)) from attn_mask, is_causal, the
    sliding window and nonpad_kv_seqlen; None when there is none of them. A mask shorter than the
    keys is padded with False / -inf. ``offset`` is where the queries start among the keys: an int
    (the past length), or with nonpad_kv_seqlen a (batch, 1, 1, 1) int64 expression
    nonpad_kv_seqlen - q_len, so that causal and window masks align per batch row."""
    dtype = ctx.dtype(0)
    terms = []
    if ctx.has_input(3):
        mask = ctx.input(3)
        mask_dims = ctx.static_dims(3, "Attention's mask")
        missing = kv_len - mask_dims[-1]
        if ctx.dtype(3) == "bool":
            mask = R.where(mask, const(0.0, dtype), const(-np.inf, dtype))
        if missing > 0:
            block = Constant(np.full((*mask_dims[:-1], missing), -np.inf, dtype=dtype))
            mask = R.concat([mask, block], axis=len(mask_dims) - 1)
        terms.append(mask)
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    # The query's position among the keys, minus the key's: (q, kv), or (batch, 1, q, kv).
    if isinstance(offset, int):
        diff = i + offset - j
    else:
        diff = R.subtract(R.add(const(i, "int64"), offset), const(j, "int64"))
    limits = []
    if ctx.attr("is_causal", 0):
        limits.append(("ge", 0))
    left, right = ctx.attr("left_window_size", -1), ctx.attr("right_window_size", -1)
    if left >= 0:
        limits.append(("le", left))
    if right >= 0:
        limits.append(("ge", -right))
    for kind, bound in limits:
        if isinstance(diff, np.ndarray):
            allowed = diff >= bound if kind == "ge" else diff <= bound
        else:
            compare = R.greater_equal if kind == "ge" else R.less_equal
            allowed = compare(diff, const(bound, "int64"))
        terms.append(_allowed_bias(allowed, dtype))
    if nonpad is not None:  # keys at or past each row's nonpad_kv_seqlen are padding
        terms.append(_allowed_bias(R.less(const(j, "int64"), nonpad), dtype))
    bias = None
    for term in terms:
        bias = term if bias is None else R.add(bias, term)
    return bias


@converter("Attention", since=23, attrs=("is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode",
                                         "scale", "softcap", "softmax_precision", "left_window_size",
                                         "right_window_size"))
def _attention(ctx: NodeContext):
    """Scaled dot-product attention as ONNX's reference computes it: sqrt(scale) on Q and K, past
    keys and values prepended, grouped heads repeated, the softcap before the bias, a softmax that
    gives 0 on rows the bias masks entirely."""
    require_float(ctx)
    dtype = ctx.dtype(0)
    for name in ("left_window_size", "right_window_size"):
        if ctx.attr(name, -1) < -1:
            raise ctx.error(f"{name}={ctx.attr(name)}: a window size is -1 or at least 0", "invalid")
    softmax_dtype = dtype
    if ctx.attr("softmax_precision") is not None:
        code = int(ctx.attr("softmax_precision"))
        softmax_dtype = DTYPES.get(code)
        if softmax_dtype not in FLOATS:
            raise ctx.error(f"softmax_precision {code} is not supported (float16, float32 or float64)")
    if ctx.has_input(6) and ctx.has_input(4):
        raise ctx.error("nonpad_kv_seqlen cannot be combined with past_key and past_value", "invalid")
    if ctx.has_input(4) != ctx.has_input(5):
        raise ctx.error("past_key and past_value must be given together", "invalid")
    rank = ctx.rank(0)
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    if rank == 3:
        heads = {"q": ctx.attr("q_num_heads"), "kv": ctx.attr("kv_num_heads")}
        if None in heads.values():
            raise ctx.error("3-D inputs need q_num_heads and kv_num_heads", "invalid")

        def split_heads(x, index, count):
            b, s, hidden = ctx.static_dims(index, "Attention")
            return ctx.emit(R.permute_dims(R.reshape(x, (b, s, count, hidden // count)), axes=(0, 2, 1, 3)))

        q, k, v = split_heads(q, 0, heads["q"]), split_heads(k, 1, heads["kv"]), split_heads(v, 2, heads["kv"])
    elif rank != 4:
        raise ctx.error(f"Q has rank {rank}; Attention takes rank 3 or 4", "invalid")
    q_dims = q.struct_info.shape
    batch, q_heads, q_len, head = (int(d.value) for d in q_dims)
    scale = ctx.attr("scale")
    scale = float(np.sqrt(1.0 / np.sqrt(head) if scale is None else scale))
    past = 0
    if ctx.has_input(4):
        past = ctx.static_dims(4, "Attention")[2]
        k = ctx.emit(R.concat([ctx.input(4), k], axis=2))
        v = ctx.emit(R.concat([ctx.input(5), v], axis=2))
    present_k, present_v = k, v
    kv_heads, kv_len = (int(d.value) for d in k.struct_info.shape[1:3])
    if q_heads != kv_heads:
        if q_heads % kv_heads:
            raise ctx.error(f"{q_heads} query heads do not group over {kv_heads} key heads", "invalid")

        def repeat(x):
            dims = [int(d.value) for d in x.struct_info.shape]
            wide = R.broadcast_to(R.expand_dims(x, axis=2), (dims[0], dims[1], q_heads // kv_heads, *dims[2:]))
            return ctx.emit(R.reshape(wide, (dims[0], q_heads, *dims[2:])))

        k, v = repeat(k), repeat(v)
    scale_c = const(scale, dtype)
    scores = ctx.emit(R.matmul(R.multiply(q, scale_c),
                               R.permute_dims(R.multiply(k, scale_c), axes=(0, 1, 3, 2))))
    softcap = ctx.attr("softcap")
    if softcap is not None and softcap > 0:
        cap = const(softcap, dtype)
        scores = ctx.emit(R.multiply(R.tanh(R.divide(scores, cap)), cap))
    offset, nonpad = past, None
    if ctx.has_input(6):  # an external cache: row b holds nonpad_kv_seqlen[b] keys, queries last among them
        nonpad = R.reshape(R.astype(ctx.input(6), dtype="int64"), (batch, 1, 1, 1))
        offset = R.subtract(nonpad, const(q_len, "int64"))
    bias = _attention_bias(ctx, q_len, kv_len, offset, nonpad)
    biased = ctx.emit(R.add(scores, bias)) if bias is not None else scores
    # A softmax safe on rows masked entirely (all -inf): those rows become 0. It runs in
    # softmax_precision where that differs from the inputs' dtype, as ONNX's reference casts.
    logits = biased if softmax_dtype == dtype else R.astype(biased, dtype=softmax_dtype)
    peak = R.max(logits, axis=(3,), keepdims=True)
    peak = R.where(R.equal(peak, const(-np.inf, softmax_dtype)), const(0.0, softmax_dtype), peak)
    weights = R.exp(R.subtract(logits, peak))
    total = R.sum(weights, axis=(3,), keepdims=True)
    total = R.where(R.equal(total, const(0.0, softmax_dtype)), const(1.0, softmax_dtype), total)
    probs = ctx.emit(R.divide(weights, total))
    if bias is not None:
        bias_peak = R.max(R.add(bias, Constant(np.zeros((q_len, kv_len), dtype=dtype))), axis=(-1,), keepdims=True)
        probs = ctx.emit(R.where(R.equal(bias_peak, const(-np.inf, dtype)), const(0.0, softmax_dtype), probs))
    if softmax_dtype != dtype:
        probs = ctx.emit(R.astype(probs, dtype=dtype))
    y = R.matmul(probs, v)
    if rank == 3:
        y = R.reshape(R.permute_dims(y, axes=(0, 2, 1, 3)), (batch, q_len, -1))
    mode = ctx.attr("qk_matmul_output_mode", 0)
    qk_out = {0: scores, 1: scores, 2: biased, 3: probs}.get(mode)
    if qk_out is None:
        raise ctx.error(f"qk_matmul_output_mode={mode} is not supported", "invalid")
    return [y, present_k, present_v, qk_out]


