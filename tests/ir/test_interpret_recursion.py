"""The reference interpreter runs deep recursion: an ONNX Loop is a function that calls itself once
per iteration, so a loop of a thousand iterations nests a thousand calls. A runaway recursion is one
clear error at the Python VM's limit (10,000 calls), not Python's RecursionError."""

import sys

import numpy as np
import pytest
from onnx import TensorProto, helper
from tessera.frontend import from_onnx
from tessera.ir import interpret
from tessera.ir.errors import TesseraError
from tessera.ir.interpreter import MAX_CALL_DEPTH
from tessera.script import from_source


def _loop(trips: int):
    """``Loop`` of ``trips`` iterations (a constant trip count, no condition): acc += step, and each
    iteration's new acc stacked as a scan output."""
    float2 = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("acc_in", "acc_out", "row")]
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["row"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), float2[0]],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), float2[1], float2[2]],
        [helper.make_tensor("step", TensorProto.FLOAT, [2], [1.5, -1.0])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "x"], ["y", "rows"], body=body)],
        "loop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("rows", TensorProto.FLOAT, [trips, 2])],
        [helper.make_tensor("trips", TensorProto.INT64, [], [trips])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_loop_of_a_thousand_iterations_runs_in_the_interpreter():
    limit = sys.getrecursionlimit()
    x = np.array([0.25, 3.0], np.float32)
    y, rows = interpret(from_onnx(_loop(1000)), "main", x)
    step = np.array([1.5, -1.0], np.float32)
    want_rows = x + step * np.arange(1, 1001, dtype=np.float32)[:, None]
    np.testing.assert_allclose(rows, want_rows, rtol=1e-5)
    np.testing.assert_allclose(y, want_rows[-1], rtol=1e-5)
    assert sys.getrecursionlimit() == limit  # raised only while the deep calls ran


RUNAWAY = '''
@I.ir_module
class Module:
    @R.function
    def down(x: R.Tensor((2,), dtype="float32")) -> R.Tensor((2,), dtype="float32"):
        y: R.Tensor((2,), dtype="float32") = R.add(x, R.const(1.0, "float32"))
        r: R.Tensor((2,), dtype="float32") = cls.down(y)
        return r
'''


def test_a_runaway_recursion_is_one_clear_error_at_the_vms_depth():
    with pytest.raises(TesseraError) as caught:
        interpret(from_source(RUNAWAY), "down", np.zeros(2, np.float32))
    message = str(caught.value)
    assert f"deeper than {MAX_CALL_DEPTH}" in message and "down" in message
    assert len(message) < 200  # not one "(in ...)" per calling binding
    assert MAX_CALL_DEPTH == 10000  # the Python VM's limit (docs/programs.md)


def test_an_error_deep_in_the_recursion_reaches_the_caller_with_numpys_errstate():
    """An error raised on the deep calls' thread is raised to the caller, and the caller's
    np.errstate holds there too: overflow to inf raises FloatingPointError, which names the binding."""
    text = RUNAWAY.replace("R.const(1.0,", "R.const(1e35,")  # inf after ~3,400 calls
    with np.errstate(over="raise"), pytest.raises(TesseraError, match="FloatingPointError") as caught:
        interpret(from_source(text), "down", np.zeros(2, np.float32))
    assert str(caught.value).count("cls.down(y)") == 1  # the calling binding named once, not 3,400 times


THROUGH_A_VARIABLE = '''
@I.ir_module
class Module:
    @R.function
    def down(x: R.Tensor((2,), dtype="float32"), n: R.Tensor((), dtype="int64")) -> R.Tensor((2,), dtype="float32"):
        done: R.Tensor((), dtype="bool") = R.equal(n, R.const(0, "int64"))
        if done:
            r: R.Tensor((2,), dtype="float32") = x
        else:
            f: R.Callable((R.Tensor((2,), dtype="float32"), R.Tensor((), dtype="int64")),
                          R.Tensor((2,), dtype="float32")) = cls.down
            y: R.Tensor((2,), dtype="float32") = R.add(x, R.const(1.0, "float32"))
            m: R.Tensor((), dtype="int64") = R.subtract(n, R.const(1, "int64"))
            r: R.Tensor((2,), dtype="float32") = f(y, m)
        return r
'''


def test_recursion_through_a_function_value_runs_to_the_limit():
    """A call through a variable goes through the C stack as well as Python's: 9,990 nested calls
    still run, and 10,001 are the clear error, not a crash."""
    mod = from_source(THROUGH_A_VARIABLE)
    np.testing.assert_array_equal(interpret(mod, "down", np.zeros(2, np.float32), np.array(9990, np.int64)),
                                  [9990.0, 9990.0])
    with pytest.raises(TesseraError, match=f"deeper than {MAX_CALL_DEPTH}"):
        interpret(mod, "down", np.zeros(2, np.float32), np.array(MAX_CALL_DEPTH + 1, np.int64))
