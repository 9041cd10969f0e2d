"""float16 through whole executables on the C targets: an ONNX graph with a float16 input and weight,
an f16 add, a multiply-add chain and casts both ways, compiled for wasm and cpu, runs in the Python VM
on both devices and in runtime-native (cpu build) bit for bit as numpy computes it in float16. The C
kernels keep f16 tensors as halves and round each f16 operation's float result to half, as a GPU's f16
arithmetic does (codegen/c). runtime-js runs the wasm build the same way (tests/js/float16.test.mjs)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tessera
from onnx import TensorProto, helper, numpy_helper
from tessera.frontend.onnx import from_onnx
from tessera.native import NativeModel

from native.build import ensure_native_build

X = np.array([0.5, -1.25, 3.0e-5, 65504.0, -0.0, 1.0009765625, np.inf, 2048.0, 0.1, -7.3], np.float16)
WEIGHT = np.array([0.25, 1.0, -3.0e-5, 65504.0, 0.0, 0.00048828125, -1.0, 1.0, 0.2, 3.3], np.float16)
# Ties between neighbouring halves (1 + 2^-11 to 1, 1 + 3 * 2^-11 up), a subnormal, overflow, NaN.
F = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 1e-6, 65520.0, -70000.0, np.nan, 0.1, -2.5, 1e-8, 3.14159],
             np.float32)


def _graph() -> onnx.ModelProto:
    """sum = x + weight, fma = sum * x + weight (each step rounded to half), wide = float(x), narrow = half(f)."""
    nodes = [helper.make_node("Add", ["x", "weight"], ["sum"]),
             helper.make_node("Mul", ["sum", "x"], ["product"]),
             helper.make_node("Add", ["product", "weight"], ["fma"]),
             helper.make_node("Cast", ["x"], ["wide"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["f"], ["narrow"], to=TensorProto.FLOAT16)]
    n = len(X)
    graph = helper.make_graph(nodes, "halves", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [n]),
                                                helper.make_tensor_value_info("f", TensorProto.FLOAT, [n])],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT16, [n]) for name in ("sum", "fma")]
                              + [helper.make_tensor_value_info("wide", TensorProto.FLOAT, [n]),
                                 helper.make_tensor_value_info("narrow", TensorProto.FLOAT16, [n])],
                              [numpy_helper.from_array(WEIGHT, "weight")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _expected() -> list[np.ndarray]:
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to infinity and inf * 0, as float16 does
        total = X + WEIGHT
        return [total, total * X + WEIGHT, X.astype(np.float32), F.astype(np.float16)]


def _assert_same_bits(got: np.ndarray, want: np.ndarray, name: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, name
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=name)
    bits = np.uint16 if want.dtype == np.float16 else np.uint32
    np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits), err_msg=name)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    folder = tmp_path_factory.mktemp("float16")
    module = from_onnx(_graph())
    out = {}
    for target in ("wasm", "cpu"):
        out[target] = str(folder / target)
        tessera.build(module, target).save(out[target])
    return out


@pytest.mark.parametrize("target", ["wasm", "cpu"])
def test_python_vm_runs_float16_on_c_devices(builds, target):
    session = tessera.InferenceSession(builds[target], device=target)
    for got, want, name in zip(session.run(None, {"x": X, "f": F}), _expected(), ("sum", "fma", "wide", "narrow")):
        _assert_same_bits(got, want, name)


def test_runtime_native_runs_float16(builds):
    ensure_native_build()
    with NativeModel(builds["cpu"], n_threads=1, device="cpu") as native:
        outputs = native.call("main", X, F)
    for got, want, name in zip(outputs, _expected(), ("sum", "fma", "wide", "narrow")):
        _assert_same_bits(got, want, name)
