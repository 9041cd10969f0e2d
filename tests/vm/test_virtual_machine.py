"""tessera.build -> Executable -> save/load -> VirtualMachine on WebGPU, against the interpreter."""

import json
import os

import numpy as np
import pytest
import tessera
from llama_layer import build_layer, layer_inputs
from tessera import op
from tessera.ir import BlockBuilder, RuntimeCheckError, Tensor, Var, interpret
from tessera.vm import DeviceError, Executable, ExecutableError, VirtualMachine


@pytest.fixture(scope="module")
def layer_exe():
    return tessera.build(build_layer(), "llvmpipe", upper_bounds={"n": 128})


@pytest.mark.parametrize("n", [1, 7, 64, 128])
def test_vm_runs_the_llama_layer_like_the_interpreter(layer_exe, n):
    vm = VirtualMachine(layer_exe)
    args = layer_inputs(n, seed=n)
    np.testing.assert_allclose(vm["layer"](*args), interpret(build_layer(), "layer", *args), rtol=1e-4, atol=1e-4)


def test_later_calls_allocate_no_gpu_memory_and_bounds_are_enforced(layer_exe):
    vm = VirtualMachine(layer_exe)
    vm["layer"](*layer_inputs(5))
    created = vm.buffers_created
    for n in (1, 64, 128):
        vm["layer"](*layer_inputs(n))
    assert vm.buffers_created == created
    with pytest.raises(RuntimeCheckError, match="layer: n = 129 exceeds its upper bound 128"):
        vm["layer"](*layer_inputs(129))
    with pytest.raises(RuntimeCheckError, match=r"argument 'cos' of layer: expected R.Tensor\(\(n, 1, 16\), dtype=\"float32\"\), got shape \(4, 1, 16\): "
                       r"dimension 0 is 4, not n = 5"):
        args = layer_inputs(5)
        args[1] = args[1][:4]
        vm["layer"](*args)


def test_executable_round_trips_through_files(layer_exe, tmp_path):
    layer_exe.save(tmp_path)
    loaded = Executable.load(tmp_path)
    assert loaded.to_json() == layer_exe.to_json()
    vm = VirtualMachine(loaded)
    args = layer_inputs(9)
    np.testing.assert_allclose(vm["layer"](*args), interpret(build_layer(), "layer", *args), rtol=1e-4, atol=1e-4)


def weighted_module():
    """A function with a large constant, which becomes a weight in the tensor cache."""
    x = Var("x", Tensor(("n", 256), "float32"))
    w = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
    bb = BlockBuilder()
    with bb.function("main", [x], attrs={"tir_var_upper_bound": {"n": 16}}):
        with bb.dataflow():
            y = bb.emit_output(op.matmul(x, tessera.ir.Constant(w)), "y")
        bb.emit_func_output(y)
    return bb.get(), w


def test_weights_live_in_checksummed_shards(tmp_path):
    mod, w = weighted_module()
    exe = tessera.build(mod, "llvmpipe")
    exe.save(tmp_path)
    cache = json.loads((tmp_path / "tensor-cache.json").read_text())
    (shard,) = cache["records"]
    assert shard["dataPath"] == "params_shard_0.bin" and len(shard["sha256"]) == 64
    vm = VirtualMachine(Executable.load(tmp_path))
    x = np.ones((3, 256), np.float32)
    np.testing.assert_allclose(vm["main"](x), x @ w, rtol=1e-4)


def test_bad_files_are_clear_errors(tmp_path):
    mod, _ = weighted_module()
    exe = tessera.build(mod, "llvmpipe")
    exe.save(tmp_path)
    path = tmp_path / "executable.json"
    text = path.read_text()
    with pytest.raises(DeviceError, match="the wasm device runs c-wasm kernels; this executable's are wgsl "
                                          "\\(built for target 'llvmpipe'\\)"):
        VirtualMachine(Executable.load(tmp_path), "wasm")
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ExecutableError, match="is not valid JSON \\(truncated or corrupted\\?\\)"):
        Executable.load(tmp_path)
    path.write_text(text.replace('"version": 3', '"version": 99'))
    with pytest.raises(ExecutableError, match="has format version 99; this Tessera reads versions 3 and 4"):
        Executable.load(tmp_path)
    path.write_text(text.replace('"version": 3', '"version": 1'))
    with pytest.raises(ExecutableError, match="has format version 1; .* rebuild it with this compiler"):
        Executable.load(tmp_path)
    doc = json.loads(text)
    del doc["kernels"][0]["grid"]
    path.write_text(json.dumps(doc))
    with pytest.raises(ExecutableError, match=r"is malformed: kernels\[0\] lacks the field 'grid'"):
        Executable.load(tmp_path)
    (module,) = json.loads(text)["modules"]
    for bad in ("../outside.wgsl", "/etc/passwd", "kernels/../../x.wgsl", "C:/x.wgsl"):
        path.write_text(text.replace(json.dumps(module["path"]), json.dumps(bad)))
        with pytest.raises(ExecutableError, match="is not a relative path inside the folder"):
            Executable.load(tmp_path)
    path.write_text(text)
    kernel_file = tmp_path / module["path"]
    source = kernel_file.read_bytes()
    kernel_file.write_bytes(source.replace(b"1", b"2", 1))
    with pytest.raises(ExecutableError, match="does not match its checksum in executable.json"):
        Executable.load(tmp_path)
    kernel_file.write_bytes(source + b"\n")
    with pytest.raises(ExecutableError, match=r"kernel module .* has \d+ bytes, expected \d+ \(too long\?\)"):
        Executable.load(tmp_path)
    kernel_file.write_bytes(source)
    shard = tmp_path / "params_shard_0.bin"
    blob = shard.read_bytes()
    shard.write_bytes(blob[:-10])
    with pytest.raises(ExecutableError, match="params_shard_0.bin has .* bytes, expected .* \\(truncated\\?\\)"):
        Executable.load(tmp_path)
    shard.write_bytes(bytes([blob[0] ^ 1]) + blob[1:])
    with pytest.raises(ExecutableError, match="does not match its SHA-256 \\(corrupted\\)"):
        Executable.load(tmp_path)
    os.remove(shard)
    with pytest.raises(ExecutableError, match="cannot read weight shard"):
        Executable.load(tmp_path)
    with pytest.raises(ExecutableError, match="cannot read .*executable.json"):
        Executable.load(tmp_path / "nowhere")


