"""Launch arguments built once: the wasm and cpu devices keep each bound kernel's argument array from
bind time and rewrite only the scalars and grid that change; a straight-line function keeps its
launches' scalars and grids per call shape. Calls that alternate between shapes must still compute
what the interpreter does, a trapping kernel must be a clear error, and wasmtime-py's per-call
conversion must not be on the launch path."""

import numpy as np
import pytest
import tessera
from llama_layer import build_layer, layer_inputs
from tessera.ir import interpret
from tessera.vm import DeviceError, VirtualMachine
from tessera.vm.devices import View
from tessera.vm.devices import wasm as wasm_device

SIZES = (7, 1, 7, 93, 1, 93)  # each size again after another: the cached arguments must be the right ones


@pytest.fixture(scope="module", params=["wasm", "cpu"])
def layer_exe(request):
    return request.param, tessera.build(build_layer(), request.param, upper_bounds={"n": 128})


@pytest.fixture(scope="module")
def wasm_exe():
    return tessera.build(build_layer(), "wasm", upper_bounds={"n": 128})


def test_calls_alternating_between_sizes_match_the_interpreter(layer_exe):
    kind, exe = layer_exe
    vm = VirtualMachine(exe, kind)
    for n in SIZES:
        args = layer_inputs(n, seed=n)
        np.testing.assert_allclose(vm["layer"](*args), interpret(build_layer(), "layer", *args), rtol=1e-4,
                                   atol=1e-4, err_msg=f"{kind}, n = {n}")


def test_wasm_launches_skip_wasmtime_per_call_conversion(wasm_exe, monkeypatch):
    kind, exe = "wasm", wasm_exe
    if wasm_device._c_api() is None:
        pytest.fail("this wasmtime package lacks wasmtime_func_call in its bindings: launches would be slow")
    import wasmtime

    vm = VirtualMachine(exe, kind)

    def refuse(*_):
        raise AssertionError("a launch went through wasmtime.Func.__call__")

    monkeypatch.setattr(wasmtime.Func, "__call__", refuse)
    args = layer_inputs(5, seed=5)
    np.testing.assert_allclose(vm["layer"](*args), interpret(build_layer(), "layer", *args), rtol=1e-4, atol=1e-4)


def test_wasm_public_call_path_computes_the_same(wasm_exe, monkeypatch):
    kind, exe = "wasm", wasm_exe
    args = layer_inputs(9, seed=9)
    fast = VirtualMachine(exe, kind)["layer"](*args)
    monkeypatch.setattr(wasm_device, "_FFI", [None])  # as with a wasmtime package without the C entry points
    np.testing.assert_array_equal(VirtualMachine(exe, kind)["layer"](*args), fast)


def test_a_trapping_wasm_kernel_is_a_device_error_and_the_device_goes_on(wasm_exe):
    kind, exe = "wasm", wasm_exe
    vm = VirtualMachine(exe, kind)
    args = layer_inputs(4, seed=4)
    expected = vm["layer"](*args)
    device, record = vm.device, exe.kernels[0]
    count = len(record["abi"]["bindings"])
    outside = wasm_device.WasmBuffer(device.memory.size(device.store) * wasm_device.PAGE, 1 << 20)
    bound = device.bind(vm.kernels[0], [View(outside, 0, 1 << 20)] * count)
    scalars = [4] * len(record["abi"]["scalars"])
    with pytest.raises(DeviceError, match="trapped"):
        device.launch(bound, scalars, [1, 1, 1])
    np.testing.assert_array_equal(vm["layer"](*args), expected)
