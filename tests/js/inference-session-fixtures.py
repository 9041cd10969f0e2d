"""Executables for runtime-js's InferenceSession tests (tests/js/inference-session.test.mjs in Node,
tests/browser/inference-session.test.mjs in Chromium), with inputs and the expected outputs.

    python tests/js/inference-session-fixtures.py OUT_DIR TARGET [TARGET ...]     (targets: wasm, webgpu)
    python tests/js/inference-session-fixtures.py --onnx PATH      (the ONNX classifier, with labels)

writes OUT_DIR/<target>/<program>/ (`tessera.build(...).save`, as `tessera compile` writes) and
OUT_DIR/cases.json: for each program its calls, each with its inputs and the reference outputs (flat
lists, with their dims and types). The programs:

- pair: main(x0: (n, 4) float32, x1: (n, 4) float32, x2: (n,) int64) -> (x0 + x1, x0 * x1, x2 + x2), n <= 8;
- cnn: the conformance suite's MobileNet-style CNN (an image (1, 3, 32, 32) -> 10 logits), compared with the
  reference interpreter;
- onnx: a small ONNX image classifier (Conv, Relu, GlobalAveragePool, Flatten, Gemm, Softmax) with a
  symbolic batch (dim_param "batch", 1..4), imported by tessera.frontend.from_onnx and compared with onnx's
  reference evaluator.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "conformance")]

import numpy as np  # noqa: E402
import tessera  # noqa: E402
from cases import CASES, one_function  # noqa: E402
from generate import expected_outputs  # noqa: E402
from tessera import op  # noqa: E402
from tessera.ir import Tensor  # noqa: E402

BOUND = 8
ONNX_BATCH = 4


def pair_module():
    return one_function(lambda x, y, ids: (op.add(x, y), op.multiply(x, y), op.add(ids, ids)),
                        [Tensor(("n", 4), "float32"), Tensor(("n", 4), "float32"), Tensor(("n",), "int64")],
                        {"n": BOUND})


def onnx_model():
    """A classifier over (batch, 3, 8, 8) images into 5 classes, with random weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(36)
    weights = {"conv_w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.5,
               "conv_b": rng.standard_normal(4).astype(np.float32) * 0.1,
               "fc_w": rng.standard_normal((5, 4)).astype(np.float32),
               "fc_b": rng.standard_normal(5).astype(np.float32) * 0.1}
    nodes = [helper.make_node("Conv", ["pixel_values", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["relu"]),
             helper.make_node("GlobalAveragePool", ["relu"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["flat"]),
             helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
             helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1)]
    graph = helper.make_graph(
        nodes, "classifier",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 5])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _tensor(array) -> dict:
    array = np.asarray(array)
    values = array.reshape(-1)
    values = [int(v) for v in values] if array.dtype.kind in "iub" else [float(v) for v in values]
    return {"type": {"float32": "float32", "int64": "int64", "int32": "int32", "bool": "bool"}[array.dtype.name],
            "dims": list(array.shape), "data": values}


def _calls(names, arg_lists, output_lists) -> list:
    return [{"inputs": {name: _tensor(a) for name, a in zip(names, args)}, "outputs": [_tensor(o) for o in outputs]}
            for args, outputs in zip(arg_lists, output_lists)]


def cases() -> tuple[dict, dict]:
    """(program -> IR module, program -> {inputs, calls})."""
    from onnx.reference import ReferenceEvaluator
    from tessera.frontend import from_onnx

    rng = np.random.default_rng(0)
    modules, described = {}, {}
    modules["pair"] = pair_module()
    pair_args = []
    for n in (1, 5, BOUND):
        x, y = rng.standard_normal((2, n, 4)).astype(np.float32)
        pair_args.append((x, y, rng.integers(-1000, 1000, n)))
    described["pair"] = {"calls": _calls(["x0", "x1", "x2"], pair_args, [(x + y, x * y, i + i) for x, y, i in pair_args])}

    spec = CASES["cnn-mobilenet"]()
    modules["cnn"] = spec.module
    described["cnn"] = {"calls": _calls(["image"], [c.args for c in spec.calls], expected_outputs(spec)),
                        "rtol": max(spec.rtol, 1e-4), "atol": max(spec.atol, 1e-4)}

    model = onnx_model()
    modules["onnx"] = from_onnx(model, dims={"batch": (1, ONNX_BATCH)})
    reference = ReferenceEvaluator(model)
    images = [rng.standard_normal((b, 3, 8, 8)).astype(np.float32) for b in (1, 3, ONNX_BATCH)]
    described["onnx"] = {"calls": _calls(["pixel_values"], [(i,) for i in images],
                                         [reference.run(None, {"pixel_values": i}) for i in images]),
                         "rtol": 1e-4, "atol": 1e-5}
    return modules, described


LABELS = ["cat", "dog", "fish", "bird", "frog"]


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--onnx":  # the classifier alone, with labels, for `tessera bundle`
        import onnx

        model = onnx_model()
        onnx.helper.set_model_props(model, {"labels": json.dumps(LABELS)})
        onnx.save(model, argv[1])
        return 0
    if len(argv) < 2:
        print(__doc__)
        return 2
    out, targets = argv[0], argv[1:]
    modules, described = cases()
    for target in targets:
        for name, module in modules.items():
            tessera.build(module, target).save(os.path.join(out, target, name))
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(described, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
