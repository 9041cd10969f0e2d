"""Bit ops, IsInf/IsNaN, Softplus and Mish beyond the node tests' examples: every dtype's extremes,
counts past the width, float64 (compared, not read as float32 bits), |x| where the textbook formulas
lose their digits, and the refusals. Each is compared with numpy or ONNX's reference evaluator on the
reference interpreter; one graph is also compiled for "cpu"."""

from __future__ import annotations

import numpy as np
import pytest
import tessera
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from tessera.frontend import OnnxImportError, from_onnx
from tessera.ir import interpret

DTYPES = {"int8": TensorProto.INT8, "uint16": TensorProto.UINT16, "int32": TensorProto.INT32,
          "int64": TensorProto.INT64, "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
          "uint64": TensorProto.UINT64, "float16": TensorProto.FLOAT16}


def _model(op_type, dtypes, out_dtype, opset, **attrs):
    names = [f"x{i}" for i in range(len(dtypes))]
    node = helper.make_node(op_type, names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, DTYPES[d], ["n"])
                                            for n, d in zip(names, dtypes)],
                              [helper.make_tensor_value_info("y", out_dtype, ["n"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model, *inputs):
    return np.asarray(interpret(from_onnx(model), "main", *inputs))


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32", "int64"])
def test_shifts_at_every_width(dtype):
    """Opset 28's shifts: bits shifted out are lost, a negative or too large count shifts out every bit
    (a signed right shift fills with the sign), at the dtype's own width."""
    info = np.iinfo(dtype)
    x = np.array([info.min, info.max, -1 if info.min else 1, 5, 0, 3], dtype)
    bits = info.bits
    counts = np.array([1, bits - 1, bits, bits + 3, 0, 2 if info.min == 0 else -1], dtype)
    for direction in ("LEFT", "RIGHT"):
        got = _run(_model("BitShift", [dtype, dtype], DTYPES[dtype], 28, direction=direction), x, counts)
        safe = np.where((counts >= 0) & (counts < bits), counts, 0).astype(dtype)
        inside = (counts >= 0) & (counts < bits)
        if direction == "LEFT":
            want = np.where(inside, x << safe, 0).astype(dtype)
        else:
            want = np.where(inside, x >> safe, np.where(x < 0, -1, 0)).astype(dtype)
        np.testing.assert_array_equal(got, want, err_msg=direction)


def test_bitwise_and_bitcast_match_onnx_reference():
    x = np.array([-128, -1, 0, 1, 127, 85], np.int8)
    y = np.array([127, -128, -1, 3, -86, 85], np.int8)
    for op_type in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        model = _model(op_type, ["int8", "int8"], TensorProto.INT8, 18)
        np.testing.assert_array_equal(_run(model, x, y), ReferenceEvaluator(model).run(None, {"x0": x, "x1": y})[0])
    floats = np.array([1.0, -2.5, np.inf, -0.0], np.float32)
    model = _model("BitCast", ["float32"], TensorProto.INT32, 26, to=TensorProto.INT32)
    np.testing.assert_array_equal(_run(model, floats), floats.view(np.int32))


def test_is_inf_and_is_nan_of_float64_compare():
    """float64 has values float32 cannot hold (1e300 would be its infinity): they compare as doubles."""
    x = np.array([1e300, -1e300, np.inf, -np.inf, np.nan, 0.0])
    is_inf = _model("IsInf", ["float64"], TensorProto.BOOL, 20)
    np.testing.assert_array_equal(_run(is_inf, x), np.isinf(x))
    only_negative = _model("IsInf", ["float64"], TensorProto.BOOL, 20, detect_positive=0)
    np.testing.assert_array_equal(_run(only_negative, x), np.isneginf(x))
    np.testing.assert_array_equal(_run(_model("IsNaN", ["float64"], TensorProto.BOOL, 20), x), np.isnan(x))


def test_softplus_and_mish_keep_their_digits_at_large_magnitudes(tmp_path):
    """log(1 + e^x) and x tanh(log(1 + e^x)) lose every digit of e^x once 1 + e^x rounds it away,
    and overflow for large x; here both stay within float32's rounding of the exact values,
    interpreted and compiled for cpu."""
    x = np.array([-80.0, -30.0, -17.0, -9.9, -1e-3, 0.0, 1e-3, 0.5, 9.9, 17.0, 30.0, 80.0, 100.0], np.float32)
    wide = x.astype(np.float64)
    softplus = np.logaddexp(0.0, wide)
    for op_type, want in (("Softplus", softplus), ("Mish", wide * np.tanh(softplus))):
        model = _model(op_type, ["float32"], TensorProto.FLOAT, 18)
        np.testing.assert_allclose(_run(model, x), want.astype(np.float32), rtol=2e-6, atol=1e-38)
        tessera.build(from_onnx(model), "cpu").save(str(tmp_path / op_type))
        got = tessera.InferenceSession(tmp_path / op_type, device="cpu").run(None, {"x0": x})[0]
        np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-5, atol=1e-38)


def test_float16_mish_past_where_its_intermediate_overflows_and_float64_softplus(tmp_path):
    """Mish's n = e^x (e^x + 2) passes float16's largest value from x = 5.5 (n / (n + 2) would be
    NaN): float16 is computed in float32 and rounded once. Softplus in float64 keeps float64's digits
    where its log1p series stands in."""
    x = np.array([-20.0, -3.0, 1.0, 5.0, 6.0, 8.0, 12.0, 19.0, 30.0], np.float16)
    wide = x.astype(np.float64)
    want = (wide * np.tanh(np.logaddexp(0.0, wide))).astype(np.float16)
    model = _model("Mish", ["float16"], TensorProto.FLOAT16, 18)
    np.testing.assert_allclose(_run(model, x), want, rtol=2 ** -10, atol=1e-7)
    tessera.build(from_onnx(model), "cpu").save(str(tmp_path / "mish"))
    got = tessera.InferenceSession(tmp_path / "mish", device="cpu").run(None, {"x0": x})[0]
    np.testing.assert_allclose(got, want, rtol=2 ** -10, atol=1e-7)
    x64 = np.array([-30.0, -5.0, -4.7, -1e-3, 0.25, 3.0], np.float64)
    np.testing.assert_allclose(_run(_model("Softplus", ["float64"], TensorProto.DOUBLE, 18), x64),
                               np.logaddexp(0.0, x64), rtol=1e-14, atol=0)


def test_bit_cast_to_its_own_type_keeps_the_value(tmp_path):
    x = np.array([1.5, -2.0, 3.0e38, -0.0], np.float32)
    model = _model("BitCast", ["float32"], TensorProto.FLOAT, 26, to=TensorProto.FLOAT)
    want = ReferenceEvaluator(model).run(None, {"x0": x})[0]
    np.testing.assert_array_equal(_run(model, x), want)
    # the op itself too, as the torch importer or hand-written IR may use it
    from conformance.cases import one_function
    from tessera import op
    from tessera.ir import Tensor

    mod = one_function(lambda v: op.bitcast(v, dtype="float32"), [Tensor(("n",), "float32")], {"n": 16})
    tessera.build(mod, "cpu").save(str(tmp_path / "bitcast"))
    got = tessera.InferenceSession(tmp_path / "bitcast", device="cpu").run(None, {"x0": x})[0]
    np.testing.assert_array_equal(got.view(np.uint32), x.view(np.uint32))


def test_refusals_are_clear():
    with pytest.raises(OnnxImportError, match="BitShift.*direction='UP' must be LEFT or RIGHT"):
        from_onnx(_model("BitShift", ["int32", "int32"], TensorProto.INT32, 28, direction="UP"))
    with pytest.raises(OnnxImportError, match="BitCast.*input 0 is int32, 'to' is int8"):
        from_onnx(_model("BitCast", ["int32"], TensorProto.INT8, 26, to=TensorProto.INT8))
    # uint64 is computed in one 32-bit word: its not would need the high word's ones.
    model = _model("BitwiseNot", ["uint64"], TensorProto.UINT64, 18)
    with pytest.raises(tessera.ir.errors.TesseraError, match="uint64 is not supported by target"):
        tessera.build(from_onnx(model), "wasm")
