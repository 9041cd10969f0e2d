"""Whole programs in the Python VM (issue 13): what the conformance cases do not pin down, the
memory and error behaviour around calls, branches, libraries and data-dependent sizes."""

import numpy as np
import pytest
import tessera
from conformance.programs import COARSE, NONZERO_GATHER, POWER
from modules import FIGURE_3, calls_between_functions, cross_level_calls, mlp_with_branch
from tessera.app.inspect import format_summary, summarize
from tessera.ir import RuntimeCheckError
from tessera.script import from_source
from tessera.vm import VirtualMachine


def double(x, out, *scalars):
    out[...] = 2 * x


@pytest.mark.parametrize("device", ["wasm", "webgpu"])
def test_a_loop_of_calls_allocates_device_memory_once(device):
    """Run-time allocations come from a pool: after the first call, the blocks are reused."""
    exe = tessera.build(from_source(POWER), device if device == "wasm" else "llvmpipe")
    vm = VirtualMachine(exe, device)
    x = np.array([1.5, -2.0, 0.5, 1.25], np.float32)
    vm["power"](x, np.array(9, np.int32))
    before = vm.buffers_created
    for n in (9, 3, 7, 0):
        np.testing.assert_allclose(vm["power"](x, np.array(n, np.int32)), x.astype(np.float64) ** n, rtol=1e-5)
    assert vm.buffers_created == before
    assert vm.interpreter.pool.in_use == 0  # every block went back


def test_a_recursive_function_has_no_arena_and_says_why():
    exe = tessera.build(from_source(POWER), "wasm")
    record = exe.functions["power"]
    assert record["memory"]["recursive"] and record["memory"]["buffers"] == []
    text = format_summary(summarize(exe))
    assert "allocated at run time" in text and "power is recursive" in text


def test_a_callee_hands_its_result_to_the_caller_and_unbounded_sizes_are_listed():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32")) -> R.Tensor(("n", 4), dtype="float32"):
        n = T.int64()
        a: R.Tensor((n, 4), dtype="float32") = cls.twice(x)
        b: R.Tensor((n, 4), dtype="float32") = cls.twice(a)
        c: R.Tensor((n, 4), dtype="float32") = R.add(a, b)
        return c

    @R.function
    def twice(y: R.Tensor(("m", 4), dtype="float32")) -> R.Tensor(("m", 4), dtype="float32"):
        m = T.int64()
        R.func_attr({"inline": False})
        z: R.Tensor((m, 4), dtype="float32") = R.add(y, y)
        return z
