"""An R.Shape parameter called from Python (issue 32): the caller passes a ShapeValue, as to the
reference interpreter, and the VM binds the shape's symbolic variables from it and checks it against
the parameter's struct info, instead of uploading it as a tensor."""

import numpy as np
import pytest
import tessera
from modules import RESHAPE_TO_SHAPE_ARGUMENT
from tessera.ir import RuntimeCheckError, ShapeValue, interpret
from tessera.script import from_source
from tessera.vm import VirtualMachine

# A shape whose first dimension is x's own: a shape that disagrees with x violates the signature.
SPLIT_ROWS = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32"), s: R.Shape(["n", 2, 2])) -> R.Tensor(("n", 2, 2), dtype="float32"):
        n = T.int64()
        with R.dataflow():
            gv: R.Tensor((n, 2, 2), dtype="float32") = R.reshape(x, s)
            R.output(gv)
        return gv
'''


@pytest.fixture(scope="module")
def reshape_to():
    mod = from_source(RESHAPE_TO_SHAPE_ARGUMENT)
    return mod, VirtualMachine(tessera.build(mod, "wasm"), "wasm")


@pytest.fixture(scope="module")
def split_rows():
    mod = from_source(SPLIT_ROWS)
    return mod, VirtualMachine(tessera.build(mod, "wasm"), "wasm")


@pytest.mark.parametrize("shape", [(5, 6), (30, 1), (2, 15)])
def test_a_shape_argument_binds_the_variables_of_the_result(reshape_to, shape):
    mod, vm = reshape_to
    x = np.linspace(-1, 1, 30, dtype=np.float32).reshape(3, 10)
    expected = np.exp(x.reshape(shape))
    np.testing.assert_allclose(interpret(mod, "main", x, ShapeValue(shape)), expected, rtol=1e-6)
    result = vm["main"](x, ShapeValue(shape))
    assert result.shape == shape
    np.testing.assert_allclose(result, expected, rtol=1e-6)


def test_a_shape_argument_that_agrees_with_the_tensor_runs_as_in_the_interpreter(split_rows):
    mod, vm = split_rows
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    np.testing.assert_array_equal(vm["main"](x, ShapeValue((5, 2, 2))), x.reshape(5, 2, 2))
    np.testing.assert_array_equal(interpret(mod, "main", x, ShapeValue((5, 2, 2))), x.reshape(5, 2, 2))


EXPECTED = "argument 's' of main: expected R.Shape([n, 2, 2]), "


@pytest.mark.parametrize("shape, reason", [
    (ShapeValue((6, 2, 2)), "got shape (6, 2, 2): dimension 0 is 6, not n = 5"),
    (ShapeValue((5, 4)), "got a shape of rank 2"),
    (ShapeValue((5, 2, -2)), "got a shape (5, 2, -2) with the dimension -2, which is not a size"),
    (ShapeValue((5, 2.0, 2)), "got a shape (5, 2.0, 2) with the dimension 2.0, which is not a size"),
    # A Python tuple is a tuple value, in the interpreter as in the VM: the message says what to pass.
    ((5, 2, 2), "got a tuple (pass a shape as ShapeValue((5, 2, 2)))"),
    (np.array([5, 2, 2]), "got a Tensor"),
])
def test_a_shape_argument_that_violates_the_signature_is_refused_by_name(split_rows, shape, reason):
    mod, vm = split_rows
    x = np.zeros((5, 4), np.float32)
    with pytest.raises(RuntimeCheckError) as in_vm:
        vm["main"](x, shape)
    assert str(in_vm.value) == EXPECTED + reason
    interpreter_reason = reason.replace("got a Tensor", "got a ndarray")  # the interpreter keeps host arrays
    with pytest.raises(RuntimeCheckError) as in_interpreter:
        interpret(mod, "main", x, shape)
    assert str(in_interpreter.value) == EXPECTED + interpreter_reason
