"""The transformer-family ops (Attention's windows and external cache, RotaryEmbedding,
TensorScatter, LinearAttention, CausalConvWithState, SwiGLU) in graphs shaped like a model's decode
step, beyond the node tests' single ops: compared with ONNX's reference evaluator on the reference
interpreter, one compiled for "cpu", and the clear errors for what is refused."""

from __future__ import annotations

import numpy as np
import pytest
import tessera
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_graphs import graph_model, interpret_and_compare  # (tests/frontend is on the path)
from tessera.frontend import OnnxImportError, from_onnx

F, I64 = TensorProto.FLOAT, TensorProto.INT64


BATCH, Q_HEADS, KV_HEADS, HEAD, CACHE, NEW = 2, 4, 2, 16, 12, 3


_model = graph_model


def _run_both(model, feeds):
    return interpret_and_compare(model, feeds, 1e-4, 1e-5)


def _decode_step_model():
    """A GQA decode step with a static (external) cache: RoPE on the new queries and keys at their
    positions, TensorScatter writing the keys and values into the cache at each row's length,
    Attention over the cache with nonpad_kv_seqlen, causal and a sliding window."""
    nodes = [
        helper.make_node("RotaryEmbedding", ["q", "cos", "sin", "pos"], ["q_rot"]),
        helper.make_node("RotaryEmbedding", ["k", "cos", "sin", "pos"], ["k_rot"], interleaved=1),
        helper.make_node("TensorScatter", ["k_cache", "k_rot", "lengths"], ["k_all"], mode="linear"),
        helper.make_node("TensorScatter", ["v_cache", "v", "lengths"], ["v_all"], mode="linear"),
        helper.make_node("Add", ["lengths", "new"], ["total"]),
        helper.make_node("Attention", ["q_rot", "k_all", "v_all", "", "", "", "total"], ["y"],
                         is_causal=1, left_window_size=6),
    ]
    half = HEAD // 2
    inputs = [("q", F, [BATCH, Q_HEADS, NEW, HEAD]), ("k", F, [BATCH, KV_HEADS, NEW, HEAD]),
              ("v", F, [BATCH, KV_HEADS, NEW, HEAD]), ("cos", F, [32, half]), ("sin", F, [32, half]),
              ("pos", I64, [BATCH, NEW]), ("k_cache", F, [BATCH, KV_HEADS, CACHE, HEAD]),
              ("v_cache", F, [BATCH, KV_HEADS, CACHE, HEAD]), ("lengths", I64, [BATCH]), ("new", I64, [])]
    outputs = [("y", F, [BATCH, Q_HEADS, NEW, HEAD]), ("k_all", F, [BATCH, KV_HEADS, CACHE, HEAD])]
    return _model(nodes, inputs, outputs, opset=25)


