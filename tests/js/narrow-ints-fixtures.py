"""An executable with int8 and uint8 inputs, an int8 and a bool weight, for runtime-js
(tests/js/narrow-ints.test.mjs), with its inputs and numpy's outputs.

    python tests/js/narrow-ints-fixtures.py OUT_DIR TARGET [TARGET ...]     (targets: wasm, webgpu)

writes OUT_DIR/<target>/<program>/ and OUT_DIR/cases.json ({program: {"inputs": ..., "outputs": ...}}, flat
lists with their dims and types). The graphs are imported from ONNX (tessera.frontend.onnx.from_onnx):

- narrow: sum = a + weight (int8, wraps), square = a * a (int8, wraps), poly = b * b + b (uint8, wraps),
  picked = where(mask, sum, a) (int8; mask a bool weight), flags = not(mask) (bool; a folded bool weight);
- wide: the same over int16 and uint16 (an int16 weight), and big = c + c (uint64, small values: kernels
  compute uint64 in u32).

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


WIDE_WEIGHT = np.array([-32768, -1, 0, 1, 30000, 32767, -20000], dtype=np.int16)
A16 = np.array([-32768, -3, 0, 5, 10000, 32767, -30000], dtype=np.int16)
B16 = np.array([0, 1, 255, 256, 40000, 65535, 32768], dtype=np.uint16)
C64 = np.array([0, 1, 7, 1000, 65536, 123456789, 2**31 - 1], dtype=np.uint64)


def narrow_model(wide: bool = False) -> onnx.ModelProto:
    small, unsigned = (TensorProto.INT16, TensorProto.UINT16) if wide else (TensorProto.INT8, TensorProto.UINT8)
    nodes = [helper.make_node("Add", ["a", "weight"], ["sum"]),
             helper.make_node("Mul", ["a", "a"], ["square"]),
             helper.make_node("Mul", ["b", "b"], ["b2"]),
             helper.make_node("Add", ["b2", "b"], ["poly"]),
             helper.make_node("Where", ["mask", "sum", "a"], ["picked"]),
             helper.make_node("Not", ["mask"], ["flags"])]
    inputs = [helper.make_tensor_value_info("a", small, [N]), helper.make_tensor_value_info("b", unsigned, [N])]
    outputs = [helper.make_tensor_value_info("sum", small, [N]),
               helper.make_tensor_value_info("square", small, [N]),
               helper.make_tensor_value_info("poly", unsigned, [N]),
               helper.make_tensor_value_info("picked", small, [N]),
               helper.make_tensor_value_info("flags", TensorProto.BOOL, [N])]
    if wide:
        nodes.append(helper.make_node("Add", ["c", "c"], ["big"]))
        inputs.append(helper.make_tensor_value_info("c", TensorProto.UINT64, [N]))
        outputs.append(helper.make_tensor_value_info("big", TensorProto.UINT64, [N]))
    graph = helper.make_graph(nodes, "wide" if wide else "narrow", inputs, outputs,
                              [numpy_helper.from_array(WIDE_WEIGHT if wide else WEIGHT, "weight"),
                               numpy_helper.from_array(MASK, "mask")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def _tensor(array: np.ndarray) -> dict:
    return {"type": array.dtype.name, "dims": list(array.shape), "data": [int(v) for v in array.reshape(-1)]}


def _case(a: np.ndarray, b: np.ndarray, weight: np.ndarray, extra: dict) -> dict:
    total = a + weight  # numpy wraps int8, uint8, int16 and uint16 arithmetic, as the kernels do
    outputs = {"sum": total, "square": a * a, "poly": b * b + b, "picked": np.where(MASK, total, a), "flags": ~MASK}
    outputs.update({name: value + value for name, value in extra.items()})
    inputs = {"a": a, "b": b, **extra}
    return {"inputs": {name: _tensor(value) for name, value in inputs.items()},
            "outputs": {("big" if name == "c" else name): _tensor(value) for name, value in outputs.items()}}


def main(out: str, targets: list[str]) -> None:
    for name, wide in (("narrow", False), ("wide", True)):
        module = from_onnx(narrow_model(wide))
        for target in targets:
            tessera.build(module, target).save(os.path.join(out, target, name))
    cases = {"narrow": _case(A, B, WEIGHT, {}), "wide": _case(A16, B16, WIDE_WEIGHT, {"c": C64})}
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
