"""The newer transformer-family ops (RotaryEmbedding, SwiGLU, TensorScatter, CausalConvWithState,
LinearAttention), each composed from the IR's operators as ONNX's reference computes it."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import TupleGetItem
from .convert_common import const, require_float
from .registry import NodeContext, converter


def _text(ctx: NodeContext, name: str, default: str) -> str:
    value = ctx.attr(name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def _require_same_dtype(ctx: NodeContext, indices) -> None:
    for index in indices:
        if ctx.has_input(index) and ctx.dtype(index) != ctx.dtype(0):
            raise ctx.error(f"input {index} is {ctx.dtype(index)}, input 0 is {ctx.dtype(0)}; they must match",
                            "invalid")


# -- SwiGLU (opset 28) ----------------------------------------------------------------------------


@converter("SwiGLU", since=28, attrs=("alpha",))
def _swiglu(ctx: NodeContext):
    """a * sigmoid(alpha * a) * b, in the inputs' dtype; A and B have one shape (no broadcasting)."""
    require_float(ctx)
    _require_same_dtype(ctx, (1,))
    if ctx.dims(0) != ctx.dims(1) and ctx.static_dims(0, "SwiGLU") != ctx.static_dims(1, "SwiGLU"):
        raise ctx.error("A and B must have the same shape (SwiGLU does not broadcast)", "invalid")
    a, b = ctx.input(0), ctx.input(1)
    gate = R.sigmoid(R.multiply(a, const(ctx.attr("alpha", 1.0), ctx.dtype(0))))
    return R.multiply(R.multiply(a, gate), b)


# -- RotaryEmbedding (opset 23) -------------------------------------------------------------------


