"""Scatters with a reduction, empty-axis reductions, Det, GatherND's batch_dims, blocked
quantization, training-mode BatchNormalization, Dropout's mask and the Optional ops over plain
tensors, beyond the node tests' small examples: heavily repeated scatter indices, a symbolic
dimension, pivoting and singular matrices, short last blocks. Each is compared with ONNX's
reference evaluator on the reference interpreter; one graph is also compiled for "cpu"."""

from __future__ import annotations

import numpy as np
import pytest
import tessera
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_graphs import as_outputs, graph_model, interpret_and_compare  # (tests/frontend is on the path)
from tessera.frontend import OnnxImportError, from_onnx
from tessera.ir import interpret
from tessera.ir.expr import Call, Constant, Tuple

F, I64, U8, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.UINT8, TensorProto.BOOL


_model = graph_model


def _run_both(model, feeds, rtol=1e-5, atol=1e-6):
    return interpret_and_compare(model, feeds, rtol, atol)


def _constant_sizes(mod) -> list[int]:
    sizes = []

    def visit(expr):
        if isinstance(expr, Constant):
            sizes.append(expr.data.size)
        elif isinstance(expr, Call):
            for arg in expr.args:
                visit(arg)
        elif isinstance(expr, Tuple):
            for field in expr.fields:
                visit(field)

    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            visit(binding.value)
    return sizes


def _indices_initializer(name, values):
    return helper.make_tensor(name, I64, values.shape, values.reshape(-1).tolist())


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_elements_folds_many_repeated_indices_in_order(reduction):
    """Up to 30 updates land on one position: each is folded in, in order, as ONNX's loop does,
    and no constant grows with the rounds times the data (every constant is at most the data's or
    the updates' size)."""
    rng = np.random.default_rng(0)
    data_shape, update_shape = (4, 40), (4, 60)
    indices = rng.integers(0, 3, size=update_shape)  # most updates on three columns
    indices[:, ::7] = rng.integers(3, 40, size=indices[:, ::7].shape)
    model = _model([helper.make_node("ScatterElements", ["data", "indices", "updates"], ["y"], axis=1,
                                     reduction=reduction)],
                   [("data", F, list(data_shape)), ("updates", F, list(update_shape))], [("y", F, list(data_shape))],
                   opset=18, initializers=[_indices_initializer("indices", indices)])
    feeds = {"data": rng.uniform(0.5, 1.5, data_shape).astype(np.float32),
             "updates": rng.uniform(0.9, 1.1, update_shape).astype(np.float32)}
    _run_both(model, feeds, rtol=1e-6, atol=0)
    assert max(_constant_sizes(from_onnx(model))) <= int(np.prod(data_shape))
    assert sum(_constant_sizes(from_onnx(model))) <= 2 * int(np.prod(data_shape)) + 3 * indices.size


@pytest.mark.parametrize("reduction", ["add", "max"])
def test_scatter_nd_folds_repeated_slices(reduction):
    rng = np.random.default_rng(1)
    indices = rng.integers(-5, 5, size=(12, 1))  # negative rows count from the end
    model = _model([helper.make_node("ScatterND", ["data", "indices", "updates"], ["y"], reduction=reduction)],
                   [("data", F, [5, 3, 2]), ("updates", F, [12, 3, 2])], [("y", F, [5, 3, 2])],
                   opset=18, initializers=[_indices_initializer("indices", indices)])
    _run_both(model, {"data": rng.standard_normal((5, 3, 2)).astype(np.float32),
                      "updates": rng.standard_normal((12, 3, 2)).astype(np.float32)})


@pytest.mark.parametrize("op, dtype", [("ReduceMax", TensorProto.FLOAT), ("ReduceMin", TensorProto.INT32),
                                       ("ReduceLogSumExp", TensorProto.FLOAT), ("ReduceMin", B)])
def test_a_reduction_over_an_empty_axis_beside_a_symbolic_one(op, dtype):
    axes = helper.make_tensor("axes", I64, [1], [1])
    model = _model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)], [("x", dtype, ["n", 0, 3])],
                   [("y", dtype, ["n", 3])], opset=18, initializers=[axes])
    numpy_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    _run_both(model, {"x": np.zeros((4, 0, 3), dtype=numpy_dtype)})


def test_det_pivots_and_gives_zero_for_singular_matrices():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    x[0, 0, 0, 0] = 0.0  # the first pivot must be taken from another row
    x[0, 1, :, 2] = 0.0  # a zero column: singular
    x[1, 2, 3] = x[1, 2, 1] * 2  # dependent rows: singular up to rounding
    x[1, 1] = np.triu(x[1, 1])  # upper triangular: no swap
    model = _model([helper.make_node("Det", ["x"], ["y"])], [("x", F, [2, 3, 5, 5])], [("y", F, [2, 3])], opset=22)
    got = as_outputs(interpret(from_onnx(model), "main", x))[0]
    np.testing.assert_allclose(got, np.linalg.det(x.astype(np.float64)), rtol=1e-4, atol=1e-5)
    assert got[0, 1] == 0.0


