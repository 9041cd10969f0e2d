"""A reshape whose element count only a call tells, in the Python VM (issue 32): a caller's sizes that
disagree with x's used to give a (4, 6) of garbage for a 3x10 x, and more than 30 elements read past
x. check_reshapes puts a match of the counts in the program, which the VM checks before the kernel
(on the fast path, before any kernel). tests/conformance's program-reshape-unproven holds the same
calls for runtime-js and runtime-native."""

import numpy as np
import pytest
import tessera
from conformance.programs import RESHAPE_UNPROVEN
from modules import RESHAPE_TO_SHAPE_ARGUMENT
from tessera.ir import RuntimeCheckError, ShapeValue
from tessera.script import from_source
from tessera.vm import VirtualMachine
from tessera.vm.program import straight_line

DEVICES = {"wasm": "wasm", "webgpu": "llvmpipe"}  # device kind: the target preset it runs
X = np.linspace(-1, 1, 30, dtype=np.float32).reshape(3, 10)


def refusal(function: str, call: str, count: int) -> str:
    return (f"reshape of x to (a, b) in {function} ({call}), the element count of x: expected R.Shape([a * b]), "
            f"got shape (30,): dimension 0 is 30, not a * b = {count}")


@pytest.fixture(scope="module", params=sorted(DEVICES))
def vms(request):
    device = request.param
    build = lambda text: VirtualMachine(tessera.build(from_source(text), DEVICES[device]), device)  # noqa: E731
    return build(RESHAPE_TO_SHAPE_ARGUMENT), build(RESHAPE_UNPROVEN)


def launches_during(vm, monkeypatch, call) -> tuple[int, str]:
    """(kernels launched, the error) of a call that must fail."""
    launched = []
    launch = vm.device.launch
    monkeypatch.setattr(vm.device, "launch", lambda *args: (launched.append(args), launch(*args)))
    with pytest.raises(RuntimeCheckError) as refused:
        call()
    monkeypatch.undo()
    return len(launched), str(refused.value)


@pytest.mark.parametrize("shape", [(4, 6), (6, 6), (31, 1)])  # fewer elements than x, more (a read past x)
def test_a_shape_argument_whose_count_differs_is_refused_before_any_kernel(vms, shape, monkeypatch):
    launched, error = launches_during(vms[0], monkeypatch, lambda: vms[0]["main"](X, ShapeValue(shape)))
    assert (launched, error) == (0, refusal("main", "R.reshape(x, s)", shape[0] * shape[1]))


def test_a_shape_argument_whose_count_agrees_runs(vms):
    for shape in [(5, 6), (2, 15), (30, 1)]:
        np.testing.assert_allclose(vms[0]["main"](X, ShapeValue(shape)), np.exp(X.reshape(shape)), rtol=1e-6)


def test_the_fast_path_checks_the_count_before_any_kernel(vms, monkeypatch):
    """like(x, y) reshapes x to y's shape, to_sizes(x, a, b) to sizes passed as prim values: straight
    lines over a static plan, whose checks all run before their first launch."""
    vm = vms[1]
    assert straight_line(vm.exe.functions["like"]) and straight_line(vm.exe.functions["to_sizes"])
    y = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    np.testing.assert_allclose(vm["like"](X, y), X.reshape(5, 6) + y, rtol=1e-6)
    call = "R.reshape(x, R.shape([a, b]))"
    assert launches_during(vm, monkeypatch, lambda: vm["like"](X, y[:4])) == (0, refusal("like", call, 24))
    assert launches_during(vm, monkeypatch, lambda: vm["to_sizes"](X, 6, 6)) == (0, refusal("to_sizes", call, 36))
    np.testing.assert_array_equal(vm["to_sizes"](X, 15, 2), X.reshape(15, 2))
