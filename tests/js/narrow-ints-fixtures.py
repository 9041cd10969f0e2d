"""An executable with int8 and uint8 inputs, an int8 and a bool weight, for runtime-js
(tests/js/narrow-ints.test.mjs), with its inputs and numpy's outputs.

    python tests/js/narrow-ints-fixtures.py OUT_DIR TARGET [TARGET ...]     (targets: wasm, webgpu)

writes OUT_DIR/<target>/narrow/ and OUT_DIR/cases.json ({"inputs": ..., "outputs": ...}, flat lists with
their dims and types). The graph is imported from ONNX (tessera.frontend.onnx.from_onnx):

    sum = a + weight (int8, wraps)         square = a * a (int8, wraps)
    poly = b * b + b (uint8, wraps)        picked = where(mask, sum, a) (int8; mask a bool weight)
    flags = not(mask) (bool)

Such tensors are one 32-bit word per element on a device (docs/kernels.md), bytes on the host: every
value here crosses that boundary in both directions, and the chosen values wrap.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..")]

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import tessera  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tessera.frontend.onnx import from_onnx  # noqa: E402

N = 7
WEIGHT = np.array([-128, -1, 0, 1, 77, 127, -90], dtype=np.int8)
MASK = np.array([True, False, True, True, False, True, False])
A = np.array([-128, -3, 0, 5, 100, 127, -77], dtype=np.int8)
B = np.array([0, 1, 15, 16, 200, 255, 128], dtype=np.uint8)


def narrow_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["a", "weight"], ["sum"]),
             helper.make_node("Mul", ["a", "a"], ["square"]),
             helper.make_node("Mul", ["b", "b"], ["b2"]),
             helper.make_node("Add", ["b2", "b"], ["poly"]),
             helper.make_node("Where", ["mask", "sum", "a"], ["picked"]),
             helper.make_node("Not", ["mask"], ["flags"])]
    graph = helper.make_graph(
        nodes, "narrow",
        [helper.make_tensor_value_info("a", TensorProto.INT8, [N]), helper.make_tensor_value_info("b", TensorProto.UINT8, [N])],
        [helper.make_tensor_value_info("sum", TensorProto.INT8, [N]),
         helper.make_tensor_value_info("square", TensorProto.INT8, [N]),
         helper.make_tensor_value_info("poly", TensorProto.UINT8, [N]),
         helper.make_tensor_value_info("picked", TensorProto.INT8, [N]),
         helper.make_tensor_value_info("flags", TensorProto.BOOL, [N])],
        [numpy_helper.from_array(WEIGHT, "weight"), numpy_helper.from_array(MASK, "mask")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def _tensor(array: np.ndarray) -> dict:
    return {"type": array.dtype.name, "dims": list(array.shape), "data": [int(v) for v in array.reshape(-1)]}


def main(out: str, targets: list[str]) -> None:
    module = from_onnx(narrow_model())
    for target in targets:
        tessera.build(module, target).save(os.path.join(out, target, "narrow"))
    total = A + WEIGHT  # numpy wraps int8 and uint8 arithmetic, as the kernels do
    outputs = {"sum": total, "square": A * A, "poly": B * B + B, "picked": np.where(MASK, total, A), "flags": ~MASK}
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({"inputs": {"a": _tensor(A), "b": _tensor(B)},
                   "outputs": {name: _tensor(value) for name, value in outputs.items()}}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
