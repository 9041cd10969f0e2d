"""The C API's named inputs and outputs (tessera_model_inputs, tessera_model_outputs, tessera_model_run_named:
docs/native.md) on an ONNX graph imported and compiled for the cpu: the graph's input and output names reach
the C API through executable.json (the importer's output_names, the compiler's result_names), a run by name
gives numpy's answers in the order asked for, and a feed outside the bounds is an error naming the input. The
runtime-native ctest (test_model_io.c) covers each refusal; this checks the whole path from an ONNX file."""

from __future__ import annotations

import ctypes

import numpy as np
import onnx
import pytest
import tessera
from onnx import TensorProto, helper
from tessera.frontend.onnx import from_onnx
from tessera.native import NativeModel
from tessera.native.binding import MAX_NDIM, Tensor, Value

from native.build import ensure_native_build

BATCH = 4


class IO(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int32), ("has_dtype", ctypes.c_int32),
                ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32), ("shape", ctypes.c_int64 * MAX_NDIM),
                ("dims", ctypes.c_char_p * MAX_NDIM), ("upper_bounds", ctypes.c_int64 * MAX_NDIM),
                ("value", ctypes.c_char_p)]


def _graph() -> onnx.ModelProto:
    """features (batch, 3) @ weight + bias -> logits; softmax(logits) -> probs; and the row count's sum."""
    weight = helper.make_tensor("weight", TensorProto.FLOAT, (3, 2), np.arange(6, dtype=np.float32) / 6)
    bias = helper.make_tensor("bias", TensorProto.FLOAT, (2,), [0.5, -0.5])
    nodes = [helper.make_node("MatMul", ["features", "weight"], ["scores"]),
             helper.make_node("Add", ["scores", "bias"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    graph = helper.make_graph(nodes, "classifier",
                              [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 2]),
                               helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])],
                              [weight, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    ensure_native_build()
    folder = str(tmp_path_factory.mktemp("named-io") / "classifier")
    tessera.build(from_onnx(_graph(), dims={"batch": (1, BATCH)}), "cpu").save(folder)
    with NativeModel(folder, n_threads=1, device="cpu") as native:
        lib = native._lib
        for name in ("tessera_model_inputs", "tessera_model_outputs"):
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(IO), ctypes.c_int32]
            getattr(lib, name).restype = ctypes.c_int32
        lib.tessera_model_run_named.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(Value),
            ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.POINTER(Tensor))]
        lib.tessera_model_run_named.restype = ctypes.c_int
        yield folder, native


def _describe(native, which: str) -> list[tuple]:
    entries = (IO * 8)()
    count = getattr(native._lib, f"tessera_model_{which}")(native._handle, b"main", entries, 8)
    assert count >= 0, native._lib.tessera_last_error()
    return [(e.name.decode(), e.dtype, [e.dims[i].decode() for i in range(e.ndim)],
             [e.shape[i] for i in range(e.ndim)], [e.upper_bounds[i] for i in range(e.ndim)]) for e in entries[:count]]


def _run(native, feed: dict, wanted: list[str]):
    names = (ctypes.c_char_p * len(feed))(*[n.encode() for n in feed])
    values = (Value * len(feed))()
    for value, array in zip(values, feed.values()):
        value.kind, value.tensor.data, value.tensor.dtype = 0, array.ctypes.data, 0  # float32
        value.tensor.ndim = array.ndim
        for axis, size in enumerate(array.shape):
            value.tensor.shape[axis] = size
    outputs = (ctypes.POINTER(Tensor) * len(wanted))()
    wanted_names = (ctypes.c_char_p * len(wanted))(*[n.encode() for n in wanted])
    status = native._lib.tessera_model_run_named(native._handle, b"main", len(feed), names, values, len(wanted),
                                                 wanted_names, outputs)
    if status:
        return status, native._lib.tessera_last_error().decode()
    arrays = []
    for pointer in outputs:
        t = pointer.contents
        shape = tuple(t.shape[i] for i in range(t.ndim))
        arrays.append(np.ctypeslib.as_array(ctypes.cast(t.data, ctypes.POINTER(ctypes.c_float)), shape).copy())
    return 0, arrays


def test_the_graphs_names_reach_the_c_api(model):
    folder, native = model
    assert _describe(native, "inputs") == [("features", 0, ["batch", "3"], [-1, 3], [BATCH, -1])]
    assert [entry[0] for entry in _describe(native, "outputs")] == ["probs", "logits"]
    assert [arg.name for arg in tessera.InferenceSession(folder).get_outputs()] == ["probs", "logits"]


def test_a_run_by_name_gives_numpys_answers_and_names_a_bad_input(model):
    _, native = model
    weight, bias = np.arange(6, dtype=np.float32).reshape(3, 2) / 6, np.array([0.5, -0.5], np.float32)
    for batch in (1, BATCH):
        features = np.random.default_rng(batch).standard_normal((batch, 3)).astype(np.float32)
        status, (logits, probs) = _run(native, {"features": features}, ["logits", "probs"])
        expected = features @ weight + bias
        np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(probs, np.exp(expected) / np.exp(expected).sum(-1, keepdims=True), rtol=1e-5)
    status, message = _run(native, {"features": np.zeros((BATCH + 1, 3), np.float32)}, ["probs"])
    assert status == -8 and f"input 'features' of main: dimension 0 (batch) is {BATCH + 1}, above its upper bound" \
        in message
    status, message = _run(native, {"features": np.zeros((1, 3), np.float32)}, ["scores"])
    assert status == -1 and "unknown output 'scores' of main; the outputs are 'probs', 'logits'" in message
