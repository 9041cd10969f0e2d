"""Executables for runtime-js's InferenceSession tests (tests/js/inference-session.test.mjs in Node,
tests/browser/inference-session.test.mjs in Chromium), with inputs and the expected outputs.

    python tests/js/inference-session-fixtures.py OUT_DIR TARGET [TARGET ...]     (targets: wasm, webgpu)
    python tests/js/inference-session-fixtures.py --onnx PATH      (the ONNX classifier, with labels)
    python tests/js/inference-session-fixtures.py --mobilenet DIR  (MobileNetV2 for wasm, onnxruntime's outputs)

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
MOBILENET_BATCH = 2


def mobilenet_onnx(path: str) -> None:
    """transformers' MobileNetV2 at its real size (224 x 224, 10 classes), random weights at a scale that keeps
    activations alive through its 52 convolutions, exported by torch.onnx.export with a symbolic batch."""
    import torch
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    torch.manual_seed(36)
    model = MobileNetV2ForImageClassification(MobileNetV2Config(image_size=224, num_labels=10)).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            elif isinstance(module, torch.nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.1, 0.1)
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
            elif isinstance(module, torch.nn.Linear):
                torch.nn.init.normal_(module.weight, std=0.1)
    torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), path, input_names=["pixel_values"],
                      output_names=["logits"], opset_version=17, dynamo=False,
                      dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}})


def mobilenet(out: str) -> None:
    """OUT/wasm/ (MobileNetV2 compiled for wasm, batch 1..2), OUT/model.onnx, and per batch size the input
    (input-B.bin, float32) and onnxruntime's logits (logits-B.json). Made once per compiler and fixture
    script (OUT/stamp): the Node and Chromium tests share it; a concurrent maker's copy is dropped."""
    import hashlib
    import shutil

    import onnxruntime
    from tessera.app.compile import compiler_fingerprint
    from tessera.frontend import from_onnx

    with open(os.path.abspath(__file__), "rb") as f:
        stamp = hashlib.sha256(compiler_fingerprint().encode() + f.read()).hexdigest()
    stamp_path = os.path.join(out, "stamp")
    if os.path.exists(stamp_path) and open(stamp_path).read() == stamp:
        return
    work = f"{out}.tmp-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model_path = os.path.join(work, "model.onnx")
    mobilenet_onnx(model_path)
    tessera.build(from_onnx(model_path, dims={"batch": (1, MOBILENET_BATCH)}), "wasm").save(os.path.join(work, "wasm"))
    session = onnxruntime.InferenceSession(model_path)
    rng = np.random.default_rng(36)
    for batch in range(1, MOBILENET_BATCH + 1):
        pixels = rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
        pixels.tofile(os.path.join(work, f"input-{batch}.bin"))
        [logits] = session.run(None, {"pixel_values": pixels})
        with open(os.path.join(work, f"logits-{batch}.json"), "w") as f:
            json.dump(logits.reshape(-1).tolist(), f)
    with open(os.path.join(work, "stamp"), "w") as f:
        f.write(stamp)
    shutil.rmtree(out, ignore_errors=True)
    try:
        os.rename(work, out)
    except OSError:  # another maker was first: its copy is the same
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--mobilenet":
        mobilenet(argv[1])
        return 0
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
