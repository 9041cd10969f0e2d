"""float64 through whole executables: an ONNX graph that computes in double (a float64 weight, a
cast from float32, log-sum-exp, exp) compiled for wasm and cpu runs in the Python VM on both devices
as numpy does in float64. The other runtimes have no float64 host tensors: runtime-native refuses such
an executable at load and runtime-js's InferenceSession refuses a float64 input when it is created,
each naming float64 (no run with a wrong layout); runtime-js's WASM VM runs one whose float64 stays
inside (a float32 input and output, a float64 weight)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
import tessera
from onnx import TensorProto, helper
from tessera.frontend.onnx import from_onnx
from tessera.native import NativeError, NativeModel

from native.build import REPO, ensure_native_build

WEIGHT = np.array([1.0 / 3.0, -2.5, 1e-9, 7.0, np.pi], dtype=np.float64)
X = np.array([[0.25, -1.5, 2.0, 0.0, 1.0 / 7.0], [3.0, -0.125, 0.5, -2.0, 1e-3]], dtype=np.float32)


def _graph(double_input: bool, double_output: bool = True) -> onnx.ModelProto:
    """y = exp(x64 * weight - logsumexp(x64 * weight, axis 1)), x64 = double(x); z = float(y)."""
    x_type = TensorProto.DOUBLE if double_input else TensorProto.FLOAT
    nodes = [helper.make_node("Cast", ["x"], ["x64"], to=TensorProto.DOUBLE),
             helper.make_node("Mul", ["x64", "weight"], ["scaled"]),
             helper.make_node("ReduceLogSumExp", ["scaled"], ["lse"], axes=[1], keepdims=1),
             helper.make_node("Sub", ["scaled", "lse"], ["shifted"]),
             helper.make_node("Exp", ["shifted"], ["y"]),
             helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2, 5])] if double_output else []
    graph = helper.make_graph(nodes, "double", [helper.make_tensor_value_info("x", x_type, [2, 5])],
                              outputs + [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 5])],
                              [helper.make_tensor("weight", TensorProto.DOUBLE, (5,), WEIGHT)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _expected(x: np.ndarray) -> np.ndarray:
    scaled = x.astype(np.float64) * WEIGHT
    peak = scaled.max(axis=1, keepdims=True)
    lse = peak + np.log(np.exp(scaled - peak).sum(axis=1, keepdims=True))
    return np.exp(scaled - lse)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    folder = tmp_path_factory.mktemp("float64")
    out = {}
    for target in ("wasm", "cpu"):
        for double_input in (False, True):
            path = str(folder / f"{target}-{'double' if double_input else 'float'}")
            tessera.build(from_onnx(_graph(double_input)), target).save(path)
            out[target, double_input] = path
    out["inside"] = str(folder / "wasm-inside")
    tessera.build(from_onnx(_graph(False, double_output=False)), "wasm").save(out["inside"])
    return out


@pytest.mark.parametrize("target", ["wasm", "cpu"])
@pytest.mark.parametrize("double_input", [False, True])
def test_python_vm_runs_float64_on_c_devices(builds, target, double_input):
    session = tessera.InferenceSession(builds[target, double_input], device=target)
    x = X.astype(np.float64) if double_input else X
    y, z = session.run(None, {"x": x})
    assert y.dtype == np.float64 and z.dtype == np.float32
    np.testing.assert_allclose(y, _expected(X), rtol=1e-13, atol=0)
    np.testing.assert_array_equal(z, y.astype(np.float32))


def test_runtime_native_refuses_float64_at_load(builds):
    ensure_native_build()
    with pytest.raises(NativeError, match="dtype 'float64', which this runtime does not support"):
        NativeModel(builds["cpu", True], n_threads=1, device="cpu")


JS_SESSION = """
import { InferenceSession, Tensor } from "%(runtime)s";
import { fileFetch, NO_CACHE } from "%(bundle)s";
try {
  const session = await InferenceSession.create(%(url)s, { fetchFn: fileFetch, cache: NO_CACHE, device: "wasm" });
  const out = await session.run({ x: new Tensor("float32", Float32Array.from(%(x)s), [2, 5]) });
  console.log(JSON.stringify({ created: true, z: [...out.z.data] }));
} catch (error) {
  console.log(JSON.stringify({ created: false, name: error.name, message: error.message }));
}
"""


def _js_session(folder: str) -> dict:
    """What runtime-js (in Node, on its WASM device) makes of the executable in ``folder``, fed X."""
    script = JS_SESSION % {"runtime": Path(REPO, "runtime-js", "src", "tessera.js").as_uri(),
                           "bundle": Path(REPO, "tests", "browser", "bundle.mjs").as_uri(),
                           "url": json.dumps(Path(folder).as_uri() + "/"), "x": json.dumps(X.ravel().tolist())}
    result = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True,
                            cwd=REPO, timeout=120, env=dict(os.environ))
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_runtime_js_runs_float64_kept_inside_the_executable(builds):
    verdict = _js_session(builds["inside"])
    assert verdict["created"], verdict
    np.testing.assert_allclose(np.array(verdict["z"]), _expected(X).astype(np.float32).ravel(), rtol=1e-6, atol=0)


def test_runtime_js_refuses_a_float64_input_when_created(builds):
    verdict = _js_session(builds["wasm", True])
    assert not verdict["created"]
    assert verdict["name"] == "InferenceSessionError"
    assert "input 'x' is a float64 tensor, which this runtime does not move" in verdict["message"]
