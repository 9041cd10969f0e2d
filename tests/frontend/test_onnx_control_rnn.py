"""Loop and Scan as recursive functions, and the ops composed at import (TopK, Einsum, the RNNs,
QLinearConv, ConvInteger): small graphs built with onnx.helper, compared with ONNX's reference
evaluator (or numpy where it differs from the spec) on the reference interpreter, and a few compiled
for "cpu" and run through tessera.InferenceSession."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import tessera
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tessera.frontend import OnnxImportError, from_onnx
from tessera.ir import interpret

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _info(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _interpret(model, feeds, **kwargs):
    got = interpret(from_onnx(model, **kwargs), "main", *feeds.values())
    return [np.asarray(g) for g in (got if isinstance(got, tuple | list) else [got])]


def _reference(model, feeds):
    return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]


def _compiled(model, feeds, tmp_path):
    folder = tmp_path / "exe"
    tessera.build(from_onnx(model), "cpu").save(str(folder))
    return tessera.InferenceSession(folder, device="cpu").run(None, feeds)


def _close(got, want, rtol=1e-5, atol=1e-6):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# -- Loop -----------------------------------------------------------------------------------------


def _loop_model(with_trip=True, with_cond=True):
    """y = y * (i + 1) + w while i < M and sum(y) < limit; the y of each iteration is stacked."""
    body = helper.make_graph(
        [helper.make_node("Add", ["i", "one"], ["i1"]),
         helper.make_node("Cast", ["i1"], ["f"], to=F),
         helper.make_node("Mul", ["y_in", "f"], ["y_mul"]),
         helper.make_node("Add", ["y_mul", "w"], ["y_out"]),  # w: captured from the enclosing graph
         helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["c_out"]),
         helper.make_node("Identity", ["y_out"], ["scan"])],
        "body", [_info("i", I64, []), _info("c", B, []), _info("y_in", F, [2, 3])],
        [_info("c_out", B, []), _info("y_out", F, [2, 3]), _info("scan", F, [2, 3])],
        initializer=[helper.make_tensor("one", I64, [], [1])])
    loop = helper.make_node("Loop", ["M" if with_trip else "", "cond" if with_cond else "", "y0"], ["y", "scans"],
                            body=body)
    inputs = [_info("M", I64, []), _info("cond", B, []), _info("y0", F, [2, 3]), _info("w", F, [2, 3]),
              _info("limit", F, [])]
    inputs = [i for i in inputs if (with_trip or i.name != "M") and (with_cond or i.name != "cond")]
    return _model([loop], inputs, [_info("y", F, [2, 3]), _info("scans", F, ["n", 2, 3])])


def _loop_numpy(m, cond, y, w, limit):
    scans, i = [], 0
    while (m is None or i < m) and cond:
        y = y * np.float32(i + 1) + w
        cond = y.sum() < limit
        scans.append(y)
        i += 1
    return [y, np.stack(scans) if scans else np.zeros((0, 2, 3), np.float32)]


def _loop_feeds(m, limit, seed=0):
    rng = np.random.default_rng(seed)
    return dict(M=np.array(m, np.int64), cond=np.array(True), y0=rng.standard_normal((2, 3)).astype(np.float32),
                w=rng.standard_normal((2, 3)).astype(np.float32), limit=np.array(limit, np.float32))


@pytest.mark.parametrize("m, limit", [(5, 1e9), (7, 3.0), (0, 1e9), (3, -1e9)])
def test_a_loop_runs_to_its_trip_count_or_its_condition(m, limit):
    """Scan outputs are stacked on a new axis (as the spec and onnxruntime do; ONNX's reference
    evaluator concatenates them, which differs for slices of rank 2)."""
    feeds = _loop_feeds(m, limit)
    want = _loop_numpy(m, True, feeds["y0"], feeds["w"], limit)
    _close(_interpret(_loop_model(), feeds), want)


def test_a_loop_with_only_a_trip_count_or_only_a_condition():
    feeds = _loop_feeds(4, 1e9)
    del feeds["cond"]
    _close(_interpret(_loop_model(with_cond=False), feeds), _loop_numpy(4, True, feeds["y0"], feeds["w"], 1e9))
    feeds = _loop_feeds(0, 20.0, seed=1)
    del feeds["M"]
    feeds["y0"] = np.abs(feeds["y0"])
    feeds["w"] = np.abs(feeds["w"]) + 0.1
    _close(_interpret(_loop_model(with_trip=False), feeds), _loop_numpy(None, True, feeds["y0"], feeds["w"], 20.0))
    with pytest.raises(OnnxImportError, match="never ends"):
        from_onnx(_model([helper.make_node("Loop", ["", "", "x"], ["y"], body=_growing_body())],
                         [_info("x", F, [1])], [_info("y", F, ["n"])]))


def _growing_body():
    """A carried value that grows by one element each iteration (its shape changes)."""
    return helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["f"], to=F),
         helper.make_node("Unsqueeze", ["f", "zero"], ["f1"]),
         helper.make_node("Concat", ["acc", "f1"], ["acc_out"], axis=0)],
        "grow", [_info("i", I64, []), _info("c", B, []), _info("acc", F, ["k"])],
        [_info("c_out", B, []), _info("acc_out", F, ["k1"])],
        initializer=[helper.make_tensor("zero", I64, [1], [0])])


def test_a_carried_value_that_grows_is_carried_by_its_rank():
    model = _model([helper.make_node("Loop", ["M", "", "x"], ["y"], body=_growing_body())],
                   [_info("M", I64, []), _info("x", F, [1])], [_info("y", F, ["n"])])
    feeds = dict(M=np.array(4, np.int64), x=np.array([9.0], np.float32))
    # (ONNX's reference evaluator runs no iteration when the condition input is omitted.)
    _close(_interpret(model, feeds), [np.array([9, 0, 1, 2, 3], np.float32)])


def test_nested_loops_and_a_loop_in_a_branch():
    """The outer body holds a Loop of its own (its function another of the module's), inside an If."""
    inner = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Add", ["s", "step"], ["s_out"])],  # step: the outer body's value
        "inner", [_info("j", I64, []), _info("c", B, []), _info("s", F, [])], [_info("c_out", B, []), _info("s_out", F, [])])
    outer = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["step"], to=F),
         helper.make_node("Loop", ["N", "", "t"], ["t_out"], body=inner)],
        "outer", [_info("i", I64, []), _info("c", B, []), _info("t", F, [])], [_info("c_out", B, []), _info("t_out", F, [])])
    then = helper.make_graph([helper.make_node("Loop", ["M", "", "x"], ["y"], body=outer)], "then", [],
                             [_info("y", F, [])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "else", [], [_info("y", F, [])])
    model = _model([helper.make_node("If", ["flag"], ["out"], then_branch=then, else_branch=other)],
                   [_info("flag", B, []), _info("M", I64, []), _info("N", I64, []), _info("x", F, [])],
                   [_info("out", F, [])])
    for flag in (True, False):
        feeds = dict(flag=np.array(flag), M=np.array(4, np.int64), N=np.array(3, np.int64),
                     x=np.array(0.5, np.float32))
        want = np.float32(0.5 + 3 * (0 + 1 + 2 + 3)) if flag else np.float32(-0.5)  # the reference evaluator
        _close(_interpret(model, feeds), [np.asarray(want)])  # runs no iteration without a condition


def test_a_loop_compiles_for_cpu(tmp_path):
    model = _loop_model()
    feeds = _loop_feeds(5, 1e9)
    _close(_compiled(model, feeds, tmp_path), _loop_numpy(5, True, feeds["y0"], feeds["w"], 1e9))
    session = tessera.InferenceSession(tmp_path / "exe", device="cpu")
    for m, limit in ((0, 1e9), (6, 2.0)):  # zero iterations, and a condition that stops it early
        feeds = _loop_feeds(m, limit, seed=3)
        _close(session.run(None, feeds), _loop_numpy(m, True, feeds["y0"], feeds["w"], limit))


# -- Scan -----------------------------------------------------------------------------------------


def _scan_model(in_axes=(0, 0), in_dirs=(0, 0), out_axes=(0, 0), out_dirs=(0, 0)):
    """Two states (a running sum and a running product of the rows), two scan inputs, two scan
    outputs (the sum so far and the product of this pair)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "a"], ["sum_out"]),
         helper.make_node("Mul", ["a", "b"], ["ab"]),
         helper.make_node("Mul", ["prod_in", "ab"], ["prod_out"]),
         helper.make_node("Identity", ["sum_out"], ["sums"])],
        "body", [_info("sum_in", F, [3]), _info("prod_in", F, [3]), _info("a", F, [3]), _info("b", F, [3])],
        [_info("sum_out", F, [3]), _info("prod_out", F, [3]), _info("sums", F, [3]), _info("ab", F, [3])])
    node = helper.make_node("Scan", ["s0", "p0", "x", "z"], ["s", "p", "sums", "ab"], body=body, num_scan_inputs=2,
                            scan_input_axes=list(in_axes), scan_input_directions=list(in_dirs),
                            scan_output_axes=list(out_axes), scan_output_directions=list(out_dirs))
    x_shape = [4, 3] if in_axes[0] == 0 else [3, 4]
    z_shape = [4, 3] if in_axes[1] in (0, -2) else [3, 4]
    return _model([node], [_info("s0", F, [3]), _info("p0", F, [3]), _info("x", F, x_shape), _info("z", F, z_shape)],
                  [_info("s", F, [3]), _info("p", F, [3]), _info("sums", F, None), _info("ab", F, None)])


def _scan_feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    return {name: rng.uniform(0.5, 1.5, shape).astype(np.float32) for name, shape in shapes.items()}


@pytest.mark.parametrize("in_axes, in_dirs, out_axes, out_dirs", [
    ((0, 0), (0, 0), (0, 0), (0, 0)),
    ((1, 0), (1, 0), (0, 1), (0, 0)),
    ((0, -1), (0, 1), (1, 0), (1, 1)),
    ((1, 1), (1, 1), (-1, -2), (1, 0)),
])
def test_scan_axes_and_directions(in_axes, in_dirs, out_axes, out_dirs):
    model = _scan_model(in_axes, in_dirs, out_axes, out_dirs)
    feeds = _scan_feeds(model)
    want = _scan_numpy(feeds, in_axes, in_dirs, out_axes, out_dirs)
    _close(_interpret(model, feeds), want)
    if in_dirs == (0, 0):  # ONNX's reference evaluator implements forward inputs only
        _close(want, _reference(model, feeds))


def _scan_numpy(feeds, in_axes, in_dirs, out_axes, out_dirs):
    rows = []
    for name, axis, reverse in zip("xz", in_axes, in_dirs):
        moved = np.moveaxis(feeds[name], axis, 0)
        rows.append(moved[::-1] if reverse else moved)
    total, product, sums, products = feeds["s0"].copy(), feeds["p0"].copy(), [], []
    for a, b in zip(*rows):
        total = total + a
        product = product * (a * b)
        sums.append(total)
        products.append(a * b)
    outs = [np.stack(values[::-1] if reverse else values, axis=axis)
            for values, axis, reverse in zip((sums, products), out_axes, out_dirs)]
    return [total, product, *outs]


def test_a_scan_compiles_for_cpu(tmp_path):
    model = _scan_model((1, 0), (1, 0), (0, 1), (1, 0))
    feeds = _scan_feeds(model, seed=2)
    _close(_compiled(model, feeds, tmp_path), _scan_numpy(feeds, (1, 0), (1, 0), (0, 1), (1, 0)))


# -- TopK -----------------------------------------------------------------------------------------


def _topk_model(shape, k, axis, largest=1, dtype=F):
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=axis, largest=largest)
    return _model([node], [_info("x", dtype, shape)], [_info("values", dtype, None), _info("indices", I64, None)],
                  [numpy_helper.from_array(np.array([k], np.int64), "k")])


@pytest.mark.parametrize("shape, k, axis, largest, dtype", [
    ((3, 5, 4), 2, 1, 1, np.float32),
    ((3, 5, 4), 4, -1, 0, np.float32),
    ((2, 7), 7, 0 + 1, 1, np.int32),
    ((6,), 0, 0, 1, np.float32),
    ((2, 300, 3), 5, 1, 1, np.float32),  # a long axis and a small K: by selection
    ((3, 300), 4, 1, 0, np.int32),
])
def test_topk_orders_by_value_then_index(shape, k, axis, largest, dtype):
    rng = np.random.default_rng(1)
    x = rng.integers(-3, 3, shape).astype(dtype)  # many ties
    if dtype == np.float32:
        x.flat[0], x.flat[-1] = -np.inf, np.inf
    if shape[-1] == 3:  # every value the worst: a selection must not take a position twice
        x[0] = -np.inf
    model = _topk_model(shape, k, axis, largest, {np.float32: F, np.int32: TensorProto.INT32}[dtype])
    _close(_interpret(model, {"x": x}), _reference(model, {"x": x}))


def test_topk_compiles_for_cpu_and_a_long_axis_is_refused(tmp_path):
    for shape in ((4, 50), (2, 600)):  # by ranks, by selection
        model = _topk_model(shape, 5, 1)
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        _close(_compiled(model, {"x": x}, tmp_path / str(shape[1])), _reference(model, {"x": x}))
    with pytest.raises(OnnxImportError, match="compare every pair"):
        from_onnx(_topk_model((2, 5000), 300, 1))


# -- Einsum ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("equation, shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,jk->i", [(2, 3), (3, 4)]),
    ("ii->i", [(4, 4)]),
    ("bii", [(2, 3, 3)]),
    ("ijk->kj", [(2, 3, 4)]),
    ("abc,cd->abd", [(2, 3, 4), (4, 5)]),
])
def test_einsum_matches_numpy(equation, shapes):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    names = [f"x{k}" for k in range(len(shapes))]
    model = _model([helper.make_node("Einsum", names, ["y"], equation=equation)],
                   [_info(n, F, list(s)) for n, s in zip(names, shapes)], [_info("y", F, None)])
    want = np.einsum(equation, *arrays)
    _close(_interpret(model, dict(zip(names, arrays))), [np.asarray(want, np.float32)], rtol=1e-4, atol=1e-5)


def test_einsum_compiles_for_cpu(tmp_path):
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    model = _model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="abc,cd->dba")],
                   [_info("a", F, [2, 3, 4]), _info("b", F, [4, 5])], [_info("y", F, None)])
    _close(_compiled(model, {"a": a, "b": b}, tmp_path), [np.einsum("abc,cd->dba", a, b)], rtol=1e-4, atol=1e-5)


# -- QLinearConv and ConvInteger ------------------------------------------------------------------


def _qconv_inputs(per_channel, bias, seed=5):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 255, (1, 4, 6, 6)).astype(np.uint8)
    w = rng.integers(-60, 60, (4, 2, 3, 3)).astype(np.int8)  # 2 groups
    channels = (4,) if per_channel else ()
    scale = (0.01 * (1 + np.arange(4))).astype(np.float32) if per_channel else np.array(0.01, np.float32)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
             numpy_helper.from_array(np.array(128, np.uint8), "xz"),
             numpy_helper.from_array(scale, "ws"),
             numpy_helper.from_array(np.zeros(channels, np.int8), "wz"),
             numpy_helper.from_array(np.array(0.05, np.float32), "ys"),
             numpy_helper.from_array(np.array(10, np.uint8), "yz")]
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias:
        inits.append(numpy_helper.from_array(rng.integers(-500, 500, (4,)).astype(np.int32), "b"))
        names.append("b")
    return x, inits, names


@pytest.mark.parametrize("per_channel, bias", [(False, False), (True, True)])
def test_qlinear_conv_matches_the_reference(per_channel, bias):
    x, inits, names = _qconv_inputs(per_channel, bias)
    node = helper.make_node("QLinearConv", names, ["y"], group=2, pads=[1, 1, 0, 0], strides=[1, 2])
    model = _model([node], [_info("x", TensorProto.UINT8, [1, 4, 6, 6])], [_info("y", TensorProto.UINT8, None)],
                   inits)
    got, want = _interpret(model, {"x": x})[0], _reference(model, {"x": x})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1  # float rounding may move a half step


def test_conv_integer_is_exact():
    rng = np.random.default_rng(6)
    x = rng.integers(0, 255, (2, 3, 5, 5)).astype(np.uint8)
    w = rng.integers(0, 255, (4, 3, 2, 2)).astype(np.uint8)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 0, 1, 0], dilations=[2, 1])
    model = _model([node], [_info("x", TensorProto.UINT8, [2, 3, 5, 5]), _info("xz", TensorProto.UINT8, [])],
                   [_info("y", TensorProto.INT32, None)],
                   [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(7, np.uint8), "wz")])
    feeds = {"x": x, "xz": np.array(100, np.uint8)}
    _close(_interpret(model, feeds), _reference(model, feeds), rtol=0, atol=0)


# -- RNN, GRU, LSTM -------------------------------------------------------------------------------


def _onnxruntime(model, feeds):
    """onnxruntime's outputs; it has no batch-first layout, so a layout=1 model runs as its layout=0
    twin (inputs and outputs transposed)."""
    import onnxruntime

    node = model.graph.node[0]
    if any(a.name == "layout" and a.i == 1 for a in node.attribute):
        twin = copy.deepcopy(model)
        next(a for a in twin.graph.node[0].attribute if a.name == "layout").i = 0
        for tensor in twin.graph.initializer:
            if tensor.name in ("initial_h", "initial_c"):
                tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).transpose(1, 0, 2), tensor.name))
        for value in twin.graph.input:
            if value.name in ("X", "initial_h", "initial_c"):
                dims = value.type.tensor_type.shape.dim
                dims[0].dim_value, dims[1].dim_value = dims[1].dim_value, dims[0].dim_value
        moved = {name: v.transpose(1, 0, 2) if name == "X" else v for name, v in feeds.items()}
        y, *states = _onnxruntime(twin, moved)
        return [y.transpose(2, 0, 1, 3), *(s.transpose(1, 0, 2) for s in states)]

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(r) for r in session.run(None, feeds)]


RECURRENT = {"RNN": (1, 0), "GRU": (3, 0), "LSTM": (4, 1)}  # gates, and whether there is a cell state


def _recurrent_model(op, direction="forward", layout=0, lengths=None, peepholes=False, weights_as_inputs=False,
                     steps=4, symbolic=False, **attrs):
    """T=4, B=3, I=2, H=5; every optional input given (as initializers, or W and R as graph inputs);
    ``symbolic``: the sequence length a dim_param "T"."""
    gates, cell = RECURRENT[op]
    batch, size, hidden = 3, 2, 5
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(7)

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    x_shape = [batch, steps, size] if layout else [steps, batch, size]
    state_shape = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    values = {"W": rand(dirs, gates * hidden, size), "R": rand(dirs, gates * hidden, hidden),
              "B": rand(dirs, 2 * gates * hidden), "initial_h": rand(*state_shape)}
    if lengths is not None:
        values["sequence_lens"] = np.array(lengths, np.int32)
    if cell:
        values["initial_c"] = rand(*state_shape)
        if peepholes:
            values["P"] = rand(dirs, 3 * hidden)
    order = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
    names = [n if n == "X" or n in values else "" for n in order]
    while not names[-1]:
        names.pop()
    outputs = ["Y", "Y_h", "Y_c"][:3 if cell else 2]
    node = helper.make_node(op, names, outputs, hidden_size=hidden, direction=direction, layout=layout, **attrs)
    declared = list(x_shape)
    if symbolic:
        declared[1 if layout else 0] = "T"
    graph_inputs = [_info("X", F, declared)]
    feeds = {"X": rand(*x_shape)}
    inits = []
    for name, value in values.items():
        if weights_as_inputs and name in ("W", "R"):
            graph_inputs.append(_info(name, F, list(value.shape)))
            feeds[name] = value
        else:
            inits.append(numpy_helper.from_array(value, name))
    model = _model([node], graph_inputs, [_info(o, F, None) for o in outputs], inits, opset=14)
    return model, feeds


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction, layout, lengths", [
    ("forward", 0, None),
    ("reverse", 1, [4, 2, 1]),
    ("bidirectional", 0, [3, 4, 1]),
])
def test_recurrent_networks_match_onnxruntime(op, direction, layout, lengths):
    model, feeds = _recurrent_model(op, direction, layout, lengths, peepholes=True)
    _close(_interpret(model, feeds), _onnxruntime(model, feeds), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op, attrs", [
    ("GRU", dict(linear_before_reset=1, clip=0.8)),
    ("LSTM", dict(input_forget=1, activations=["HardSigmoid", "Tanh", "Softsign"], activation_alpha=[0.3],
                  activation_beta=[0.4])),
    ("RNN", dict(activations=["LeakyRelu"], activation_alpha=[0.2])),
])
def test_recurrent_attributes(op, attrs):
    model, feeds = _recurrent_model(op, **attrs)
    _close(_interpret(model, feeds), _onnxruntime(model, feeds), rtol=1e-4, atol=1e-5)


def test_an_lstm_compiles_for_cpu(tmp_path):
    model, feeds = _recurrent_model("LSTM", "bidirectional", 1, [2, 4, 3], peepholes=True, weights_as_inputs=True)
    _close(_compiled(model, feeds, tmp_path), _onnxruntime(model, feeds), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_recurrent_networks_over_a_symbolic_length_recurse(op, tmp_path):
    """A symbolic sequence length: one step per call of a recursive function; one import serves
    several lengths."""
    model, _ = _recurrent_model(op, "bidirectional", 1, [3, 1, 2], peepholes=True, symbolic=True)
    mod = from_onnx(model)
    assert any(name.startswith(op.lower()) for name in mod.functions)
    for steps in (3, 5):  # onnxruntime runs the static model of that length
        static, feeds = _recurrent_model(op, "bidirectional", 1, [3, 1, 2], peepholes=True, steps=steps)
        got = interpret(mod, "main", *feeds.values())
        _close([np.asarray(g) for g in got], _onnxruntime(static, feeds), rtol=1e-4, atol=1e-5)
    if op == "LSTM":
        tessera.build(mod, "cpu").save(str(tmp_path / "exe"))
        session = tessera.InferenceSession(tmp_path / "exe", device="cpu")
        for steps in (3, 6):
            static, feeds = _recurrent_model(op, "bidirectional", 1, [3, 1, 2], peepholes=True, steps=steps)
            _close(session.run(None, feeds), _onnxruntime(static, feeds), rtol=1e-4, atol=1e-5)


def test_a_scan_over_a_symbolic_length():
    model = _scan_model((1, 0), (1, 0), (0, 1), (1, 0))
    for value, dim in ((model.graph.input[2], 1), (model.graph.input[3], 0)):  # x (3, n), z (n, 3)
        value.type.tensor_type.shape.dim[dim].dim_param = "n"
    mod = from_onnx(model)
    for n in (2, 5):
        rng = np.random.default_rng(n)
        feeds = {"s0": rng.uniform(0.5, 1.5, 3).astype(np.float32), "p0": rng.uniform(0.5, 1.5, 3).astype(np.float32),
                 "x": rng.uniform(0.5, 1.5, (3, n)).astype(np.float32),
                 "z": rng.uniform(0.5, 1.5, (n, 3)).astype(np.float32)}
        got = [np.asarray(g) for g in interpret(mod, "main", *feeds.values())]
        _close(got, _scan_numpy(feeds, (1, 0), (1, 0), (0, 1), (1, 0)))


def test_a_branch_inside_a_loop_body():
    """y += i when i is even, else y -= 1; the branch reads the body's and the graph's values."""
    even = helper.make_graph([helper.make_node("Add", ["y_in", "fi"], ["r"])], "even", [], [_info("r", F, [2])])
    odd = helper.make_graph([helper.make_node("Sub", ["y_in", "one_f"], ["r"])], "odd", [], [_info("r", F, [2])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mod", ["i", "two"], ["rem"]),
         helper.make_node("Equal", ["rem", "zero"], ["is_even"]),
         helper.make_node("If", ["is_even"], ["y_out"], then_branch=even, else_branch=odd)],
        "body", [_info("i", I64, []), _info("c", B, []), _info("y_in", F, [2])],
        [_info("c_out", B, []), _info("y_out", F, [2])],
        initializer=[helper.make_tensor("two", I64, [], [2]), helper.make_tensor("zero", I64, [], [0])])
    model = _model([helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)],
                   [_info("M", I64, []), _info("x", F, [2]), _info("one_f", F, [])], [_info("y", F, [2])])
    feeds = {"M": np.array(5, np.int64), "x": np.zeros(2, np.float32), "one_f": np.array(1, np.float32)}
    _close(_interpret(model, feeds), [np.full(2, 0 + 2 + 4 - 2, np.float32)])


def test_a_scan_output_of_unknown_shape_is_refused_naming_the_loop():
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("NonZero", ["y"], ["nz"])],
                             "b", [_info("i", I64, []), _info("c", B, []), _info("y", F, [2])],
                             [_info("c_out", B, []), _info("y", F, [2]), _info("nz", I64, None)])
    model = _model([helper.make_node("Loop", ["M", "", "y0"], ["y", "nzs"], body=body)],
                   [_info("M", I64, []), _info("y0", F, [2])], [_info("y", F, [2]), _info("nzs", I64, None)])
    with pytest.raises(OnnxImportError, match=r"node #0 \(Loop, opset 17\): scan output 0 .* shape is unknown"):
        from_onnx(model)


def test_a_constant_trip_count_without_a_condition_gives_the_stacked_size():
    model = _loop_model(with_cond=False)
    model.graph.initializer.append(numpy_helper.from_array(np.array(4, np.int64), "M"))
    del model.graph.input[0]
    mod = from_onnx(model)
    assert [int(d.value) for d in mod["main"].ret_struct_info.fields[1].shape] == [4, 2, 3]
    feeds = _loop_feeds(4, 1e9)
    del feeds["M"], feeds["cond"]
    got = [np.asarray(g) for g in interpret(mod, "main", *feeds.values())]
    _close(got, _loop_numpy(4, True, feeds["y0"], feeds["w"], 1e9))