@converter("RotaryEmbedding", since=23, attrs=("interleaved", "num_heads", "rotary_embedding_dim"))
def _rotary_embedding(ctx: NodeContext):
    """Rotates the first rotary_embedding_dim features of each head by the cached angles of its
    position: halves (x1, x2) or, interleaved, even and odd features, become
    (cos x1 - sin x2, sin x1 + cos x2). Works in the input's layout: (B, H, S, D) as it is, and
    (B, S, H*D) as (B, S, H, D); cos and sin are laid out to broadcast over the heads."""
    require_float(ctx)
    _require_same_dtype(ctx, (1, 2))
    rank = ctx.rank(0)
    x = ctx.input(0)
    if rank == 3:
        heads = ctx.attr("num_heads", 0)
        batch, seq, hidden = ctx.static_dims(0, "RotaryEmbedding")
        if not heads or hidden % heads:
            raise ctx.error(f"a 3-D input needs num_heads dividing its hidden size {hidden}", "invalid")
        x = R.reshape(x, (batch, seq, heads, hidden // heads))
        head_axis = 2  # (B, S, H, D): the angles, (B, S, half), broadcast at axis 2
    elif rank == 4:
        batch, _, seq, _ = ctx.static_dims(0, "RotaryEmbedding")
        head_axis = 1  # (B, H, S, D)
    else:
        raise ctx.error(f"the input has rank {rank}; RotaryEmbedding takes rank 3 or 4", "invalid")
    x = ctx.emit(x)
    dims = [int(d.value) for d in x.struct_info.shape]
    head = dims[3]
    rotary = ctx.attr("rotary_embedding_dim", 0) or head
    if rotary % 2 or rotary > head:
        raise ctx.error(f"rotary_embedding_dim {rotary} must be even and at most the head size {head}", "invalid")
    half = rotary // 2
    cos, sin = ctx.input(1), ctx.input(2)
    if ctx.has_input(3):  # position ids (B, S) pick rows of the (max_position, half) caches
        cache = ctx.static_dims(1, "RotaryEmbedding")
        ids = R.clip(R.astype(ctx.input(3), dtype="int64"), min=0, max=cache[0] - 1)
        cos, sin = R.take(cos, ids, axis=0), R.take(sin, ids, axis=0)
    elif ctx.rank(1) != 3:
        raise ctx.error("without position_ids the caches must be (batch, sequence, rotary_dim / 2)", "invalid")
    if ctx.static_dims(1, "RotaryEmbedding")[-1] != half or ctx.static_dims(2, "RotaryEmbedding")[-1] != half:
        raise ctx.error(f"the caches' last dimension must be rotary_embedding_dim / 2 = {half}", "invalid")
    # Each rotated feature f is cos * x[f] + sign * sin * x[partner(f)], the partner being the
    # other half of its pair: the same products and sums as (cos x1 - sin x2, sin x1 + cos x2)
    # (a - b is a + (-b); the sums commute), as one gather of x and elementwise ops.
    features = np.arange(rotary)
    if ctx.attr("interleaved", 0):
        angle, partner, sign = features // 2, features ^ 1, np.where(features % 2, 1.0, -1.0)
    else:
        angle, partner, sign = features % half, (features + half) % rotary, np.where(features < half, -1.0, 1.0)
    dtype = ctx.dtype(0)
    cos = ctx.emit(R.expand_dims(R.take(cos, const(angle, "int64"), axis=-1), axis=head_axis))
    sin = R.expand_dims(R.take(sin, const(angle, "int64"), axis=-1), axis=head_axis)
    sin = ctx.emit(R.multiply(sin, const(sign, dtype)))
    rotate = x if rotary == head else R.strided_slice(x, axes=(3,), begin=(0,), end=(rotary,))
    rotate = ctx.emit(rotate)
    rotated = R.add(R.multiply(cos, rotate), R.multiply(sin, R.take(rotate, const(partner, "int64"), axis=3)))
    if rotary < head:
        rotated = R.concat([rotated, R.strided_slice(x, axes=(3,), begin=(rotary,), end=(head,))], axis=3)
    return R.reshape(rotated, (batch, seq, -1)) if rank == 3 else rotated


# -- TensorScatter (opset 24) ---------------------------------------------------------------------


@converter("TensorScatter", since=24, attrs=("axis", "mode"))
def _tensor_scatter(ctx: NodeContext):
    """A cache update: row b of ``update`` is written into ``past_cache`` along ``axis`` from
    write_indices[b] on (wrapping around in circular mode). Computed as a gather: each cache slot
    j takes update slot (j - write_indices[b]) (mod the cache length) where that is one, else
    keeps the past value, so that write_indices may be data at run time."""
    mode = _text(ctx, "mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.error(f"mode {mode!r} is not supported (linear or circular)", "invalid")
    _require_same_dtype(ctx, (1,))
    past_dims = ctx.static_dims(0, "TensorScatter")
    update_dims = ctx.static_dims(1, "TensorScatter")
    rank = len(past_dims)
    axis = ctx.attr("axis", -2)
    if not -rank <= axis < rank or len(update_dims) != rank:
        raise ctx.error(f"axis {axis} or the update's rank {len(update_dims)} does not fit the cache's rank {rank}",
                        "invalid")
    axis %= rank
    if axis == 0:
        raise ctx.error("axis 0 is the batch axis; TensorScatter writes along a later one", "invalid")
    cache_len, update_len = past_dims[axis], update_dims[axis]
    if any(p != u for i, (p, u) in enumerate(zip(past_dims, update_dims)) if i != axis) or update_len > cache_len:
        raise ctx.error(f"update shape {update_dims} does not fit cache shape {past_dims} along axis {axis}",
                        "invalid")
    batch = past_dims[0]
    middle = int(np.prod(past_dims[1:axis], dtype=np.int64))
    inner = int(np.prod(past_dims[axis + 1:], dtype=np.int64))
    if ctx.has_input(2):
        starts = R.reshape(R.astype(ctx.input(2), dtype="int64"), (batch, 1, 1))
    else:
        starts = const(np.zeros((batch, 1, 1)), "int64")
    slots = const(np.arange(cache_len).reshape(1, 1, cache_len), "int64")
    if mode == "circular":  # starts reduced into [0, cache_len) first: then one wrap suffices
        length = const(cache_len, "int64")
        starts = R.subtract(starts, R.multiply(R.floor_divide(starts, length), length))
        source = R.subtract(slots, starts)
        source = R.where(R.less(source, const(0, "int64")), R.add(source, length), source)
    else:
        source = R.subtract(slots, starts)
    source = ctx.emit(source)  # (batch, 1, cache_len): which update slot each cache slot takes
    written = R.logical_and(R.greater_equal(source, const(0, "int64")), R.less(source, const(update_len, "int64")))
    rows = R.add(R.clip(source, min=0, max=update_len - 1),
                 const((np.arange(batch * middle) * update_len).reshape(batch, middle, 1), "int64"))
    table = R.reshape(ctx.input(1), (batch * middle * update_len, inner))
    taken = R.take(table, rows, axis=0)  # (batch, middle, cache_len, inner)
    past = R.reshape(ctx.input(0), (batch, middle, cache_len, inner))
    present = R.where(R.expand_dims(written, axis=3), taken, past)
    return R.reshape(present, past_dims)


# -- CausalConvWithState (opset 27) ---------------------------------------------------------------


@converter("CausalConvWithState", since=27, attrs=("activation",))
def _causal_conv_with_state(ctx: NodeContext):
    """A depthwise causal 1-D convolution over (B, C, L) whose left context is past_state (zeros
    when absent), an optional SiLU computed in float32, and the last k - 1 positions of the padded
    input as present_state."""
    require_float(ctx)
    _require_same_dtype(ctx, (1, 2, 3))
    activation = _text(ctx, "activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise ctx.error(f"activation {activation!r} is not supported (none, silu or swish)", "invalid")
    dtype = ctx.dtype(0)
    batch, channels, length = ctx.static_dims(0, "CausalConvWithState")
    weight_dims = ctx.static_dims(1, "CausalConvWithState")
    if len(weight_dims) != 3 or weight_dims[:2] != (channels, 1):
        raise ctx.error(f"weight has shape {weight_dims}; ({channels}, 1, k) is needed", "invalid")
    k = weight_dims[2]
    x = ctx.input(0)
    if k > 1:
        if ctx.has_input(3):
            if ctx.static_dims(3, "CausalConvWithState") != (batch, channels, k - 1):
                raise ctx.error(f"past_state must have shape ({batch}, {channels}, {k - 1})", "invalid")
            left = ctx.input(3)
        else:
            left = const(np.zeros((batch, channels, k - 1)), dtype)
        padded = ctx.emit(R.concat([left, x], axis=2))
    else:
        padded = x
    conv = R.nn.conv2d(R.reshape(padded, (batch, channels, 1, length + k - 1)),
                       R.reshape(ctx.input(1), (channels, 1, 1, k)), groups=channels)
    out = R.reshape(conv, (batch, channels, length))
    if ctx.has_input(2):
        out = R.add(out, R.reshape(ctx.input(2), (1, channels, 1)))
    if activation != "none":
        wide = ctx.emit(R.astype(out, dtype="float32") if dtype != "float32" else out)
        out = R.multiply(wide, R.sigmoid(wide))
        out = R.astype(out, dtype=dtype) if dtype != "float32" else out
    if k > 1:
        state = R.strided_slice(padded, axes=(2,), begin=(length,), end=(length + k - 1,))
    else:
        state = const(np.zeros((batch, channels, 0)), dtype)
    return [out, state]


# -- LinearAttention (opset 27) -------------------------------------------------------------------

_UPDATE_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True),
                 "gated_delta": (True, True)}


@converter("LinearAttention", since=27, attrs=("chunk_size", "kv_num_heads", "q_num_heads", "scale",
                                               "update_rule"))
def _linear_attention(ctx: NodeContext):
    """The recurrent state S (B, H_kv, d_k, d_v), float32 as the reference keeps it, unrolled over
    the (static) sequence: per step S *= exp(decay_t) (gated), v_t = beta_t (v_t - S^T k_t) (delta),
    S += k_t v_t^T, and the output scale * q_t S, each query head reading its group's KV head.
    chunk_size is a tuning hint with no effect on the result."""
    require_float(ctx)
    rule = _text(ctx, "update_rule", "gated_delta")
    if rule not in _UPDATE_RULES:
        raise ctx.error(f"update_rule {rule!r} is not supported (linear, gated, delta or gated_delta)", "invalid")
    gating, delta = _UPDATE_RULES[rule]
    q_heads, kv_heads = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if not q_heads or not kv_heads or q_heads % kv_heads:
        raise ctx.error("q_num_heads must be a positive multiple of kv_num_heads", "invalid")
    for index, needed, name in ((4, gating, "decay"), (5, delta, "beta")):
        if ctx.has_input(index) != needed:
            raise ctx.error(f"update_rule {rule} {'needs' if needed else 'forbids'} {name}", "invalid")
    dtype = ctx.dtype(0)
    batch, steps, q_hidden = ctx.static_dims(0, "LinearAttention")
    d_k = q_hidden // q_heads
    d_v = ctx.static_dims(2, "LinearAttention")[2] // kv_heads
    group = q_heads // kv_heads

    def per_step(index, heads, width):
        """Input ``index`` (B, T, heads * width) in float32 as (B, heads, T, width)."""
        x = R.reshape(ctx.input(index), (batch, steps, heads, width))
        x = R.permute_dims(x, axes=(0, 2, 1, 3))
        return ctx.emit(R.astype(x, dtype="float32") if ctx.dtype(index) != "float32" else x)

    pieces = {}

    def step(x, t):
        """Step t of a (B, H, T, W) tensor as (B, H, 1, W): one split of the whole sequence, so
        that every step's kernels are alike and compiled once."""
        if steps == 1:
            return x
        if x not in pieces:
            pieces[x] = ctx.emit(R.split(x, indices_or_sections=tuple(range(1, steps)), axis=2))
        return ctx.emit(TupleGetItem(pieces[x], t))

    q = per_step(0, kv_heads, group * d_k)  # (B, H_kv, T, group * d_k): a group's query heads together
    k, v = per_step(1, kv_heads, d_k), per_step(2, kv_heads, d_v)
    if gating:
        decay_width = ctx.static_dims(4, "LinearAttention")[2]
        if decay_width not in (kv_heads, kv_heads * d_k):
            raise ctx.error(f"decay's last dimension {decay_width} must be kv_num_heads or kv_num_heads * d_k",
                            "invalid")
        decay = ctx.emit(R.exp(per_step(4, kv_heads, decay_width // kv_heads)))
    if delta:
        beta_width = ctx.static_dims(5, "LinearAttention")[2]
        if beta_width not in (kv_heads, 1):
            raise ctx.error(f"beta's last dimension {beta_width} must be kv_num_heads or 1", "invalid")
        beta = per_step(5, beta_width, 1)
    state_dtype = dtype
    if ctx.has_input(3):
        state_dtype = ctx.dtype(3)
        if ctx.static_dims(3, "LinearAttention") != (batch, kv_heads, d_k, d_v):
            raise ctx.error(f"past_state must have shape ({batch}, {kv_heads}, {d_k}, {d_v})", "invalid")
        state = ctx.input(3)
        state = ctx.emit(R.astype(state, dtype="float32") if state_dtype != "float32" else state)
    else:
        state = const(np.zeros((batch, kv_heads, d_k, d_v)), "float32")
    scale = ctx.attr("scale")
    scale = const(1.0 / np.sqrt(d_k) if not scale else scale, "float32")
    outputs = []
    for t in range(steps):
        k_t, v_t = step(k, t), step(v, t)
        if gating:  # (B, H_kv, 1, 1 or d_k) -> a factor per key row of S
            state = R.multiply(state, R.permute_dims(step(decay, t), axes=(0, 1, 3, 2)))
        if delta:
            retrieved = R.matmul(k_t, state)  # (B, H_kv, 1, d_v)
            v_t = R.multiply(step(beta, t), R.subtract(v_t, retrieved))
        state = ctx.emit(R.add(state, R.multiply(R.permute_dims(k_t, axes=(0, 1, 3, 2)), v_t)))
        q_t = R.reshape(step(q, t), (batch, kv_heads, group, d_k))
        outputs.append(R.multiply(scale, R.matmul(q_t, state)))  # (B, H_kv, group, d_v)
    out = R.concat([R.expand_dims(o, axis=1) for o in outputs], axis=1)
    out = R.reshape(out, (batch, steps, q_heads * d_v))  # (B, T, H_kv, group, d_v) -> (B, T, H_q * d_v)
    if dtype != "float32":
        out = R.astype(out, dtype=dtype)
    if state_dtype != "float32":
        state = R.astype(state, dtype=state_dtype)
    return [out, state]