'''
    exe = tessera.build(from_source(text), "wasm", upper_bounds={"n": 32, "m": 32})
    assert [a["reason"] for a in exe.functions["twice"]["runtime_allocations"]] == [
        "a result of twice, which another function calls: it outlives the call"]
    assert exe.functions["main"]["memory"]["static"]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    # a stays valid while the second call of twice runs: it is the caller's, not twice's
    np.testing.assert_array_equal(VirtualMachine(exe)["main"](x), 2 * x + 4 * x)
    unbounded = tessera.build(from_source(NONZERO_GATHER), "wasm", upper_bounds={"n": 64})
    reasons = [a["reason"] for a in unbounded.functions["main"]["runtime_allocations"]]
    assert reasons and all("depends on k, which has no upper bound" in r or "where_len" in r for r in reasons)


def test_branches_share_storage_between_their_arms():
    mod = tessera.transform.Pipeline.default(tessera.target.Target.preset("wasm"), {"batch": 16})(mlp_with_branch())
    plan = mod["mlp"].attr("memory_plan")
    by_tensor = {t: s["index"] for s in plan["storages"] for t in s["tensors"]}
    # The then-arm's scaled copy is dead before the else-arm runs: the else-arm's result reuses it.
    then_only = [t for t in by_tensor if t.startswith("scaled")]
    assert then_only
    assert any(by_tensor[t] == by_tensor[then_only[0]] for t in by_tensor if t not in then_only)
    assert plan["static"]


def test_a_data_dependent_size_within_its_bound_is_planned_and_beyond_it_an_error():
    exe = tessera.build(from_source(NONZERO_GATHER), "wasm", upper_bounds={"n": 64, "k": 8})
    vm = VirtualMachine(exe)
    x = np.array([1.0, -1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(vm["main"](x), [2.0, 4.0, 6.0])
    with pytest.raises(RuntimeCheckError, match="k = 9 exceeds its upper bound 8"):
        vm["main"](np.ones(9, np.float32))


def test_libraries_are_checked_when_the_vm_is_made_and_their_errors_named():
    exe = tessera.build(cross_level_calls(), "wasm")
    assert exe.libraries == ["tessera.test.double"]
    with pytest.raises(RuntimeCheckError, match="calls the library function 'tessera.test.double', which is not "
                                                "registered"):
        VirtualMachine(exe)

    def broken(x, out, *scalars):
        raise ValueError("no")

    vm = VirtualMachine(exe, libraries={"tessera.test.double": broken})
    with pytest.raises(RuntimeCheckError, match="library function 'tessera.test.double' failed: ValueError: no"):
        vm["dps"](np.ones((2, 4), np.float32))
    out, shape = VirtualMachine(exe, libraries={"tessera.test.double": double})["dps"](np.ones((2, 4), np.float32))
    np.testing.assert_array_equal(out, np.full((4, 2), 2, np.float32))
    assert tuple(shape) == (2, 4)


def test_inner_call_arguments_are_checked_with_both_shapes():
    vm = VirtualMachine(tessera.build(from_source(COARSE), "wasm"))
    with pytest.raises(RuntimeCheckError, match=r"argument 'y' of helper: expected R.Tensor\(\(m, 4\), "
                                                r"dtype=\"float32\"\), got shape \(2, 3\): dimension 1 is 3, not 4"):
        vm["rows_of_four"](np.ones((2, 3), np.float32))
    with pytest.raises(RuntimeCheckError, match=r"argument 'x' of main: expected R.Tensor\(dtype=\"float32\", "
                                                r"ndim=2\), got rank 1"):
        vm["main"](np.ones(3, np.float32))


def test_runaway_recursion_is_an_error_not_a_crash():
    text = '''
@I.ir_module
class Module:
    @R.function
    def forever(x: R.Tensor((2,), dtype="float32")) -> R.Tensor((2,), dtype="float32"):
        y: R.Tensor((2,), dtype="float32") = cls.forever(x)
        return y
'''
    vm = VirtualMachine(tessera.build(from_source(text), "wasm"))
    with pytest.raises(RuntimeCheckError, match="calls nested deeper than"):
        vm["forever"](np.ones(2, np.float32))
    assert vm.interpreter.pool.in_use == 0


def test_results_left_on_the_device_feed_the_next_call():
    exe = tessera.build(calls_between_functions(), "wasm")
    vm = VirtualMachine(exe)
    x = np.ones((3, 4), np.float32)
    first = vm.call_on_device("main", x)
    np.testing.assert_array_equal(first.numpy(), x)
    second = vm.call_on_device("main", first)  # the first result is alive while the call runs
    np.testing.assert_array_equal(second.numpy(), x)
    with pytest.raises(RuntimeCheckError, match="overwritten by a later call of main"):
        first.numpy()


def test_figure_3_unique_then_match_cast():
    vm = VirtualMachine(tessera.build(from_source(FIGURE_3), "wasm", upper_bounds={"n": 16}))
    x = np.array([[0.0, 1.0, 0.0, 2.0]], np.float32)
    np.testing.assert_allclose(vm["main"](x), np.exp(np.unique(np.exp(x))), rtol=1e-6)


def test_what_a_library_returns_is_checked_against_its_declared_info():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32")) -> R.Tensor(("n", 4), dtype="float32"):
        n = T.int64()
        y: R.Tensor((n, 4), dtype="float32") = R.call_pure_packed("my.copy", x, sinfo_args=R.Tensor((n, 4), dtype="float32"))
        return y
'''
    exe = tessera.build(from_source(text), "wasm")
    np.testing.assert_array_equal(VirtualMachine(exe, libraries={"my.copy": lambda x: x.copy()})["main"](
        np.ones((2, 4), np.float32)), np.ones((2, 4)))
    vm = VirtualMachine(exe, libraries={"my.copy": lambda x: x[:1].copy()})
    with pytest.raises(RuntimeCheckError, match=r"result of library function 'my.copy' in main: expected "
                                                r"R.Tensor\(\(n, 4\), dtype=\"float32\"\), got shape \(1, 4\)"):
        vm["main"](np.ones((2, 4), np.float32))
