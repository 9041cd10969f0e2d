"""A Llama decoder layer (RMSNorm, GQA attention with RoPE, SwiGLU MLP) over a symbolic length n,
built with the operator API, with random weights: a realistic graph for pass tests."""

from __future__ import annotations

import numpy as np
from tessera import arith, op
from tessera.ir import BlockBuilder, Constant, IRModule, Tensor, Var

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 4, 2, 16, 128
F32 = "float32"


def build_layer(upper_bound: int | None = None) -> IRModule:
    n = arith.Var("n")
    params = {
        "x": Tensor(("n", HIDDEN), F32), "cos": Tensor(("n", 1, HEAD_DIM), F32),
        "sin": Tensor(("n", 1, HEAD_DIM), F32), "mask": Tensor(("n", "n"), F32),
        "attn_norm": Tensor((HIDDEN,), F32), "wq": Tensor((HIDDEN, HEADS * HEAD_DIM), F32),
        "wk": Tensor((HIDDEN, KV_HEADS * HEAD_DIM), F32), "wv": Tensor((HIDDEN, KV_HEADS * HEAD_DIM), F32),
        "wo": Tensor((HEADS * HEAD_DIM, HIDDEN), F32), "ffn_norm": Tensor((HIDDEN,), F32),
        "wg": Tensor((HIDDEN, FFN), F32), "wu": Tensor((HIDDEN, FFN), F32), "wd": Tensor((FFN, HIDDEN), F32),
    }
    p = {name: Var(name, sinfo) for name, sinfo in params.items()}
    attrs = {"tir_var_upper_bound": {"n": upper_bound}} if upper_bound else None
    bb = BlockBuilder()
    with bb.function("layer", list(p.values()), attrs=attrs):
        with bb.dataflow():
            h = bb.emit(op.nn.rms_norm(p["x"], p["attn_norm"]))
            q = bb.emit(op.reshape(op.matmul(h, p["wq"]), [n, HEADS, HEAD_DIM]))
            k = bb.emit(op.reshape(op.matmul(h, p["wk"]), [n, KV_HEADS, HEAD_DIM]))
            v = bb.emit(op.reshape(op.matmul(h, p["wv"]), [n, KV_HEADS, HEAD_DIM]))
            q = _rope(bb, q, p["cos"], p["sin"])
            k = _repeat_kv(bb, _rope(bb, k, p["cos"], p["sin"]), n)
            v = _repeat_kv(bb, v, n)
            qt = op.permute_dims(q, axes=[1, 0, 2])
            kt = op.permute_dims(k, axes=[1, 2, 0])
            scores = op.add(op.multiply(op.matmul(qt, kt), Constant(np.float32(HEAD_DIM ** -0.5))), p["mask"])
            probs = bb.emit(op.nn.softmax(scores, axis=-1))
            attn = op.reshape(op.permute_dims(op.matmul(probs, op.permute_dims(v, axes=[1, 0, 2])), axes=[1, 0, 2]),
                              [n, HEADS * HEAD_DIM])
            hidden = bb.emit(op.add(op.matmul(attn, p["wo"]), p["x"]))
            h2 = bb.emit(op.nn.rms_norm(hidden, p["ffn_norm"]))
            act = op.multiply(op.nn.silu(op.matmul(h2, p["wg"])), op.matmul(h2, p["wu"]))
            out = bb.emit_output(op.add(op.matmul(act, p["wd"]), hidden), "out")
        bb.emit_func_output(out)
    return bb.get()


def _rope(bb, x, cos, sin):
    half = HEAD_DIM // 2
    first = op.strided_slice(x, axes=[2], begin=[0], end=[half])
    second = op.strided_slice(x, axes=[2], begin=[half], end=[HEAD_DIM])
    rotated = op.concat((op.negative(second), first), axis=2)
    return bb.emit(op.add(op.multiply(x, cos), op.multiply(rotated, sin)))


def _repeat_kv(bb, x, n):
    repeat = HEADS // KV_HEADS
    expanded = op.broadcast_to(op.expand_dims(x, axis=2), [n, KV_HEADS, repeat, HEAD_DIM])
    return bb.emit(op.reshape(expanded, [n, HEADS, HEAD_DIM]))


def layer_inputs(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    positions = np.arange(n)[:, None] / (10000 ** (np.arange(HEAD_DIM // 2) * 2 / HEAD_DIM))
    angles = np.concatenate([positions, positions], axis=1)[:, None, :]
    mask = np.where(np.tril(np.ones((n, n))) > 0, 0.0, -1e9).astype(np.float32)

    def weight(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    return [rng.standard_normal((n, HIDDEN)).astype(np.float32), np.cos(angles).astype(np.float32),
            np.sin(angles).astype(np.float32), mask, (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32),
            weight(HIDDEN, HEADS * HEAD_DIM), weight(HIDDEN, KV_HEADS * HEAD_DIM), weight(HIDDEN, KV_HEADS * HEAD_DIM),
            weight(HEADS * HEAD_DIM, HIDDEN), (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32),
            weight(HIDDEN, FFN), weight(HIDDEN, FFN), weight(FFN, HIDDEN)]
