"""from_onnx on small hand-built models: parameters, shape variables and bounds, weights and external
data, and every bad input one clear OnnxImportError."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tessera.frontend import OnnxImportError, from_onnx
from tessera.ir import interpret


def _model(nodes, inputs, outputs, initializers=(), opset=17, domain_opsets=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    imports = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in domain_opsets)]
    return helper.make_model(graph, opset_imports=imports)


def _dense(batch="batch"):
    weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])
    return _model(nodes, [x], [y], [weight])


def test_dim_params_become_shared_bounded_variables():
    mod = from_onnx(_dense(), dims={"batch": (1, 8)})
    main = mod["main"]
    assert [p.name_hint for p in main.params] == ["x"]
    assert str(main.params[0].struct_info.shape[0]) == "batch"
    assert main.attr("tir_var_upper_bound") == {"batch": 8}
    assert main.attr("tir_var_lower_bound") == {"batch": 1}
    x = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)
    want = np.maximum(x @ (np.arange(12, dtype=np.float32).reshape(4, 3) / 10), 0)
    np.testing.assert_allclose(interpret(mod, "main", x), want, rtol=1e-6)


def test_shapes_fix_an_input_and_unnamed_dims_get_their_own_variable():
    mod = from_onnx(_dense(batch=None), shapes={"x": (2, 4)})
    assert tuple(int(d.value) for d in mod["main"].params[0].struct_info.shape) == (2, 4)
    free = from_onnx(_dense(batch=None))["main"].params[0].struct_info.shape[0]
    assert str(free) == "x_dim0"
    with pytest.raises(OnnxImportError, match="size 5 on axis 1"):
        from_onnx(_dense(), shapes={"x": (2, 5)})
    with pytest.raises(OnnxImportError, match="no input"):
        from_onnx(_dense(), shapes={"nope": (2, 4)})
    with pytest.raises(OnnxImportError, match="'seq'"):
        from_onnx(_dense(), dims={"seq": (1, 4)})


def _clear(error) -> str:
    return str(error.value)


def test_unknown_op_old_opset_and_foreign_domain_name_the_node():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    unknown = _model([helper.make_node("Frobnicate", ["x"], ["y"], name="f1")], [x], [y])
    with pytest.raises(OnnxImportError) as error:
        from_onnx(unknown)
    assert "node 'f1' (Frobnicate, opset 17)" in _clear(error)
    old = _model([helper.make_node("Relu", ["x"], ["y"])], [x], [y], opset=9)
    with pytest.raises(OnnxImportError, match="opset is 9"):
        from_onnx(old)
    foreign = _model([helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")], [x], [y],
                     domain_opsets=[("com.microsoft", 1)])
    with pytest.raises(OnnxImportError, match=r"node #0 \(Gelu, opset 17\): domain 'com.microsoft'"):
        from_onnx(foreign)
    unsupported_attr = _model([helper.make_node("Relu", ["x"], ["y"], bogus=1)], [x], [y])
    with pytest.raises(OnnxImportError, match="attribute bogus"):
        from_onnx(unsupported_attr)


def test_truncated_file_names_the_file(tmp_path):
    path = tmp_path / "model.onnx"
    data = _dense().SerializeToString()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(OnnxImportError, match="model.onnx is not a valid ONNX model"):
        from_onnx(path)


def _external_model(tmp_path, location, length=None):
    weight = np.arange(12, dtype=np.float32).reshape(4, 3)
    (tmp_path / "weights.bin").write_bytes(weight.tobytes())
    model = _dense()
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(length or weight.nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path, weight


def test_external_data_is_read_from_the_models_folder(tmp_path):
    path, weight = _external_model(tmp_path, "weights.bin")
    mod = from_onnx(path)
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(interpret(mod, "main", x), np.maximum(x @ weight, 0))


@pytest.mark.parametrize("location", ["../weights.bin", "/etc/passwd", "link.bin"])
def test_external_data_outside_the_folder_is_refused(tmp_path, location):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "weights.bin").write_bytes(b"\0" * 48)
    os.symlink(tmp_path / "weights.bin", folder / "link.bin")
    path, _ = _external_model(folder, location)
    with pytest.raises(OnnxImportError, match="external data path"):
        from_onnx(path)


def test_external_data_longer_than_its_file_is_refused(tmp_path):
    path, _ = _external_model(tmp_path, "weights.bin", length=4800)
    with pytest.raises(OnnxImportError, match="which holds 48"):
        from_onnx(path)


def test_if_becomes_a_relax_if_that_runs_either_branch():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])

    def branch(op, name):
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [3])
        return helper.make_graph([helper.make_node(op, ["x"], [f"{name}_out"])], name, [], [out])

    node = helper.make_node("If", ["c"], ["y"], then_branch=branch("Relu", "then"), else_branch=branch("Neg", "else"))
    mod = from_onnx(_model([node], [x, cond], [y]))
    data = np.array([-1.0, 0.5, 2.0], np.float32)
    np.testing.assert_array_equal(interpret(mod, "main", data, np.array(True)), np.maximum(data, 0))
    np.testing.assert_array_equal(interpret(mod, "main", data, np.array(False)), -data)


def _symbolic_shapes_model():
    """The shape subgraphs exporters write: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, a Range
    up to a dimension Expanded to (batch, seq), ConstantOfShape, and a Shape used as data."""
    def ints(name, values):
        return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)

    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        helper.make_node("Unsqueeze", ["seq", "axes0"], ["seq1"]),
        helper.make_node("Mul", ["seq1", "four"], ["flat1"]),
        helper.make_node("Concat", ["batch1", "flat1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Range", ["zero", "seq", "one"], ["positions"]),
        helper.make_node("Concat", ["batch1", "seq1"], ["batch_seq"], axis=0),
        helper.make_node("Expand", ["positions", "batch_seq"], ["grid"]),
        helper.make_node("ConstantOfShape", ["batch_seq"], ["ones"],
                         value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("Cast", ["shape"], ["shape_f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["ones", "shape_f_last"], ["ones_plus"]),
        helper.make_node("Slice", ["shape_f", "minus1", "big"], ["shape_f_last"]),
    ]
    nodes = nodes[:12] + [nodes[12], nodes[14], nodes[13]]
    inits = [ints("zero", 0), ints("one", 1), ints("axes0", [0]), ints("four", [4]), ints("minus1", [-1]),
             ints("big", [2 ** 62])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])
    outs = [helper.make_tensor_value_info("flat", TensorProto.FLOAT, ["batch", None]),
            helper.make_tensor_value_info("grid", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("ones_plus", TensorProto.FLOAT, ["batch", "seq"]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [3])]
    return _model(nodes, [x], outs, inits)


def test_shape_subgraphs_become_symbolic_shapes():
    mod = from_onnx(_symbolic_shapes_model(), dims={"batch": (1, 4), "seq": (1, 16)})
    shapes = [tuple(str(d) for d in s.shape) for s in mod["main"].ret_struct_info.fields]
    assert shapes == [("batch", "seq * 4"), ("batch", "seq"), ("batch", "seq"), ("3",)]
    import tessera

    session = tessera.InferenceSession(tessera.build(mod, "cpu"), device="cpu")
    for batch, seq in ((1, 5), (3, 2)):
        x = np.arange(batch * seq * 4, dtype=np.float32).reshape(batch, seq, 4)
        results = interpret(mod, "main", x)
        for got, want in zip(session.run(None, {"x": x}), results):
            np.testing.assert_array_equal(got, want)
        flat, grid, ones_plus, shape = results
        np.testing.assert_array_equal(flat, x.reshape(batch, seq * 4))
        np.testing.assert_array_equal(grid, np.broadcast_to(np.arange(seq), (batch, seq)))
        np.testing.assert_array_equal(ones_plus, np.full((batch, seq), 5.0, np.float32))
        np.testing.assert_array_equal(shape, [batch, seq, 4])


def test_a_shape_that_depends_on_the_data_is_refused():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    target = helper.make_tensor_value_info("target", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])
    model = _model([helper.make_node("Reshape", ["x", "target"], ["y"], name="r")], [x, target], [y])
    with pytest.raises(OnnxImportError, match="node 'r' .*depends on the data at run time"):
        from_onnx(model)


@pytest.mark.parametrize("declared, message", [
    ((TensorProto.FLOAT, ["batch", 5]), "declared with 5 on axis 1"),
    ((TensorProto.FLOAT, ["batch"]), "declared of rank 1"),
    ((TensorProto.INT64, ["batch", 3]), "declared int64"),
])
def test_a_declared_output_that_contradicts_the_graph_is_invalid(declared, message):
    model = _dense()
    model.graph.output.pop()
    model.graph.output.append(helper.make_tensor_value_info("y", *declared))
    with pytest.raises(OnnxImportError, match=f"graph output 'y' .*{message}") as error:
        from_onnx(model)
    assert error.value.kind == "invalid"


def test_resize_with_a_dynamic_batch_and_sizes_from_shape():
    """Only the resized axes need static sizes; sizes computed from Shape (an exporter's upsample)."""
    def ints(name, values):
        return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)

    nodes = [helper.make_node("Shape", ["x"], ["shape"], start=0, end=2),
             helper.make_node("Concat", ["shape", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest"),
             helper.make_node("Resize", ["x", "", "scales"], ["z"], mode="linear")]
    scales = numpy_helper.from_array(np.asarray([1, 1, 2, 2], dtype=np.float32), "scales")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 3, 3])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 2, 6, 6]) for n in ("y", "z")]
    mod = from_onnx(_model(nodes, [x], outs, [ints("hw", [6, 6]), scales], opset=18), dims={"batch": (1, 4)})
    for batch in (1, 3):
        data = np.arange(batch * 18, dtype=np.float32).reshape(batch, 2, 3, 3)
        y, z = interpret(mod, "main", data)
        np.testing.assert_array_equal(y, data.repeat(2, axis=2).repeat(2, axis=3))
        assert z.shape == (batch, 2, 6, 6)