def test_gather_nd_with_two_batch_axes():
    rng = np.random.default_rng(3)
    indices = np.stack([rng.integers(-3, 3, size=(2, 3, 4)), rng.integers(0, 5, size=(2, 3, 4))], axis=-1)
    model = _model([helper.make_node("GatherND", ["data", "indices"], ["y"], batch_dims=2)],
                   [("data", F, [2, 3, 3, 5, 2]), ("indices", I64, [2, 3, 4, 2])], [("y", F, [2, 3, 4, 2])],
                   opset=13)
    _run_both(model, {"data": rng.standard_normal((2, 3, 3, 5, 2)).astype(np.float32), "indices": indices})


def test_blocked_quantization_with_a_short_last_block():
    """Seven elements along the axis in blocks of 3: three blocks, the last of one element."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], axis=1, block_size=3),
             helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"], axis=1, block_size=3)]
    model = _model(nodes, [("x", F, [2, 7]), ("scale", F, [2, 3]), ("zero", U8, [2, 3])],
                   [("q", U8, [2, 7]), ("y", F, [2, 7])], opset=21)
    _run_both(model, {"x": rng.uniform(-20, 60, (2, 7)).astype(np.float32),
                      "scale": rng.uniform(0.2, 0.5, (2, 3)).astype(np.float32),
                      "zero": rng.integers(0, 60, (2, 3)).astype(np.uint8)})


@pytest.mark.parametrize("shape", [[6, 4], [3, 4, 5]])
def test_batch_norm_training_mode_gives_the_batch_statistics(shape):
    rng = np.random.default_rng(5)
    channels = [shape[1]]
    model = _model([helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y", "rm", "rv"],
                                     training_mode=1, momentum=0.7, epsilon=1e-3)],
                   [("x", F, shape)] + [(n, F, channels) for n in ("s", "b", "mean", "var")],
                   [("y", F, shape), ("rm", F, channels), ("rv", F, channels)], opset=15)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    feeds.update({n: rng.uniform(0.5, 1.5, channels).astype(np.float32) for n in ("s", "b", "mean", "var")})
    _run_both(model, feeds, rtol=1e-5, atol=1e-5)


def test_dropout_keeps_everything_and_its_mask_over_a_symbolic_shape():
    ratio = helper.make_tensor("ratio", F, [], [0.0])
    training = helper.make_tensor("training", B, [], [True])
    model = _model([helper.make_node("Dropout", ["x", "ratio", "training"], ["y", "mask"])],
                   [("x", F, ["n", 3])], [("y", F, ["n", 3]), ("mask", B, ["n", 3])], opset=13,
                   initializers=[ratio, training])
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    y, mask = as_outputs(interpret(from_onnx(model), "main", x))
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.shape == (4, 3) and mask.all()


def test_optional_ops_over_a_plain_tensor():
    nodes = [helper.make_node("OptionalHasElement", ["x"], ["has"]),
             helper.make_node("OptionalGetElement", ["x"], ["got"])]
    model = _model(nodes, [("x", F, [3])], [("has", B, []), ("got", F, [3])], opset=18)
    _run_both(model, {"x": np.array([1.0, 2.0, 3.0], dtype=np.float32)})


def test_the_graphs_compile_for_cpu(tmp_path):
    """A reduction scatter, Det and a batched GatherND in one compiled graph."""
    rng = np.random.default_rng(6)
    indices = rng.integers(0, 4, size=(3, 9))
    gather_indices = helper.make_tensor("g_idx", I64, [3, 2, 1], [0, 3, 1, 1, 2, 0])
    nodes = [helper.make_node("ScatterElements", ["data", "indices", "updates"], ["s"], axis=1, reduction="add"),
             helper.make_node("Det", ["m"], ["d"]),
             helper.make_node("GatherND", ["s", "g_idx"], ["g"], batch_dims=1)]
    model = _model(nodes, [("data", F, [3, 4]), ("updates", F, [3, 9]), ("m", F, [2, 4, 4])],
                   [("s", F, [3, 4]), ("d", F, [2]), ("g", F, [3, 2])], opset=18,
                   initializers=[_indices_initializer("indices", indices), gather_indices])
    feeds = {"data": rng.standard_normal((3, 4)).astype(np.float32),
             "updates": rng.standard_normal((3, 9)).astype(np.float32),
             "m": rng.standard_normal((2, 4, 4)).astype(np.float32)}
    tessera.build(from_onnx(model), "cpu").save(str(tmp_path / "exe"))
    got = tessera.InferenceSession(tmp_path / "exe", device="cpu").run(None, feeds)
    for g, w in zip(got, ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("node, inputs, opset, message", [
    (helper.make_node("Dropout", ["x", "r", "t"], ["y"]), [("x", F, [3])], 13, "drops random elements"),
    (helper.make_node("Det", ["x"], ["y"]), [("x", F, [2, 3])], 22, "must be square"),
    (helper.make_node("DequantizeLinear", ["q", "s"], ["y"], axis=0, block_size=2),
     [("q", U8, [5]), ("s", F, [2])], 21, "blocks of 2 make 3"),
])
def test_refusals_name_the_node_op_and_opset(node, inputs, opset, message):
    initializers = [helper.make_tensor("r", F, [], [0.5]), helper.make_tensor("t", B, [], [True])]
    names = {i[0] for i in inputs} | {o for o in node.input if o}
    model = _model([node], inputs, [("y", F, None)], opset,
                   initializers=[i for i in initializers if i.name in names])
    with pytest.raises(OnnxImportError) as error:
        from_onnx(model)
    text = str(error.value)
    assert node.op_type in text and f"opset {opset}" in text and message in text, text
