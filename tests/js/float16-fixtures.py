"""An executable with float16 inputs, a float16 weight and float16 results, built for WASM, for
runtime-js (tests/js/float16.test.mjs), with its inputs and numpy's outputs.

    python tests/js/float16-fixtures.py OUT_DIR

writes OUT_DIR/wasm/halves/ and OUT_DIR/cases.json (flat lists of bits: a float16 as its uint16 bits,
a float32 as its uint32 bits, so that infinities and NaN survive JSON). The graph, imported from ONNX:
sum = x + weight (float16), wide = Cast(x, float) and narrow = Cast(f, float16), where f holds ties
between neighbouring halves, a subnormal, a value that rounds to infinity and NaN. On the WASM device
f16 tensors are halves computed as floats (codegen/c); the host keeps their bits (a Uint16Array).
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

X = np.array([0.5, -1.25, 3.0e-5, 65504.0, -0.0, 1.0009765625, np.inf, 2048.0], np.float16)
WEIGHT = np.array([0.25, 1.0, -3.0e-5, 65504.0, 0.0, 0.00048828125, -1.0, 1.0], np.float16)
# 1 + 2^-11 is a tie (to 1), 1 + 3 * 2^-11 a tie (to 1 + 2^-9), then a subnormal, overflow and NaN.
F = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 1e-6, 65520.0, -70000.0, np.nan, 0.1, -2.5], np.float32)
N = len(X)


def model() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x", "weight"], ["sum"]),
             helper.make_node("Cast", ["x"], ["wide"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["f"], ["narrow"], to=TensorProto.FLOAT16)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [N]),
              helper.make_tensor_value_info("f", TensorProto.FLOAT, [N])]
    outputs = [helper.make_tensor_value_info("sum", TensorProto.FLOAT16, [N]),
               helper.make_tensor_value_info("wide", TensorProto.FLOAT, [N]),
               helper.make_tensor_value_info("narrow", TensorProto.FLOAT16, [N])]
    graph = helper.make_graph(nodes, "halves", inputs, outputs, [numpy_helper.from_array(WEIGHT, "weight")])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(onnx_model)
    return onnx_model


def _bits(array: np.ndarray) -> dict:
    unsigned = {2: np.uint16, 4: np.uint32}[array.dtype.itemsize]
    return {"type": array.dtype.name, "dims": list(array.shape), "bits": [int(v) for v in array.view(unsigned)]}


def main(out: str) -> None:
    tessera.build(from_onnx(model()), "wasm").save(os.path.join(out, "wasm", "halves"))
    with np.errstate(over="ignore"):  # 65520 and -70000 round to infinities, as ONNX's Cast does
        outputs = {"sum": X + WEIGHT, "wide": X.astype(np.float32), "narrow": F.astype(np.float16)}
    case = {"inputs": {"x": _bits(X), "f": _bits(F)}, "outputs": {k: _bits(v) for k, v in outputs.items()}}
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({"halves": case}, f)


if __name__ == "__main__":
    main(sys.argv[1])
