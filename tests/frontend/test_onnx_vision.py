"""Convolution, pooling, Resize and the image rearrangements beyond the node tests' examples: 3-D
Conv (no node test), MaxPool's Indices in column-major order, Resize's tf_crop_and_resize with
nearest sampling and antialias over chosen axes, ReverseSequence with the batch first and a zero
length, 1-D Col2Im, and the clear refusals. Each is compared with ONNX's reference evaluator on the
reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_graphs import graph_model, interpret_and_compare  # (tests/frontend is on the path)
from tessera.frontend import OnnxImportError, from_onnx

F, I64 = TensorProto.FLOAT, TensorProto.INT64


_model = graph_model


def _run_both(model, feeds, rtol=1e-5, atol=1e-5):
    return interpret_and_compare(model, feeds, rtol, atol)


def _const(name, values):
    return numpy_helper.from_array(np.asarray(values), name)


def test_conv_3d_with_groups_strides_pads_and_dilations():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 6, 7, 5)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 2, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=2, strides=[2, 1, 2], pads=[1, 0, 1, 2, 1, 0],
                            dilations=[1, 2, 1])
    model = _model([node], [("x", F, list(x.shape))], [("y", F, None)], 17, [_const("w", w), _const("b", b)])
    _run_both(model, {"x": x})


@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices_with_ties_padding_and_storage_order(storage_order):
    """Ties (a window of equal values) take the first position in scan order; padding never wins."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 3, size=(2, 3, 5, 6)).astype(np.float32)  # many ties
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 1, 1, 0],
                            storage_order=storage_order)
    model = _model([node], [("x", F, list(x.shape))], [("y", F, None), ("i", I64, None)], 12)
    _run_both(model, {"x": x}, rtol=0, atol=0)


def test_resize_tf_crop_and_resize_nearest_with_extrapolation():
    x = np.arange(1 * 1 * 4 * 5, dtype=np.float32).reshape(1, 1, 4, 5)
    node = helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode="nearest",
                            coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-7.0,
                            axes=[3, 2])
    model = _model([node], [("x", F, list(x.shape))], [("y", F, None)], 18,
                   [_const("roi", np.array([-0.2, 0.1, 1.3, 0.9], np.float32)), _const("sizes", np.array([6, 3]))])
    _run_both(model, {"x": x})


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_on_one_axis(mode):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode, antialias=1, axes=[3])
    model = _model([node], [("x", F, list(x.shape))], [("y", F, None)], 18,
                   [_const("scales", np.array([0.35], np.float32))])
    _run_both(model, {"x": x})


def test_reverse_sequence_batch_first_with_a_zero_length():
    x = np.arange(3 * 5 * 2, dtype=np.float32).reshape(3, 5, 2)
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=0, time_axis=1)
    model = _model([node], [("x", F, [3, 5, 2]), ("lens", I64, [3])], [("y", F, None)], 17)
    _run_both(model, {"x": x, "lens": np.array([0, 5, 3])}, rtol=0, atol=0)


def test_max_unpool_of_max_pool_indices():
    """MaxUnpool takes MaxPool's Indices as data (not a constant), as a real graph feeds them."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    model = _model(nodes, [("x", F, list(x.shape))], [("y", F, None)], 12)
    _run_both(model, {"x": x}, rtol=0, atol=0)


def test_refusals_name_the_node():
    big = helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2], name="unpool")
    model = _model([big], [("x", F, [1, 8, 64, 64]), ("i", I64, [1, 8, 64, 64])], [("y", F, None)], 12)
    with pytest.raises(OnnxImportError, match=r"unpool.*MaxUnpool, opset 12.*comparisons"):
        from_onnx(model)
    nearest = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest", antialias=1, name="rs")
    model = _model([nearest], [("x", F, [1, 1, 4, 4])], [("y", F, None)], 18,
                   [_const("scales", np.array([1, 1, 0.5, 0.5], np.float32))])
    with pytest.raises(OnnxImportError, match=r"rs.*Resize, opset 18.*antialias"):
        from_onnx(model)
    pool = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2], name="pool3")
    model = _model([pool], [("x", F, ["n", 2, 4, 4, 4])], [("y", F, None)], 12)
    with pytest.raises(OnnxImportError, match=r"pool3.*MaxPool, opset 12"):
        from_onnx(model)


def test_col2im_1d_with_strides_pads_and_dilation():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 2 * 3, 5)).astype(np.float32)  # 2 channels, a block of 3, 5 columns
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], strides=[2], pads=[1, 2], dilations=[2])
    model = _model([node], [("x", F, list(x.shape))], [("y", F, None)], 18,
                   [_const("image", np.array([10])), _const("block", np.array([3]))])
    _run_both(model, {"x": x})