def _decode_feeds(rng):
    lengths = np.array([2, 7], dtype=np.int64)
    angles = np.arange(32)[:, None] * (1e-2 ** (np.arange(HEAD // 2) / (HEAD // 2)))[None, :]
    return {
        "q": rng.standard_normal((BATCH, Q_HEADS, NEW, HEAD)).astype(np.float32),
        "k": rng.standard_normal((BATCH, KV_HEADS, NEW, HEAD)).astype(np.float32),
        "v": rng.standard_normal((BATCH, KV_HEADS, NEW, HEAD)).astype(np.float32),
        "cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32),
        "pos": lengths[:, None] + np.arange(NEW, dtype=np.int64)[None, :],
        "k_cache": rng.standard_normal((BATCH, KV_HEADS, CACHE, HEAD)).astype(np.float32),
        "v_cache": rng.standard_normal((BATCH, KV_HEADS, CACHE, HEAD)).astype(np.float32),
        "lengths": lengths, "new": np.array(NEW, dtype=np.int64),
    }


def test_a_decode_step_with_rope_a_static_cache_and_a_window():
    _run_both(_decode_step_model(), _decode_feeds(np.random.default_rng(0)))


def test_a_decode_step_compiles_for_cpu(tmp_path):
    model, feeds = _decode_step_model(), _decode_feeds(np.random.default_rng(1))
    tessera.build(from_onnx(model), "cpu").save(str(tmp_path / "exe"))
    got = tessera.InferenceSession(tmp_path / "exe", device="cpu").run(None, feeds)
    for g, w in zip(got, ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("start", [0, 3, 9])
def test_tensor_scatter_wraps_in_circular_mode(start):
    model = _model([helper.make_node("TensorScatter", ["cache", "update", "at"], ["out"], mode="circular", axis=2)],
                   [("cache", F, [2, 3, 5, 4]), ("update", F, [2, 3, 4, 4]), ("at", I64, [2])],
                   [("out", F, [2, 3, 5, 4])], opset=24)
    rng = np.random.default_rng(start)
    _run_both(model, {"cache": rng.standard_normal((2, 3, 5, 4)).astype(np.float32),
                      "update": rng.standard_normal((2, 3, 4, 4)).astype(np.float32),
                      "at": np.array([start, 4], dtype=np.int64)})


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention_over_a_longer_sequence_with_past_state(rule):
    steps, q_heads, kv_heads, d_k, d_v = 10, 4, 2, 8, 6
    shapes = {"q": [1, steps, q_heads * d_k], "k": [1, steps, kv_heads * d_k], "v": [1, steps, kv_heads * d_v],
              "past": [1, kv_heads, d_k, d_v], "decay": [1, steps, kv_heads], "beta": [1, steps, kv_heads]}
    inputs = ["q", "k", "v", "past", "decay" if "gated" in rule else "", "beta" if "delta" in rule else ""]
    model = _model([helper.make_node("LinearAttention", inputs, ["y", "state"], update_rule=rule,
                                     q_num_heads=q_heads, kv_num_heads=kv_heads)],
                   [(name, F, shapes[name]) for name in inputs if name],
                   [("y", F, [1, steps, q_heads * d_v]), ("state", F, [1, kv_heads, d_k, d_v])], opset=27)
    rng = np.random.default_rng(2)
    feeds = {"q": rng.standard_normal((1, steps, q_heads * d_k)), "k": rng.standard_normal((1, steps, kv_heads * d_k)),
             "v": rng.standard_normal((1, steps, kv_heads * d_v)), "past": rng.standard_normal((1, kv_heads, d_k, d_v))}
    if "gated" in rule:
        feeds["decay"] = -rng.random((1, steps, kv_heads))
    if "delta" in rule:
        feeds["beta"] = rng.random((1, steps, kv_heads))
    _run_both(model, {name: value.astype(np.float32) for name, value in feeds.items()})


def test_a_causal_conv_and_swiglu_block():
    """A gated MLP after a short causal convolution, as in hybrid (Mamba-style) blocks."""
    model = _model([helper.make_node("CausalConvWithState", ["x", "w", "b", "state"], ["conv", "next"],
                                     activation="silu"),
                    helper.make_node("SwiGLU", ["conv", "x"], ["y"], alpha=1.5)],
                   [("x", F, [2, 6, 9]), ("w", F, [6, 1, 3]), ("b", F, [6]), ("state", F, [2, 6, 2])],
                   [("y", F, [2, 6, 9]), ("next", F, [2, 6, 2])], opset=28)
    rng = np.random.default_rng(3)
    _run_both(model, {"x": rng.standard_normal((2, 6, 9)).astype(np.float32),
                      "w": rng.standard_normal((6, 1, 3)).astype(np.float32),
                      "b": rng.standard_normal(6).astype(np.float32),
                      "state": rng.standard_normal((2, 6, 2)).astype(np.float32)})


@pytest.mark.parametrize("node, inputs, opset, message", [
    (helper.make_node("Attention", ["q", "q", "q"], ["y"], softmax_precision=TensorProto.BFLOAT16),
     [("q", F, [1, 2, 3, 4])], 24, "softmax_precision 16 is not supported"),
    (helper.make_node("LinearAttention", ["q", "q", "q"], ["y"], q_num_heads=2, kv_num_heads=2, update_rule="fast"),
     [("q", F, [1, 3, 4])], 27, "update_rule 'fast' is not supported"),
    (helper.make_node("TensorScatter", ["q", "q"], ["y"], axis=0), [("q", F, [2, 3])], 24, "axis 0 is the batch axis"),
])
def test_refusals_name_the_node_op_and_opset(node, inputs, opset, message):
    model = _model([node], inputs, [("y", F, None)], opset=opset)
    with pytest.raises(OnnxImportError, match=f"{node.op_type}, opset {opset}\\): .*{message}"):
        from_onnx(model)
