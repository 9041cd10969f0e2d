"""int8 and uint8 tensors through the C API (runtime-native, cpu build): inputs, a weight from the tensor
cache and outputs cross between the host's bytes and the device's 32-bit words (int8 sign-extended, uint8
zero-extended, narrowed back to the low byte: docs/kernels.md), and the results wrap as numpy's do. int16,
uint16 and uint64 have no tessera_dtype yet: loading such an executable is refused with the dtype named."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tessera
from onnx import TensorProto, helper
from tessera.frontend.onnx import from_onnx
from tessera.native import NativeError, NativeModel

from native.build import ensure_native_build

N = 7
WEIGHT = np.array([-128, -1, 0, 1, 77, 127, -90], dtype=np.int8)


def _graph(small: int, unsigned: int) -> onnx.ModelProto:
    """a (small) + weight, a * a, and b (unsigned) * b + b: every result wraps to its dtype's range."""
    weight = helper.make_tensor("weight", small, (N,), WEIGHT.astype(helper.tensor_dtype_to_np_dtype(small)))
    nodes = [helper.make_node("Add", ["a", "weight"], ["sum"]),
             helper.make_node("Mul", ["a", "a"], ["square"]),
             helper.make_node("Mul", ["b", "b"], ["b2"]),
             helper.make_node("Add", ["b2", "b"], ["poly"])]
    graph = helper.make_graph(nodes, "narrow",
                              [helper.make_tensor_value_info("a", small, [N]),
                               helper.make_tensor_value_info("b", unsigned, [N])],
                              [helper.make_tensor_value_info("sum", small, [N]),
                               helper.make_tensor_value_info("square", small, [N]),
                               helper.make_tensor_value_info("poly", unsigned, [N])],
                              [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _build(tmp_path, small: int, unsigned: int) -> str:
    ensure_native_build()
    folder = str(tmp_path / "narrow")
    tessera.build(from_onnx(_graph(small, unsigned)), "cpu").save(folder)
    return folder


def test_int8_and_uint8_inputs_weight_and_outputs_match_numpy(tmp_path):
    folder = _build(tmp_path, TensorProto.INT8, TensorProto.UINT8)
    a = np.array([-128, -3, 0, 5, 100, 127, -77], dtype=np.int8)
    b = np.array([0, 1, 15, 16, 200, 255, 128], dtype=np.uint8)
    with NativeModel(folder, n_threads=1, device="cpu") as native:
        total, square, poly = native.call("main", a, b)
    want = (a + WEIGHT, a * a, b * b + b)  # numpy wraps int8 and uint8 arithmetic
    for got, expected in zip((total, square, poly), want):
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("small, unsigned, named", [(TensorProto.INT16, TensorProto.UINT16, "'int16'")])
def test_int16_executable_is_refused_at_load_naming_the_dtype(tmp_path, small, unsigned, named):
    folder = _build(tmp_path, small, unsigned)
    with pytest.raises(NativeError, match=f"dtype {named}, which this runtime does not support"):
        NativeModel(folder, n_threads=1, device="cpu")