def test_without_upper_bounds_memory_is_allocated_per_call():
    x = Var("x", Tensor(("n",), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(op.exp(op.multiply(op.exp(x), op.exp(x))), "y")
        bb.emit_func_output(y)
    exe = tessera.build(bb.get(), "llvmpipe", pipeline=tessera.transform.Pipeline.default(
        tessera.target.Target.preset("llvmpipe"), fuse=False))
    assert exe.functions["main"]["memory"]["static"] is False
    vm = VirtualMachine(exe)
    for n in (3, 1000):
        x = np.linspace(-1, 1, n, dtype=np.float32)
        before = vm.buffers_created
        np.testing.assert_allclose(vm["main"](x), np.exp(np.exp(x) * np.exp(x)), rtol=1e-5)
        assert vm.buffers_created > before  # storages, parameter and readback at this call's size
    before = vm.buffers_created
    np.testing.assert_allclose(vm["main"](x[:3]), np.exp(np.exp(x[:3]) * np.exp(x[:3])), rtol=1e-5)
    assert vm.buffers_created == before  # the pool hands back the blocks the first call freed


def test_per_kernel_profile_names_every_launch(layer_exe):
    vm = VirtualMachine(layer_exe)
    timings = vm.profile_kernels("layer", *layer_inputs(16))
    launches = [op for op in layer_exe.functions["layer"]["code"] if op["op"] == "launch"]
    assert [name for name, _ in timings] == [layer_exe.kernels[op["kernel"]]["name"] for op in launches]
    assert all(seconds > 0 for _, seconds in timings)


def test_results_can_stay_on_the_device_between_functions():
    """decode -> sample without a host round trip: a DeviceTensor feeds the next function."""
    bb = BlockBuilder()
    for name, make in (("scale", lambda v: op.multiply(v, v)), ("shift", lambda v: op.add(v, v))):
        x = Var("x", Tensor((4, "n"), "float32"))
        with bb.function(name, [x], attrs={"tir_var_upper_bound": {"n": 64}}):
            with bb.dataflow():
                y = bb.emit_output(make(x), "y")
            bb.emit_func_output(y)
    vm = VirtualMachine(tessera.build(bb.get(), "llvmpipe"))
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    squared = vm.call_on_device("scale", x)
    assert squared.shape == (4, 5) and squared.dtype == np.float32
    np.testing.assert_array_equal(squared.numpy(), x * x)
    np.testing.assert_array_equal(vm["shift"](squared), 2 * x * x)
    vm.call_on_device("scale", x + 1)
    with pytest.raises(RuntimeCheckError, match="overwritten by a later call of scale"):
        vm["shift"](squared)



@pytest.mark.parametrize("kind", ["webgpu", "wasm"])
def test_empty_tensors_are_bound_and_read_back(kind):
    """A sum over an empty axis reads a zero-size tensor, and an empty result is read back: WebGPU
    refuses empty bindings and mappings (wgpu-native aborts on the former), so the device binds
    the whole buffer and reads nothing."""
    x = Var("x", Tensor((0, 3), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            total = bb.emit_output(op.sum(x, axis=[0]), "total")
            doubled = bb.emit_output(op.add(x, x), "doubled")
        bb.emit_func_output((total, doubled))
    exe = tessera.build(bb.get(), "llvmpipe" if kind == "webgpu" else kind)
    try:
        vm = VirtualMachine(exe, kind)
    except DeviceError as error:
        pytest.skip(f"no {kind} device here: {error}")
    total, doubled = vm["main"](np.zeros((0, 3), np.float32))
    np.testing.assert_array_equal(total, np.zeros(3, np.float32))
    assert doubled.shape == (0, 3)
