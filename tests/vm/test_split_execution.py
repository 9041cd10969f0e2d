"""Heterogeneous execution in the Python VM: one executable, kernels on WebGPU (llvmpipe) and WASM.

A module whose tensors name two virtual devices compiles to a version-4 executable (docs/format.md,
"Devices"): each device's kernels by its own backend, one arena per device, and a ``to_device``
copy where a value changes device. The VM opens both devices and runs it; results are compared with
numpy (a split Llama: tests/models/test_gpu_layers.py).
"""

import json
import shutil

import numpy as np
import pytest
import tessera
from modules import SPLIT_ACROSS_DEVICES
from tessera.ir import RuntimeCheckError
from tessera.script import from_source
from tessera.vm import Executable, ExecutableError, VirtualMachine


@pytest.fixture(scope="module")
def split_exe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("split")
    tessera.build(from_source(SPLIT_ACROSS_DEVICES), "llvmpipe").save(str(folder))
    return folder


def test_a_split_module_runs_each_part_on_its_device(split_exe):
    exe = Executable.load(str(split_exe))  # the loader's schema and cross-reference checks pass
    assert exe.version == 4 and [d["kind"] for d in exe.devices] == ["webgpu", "wasm"]
    assert sorted((k["name"].rstrip("0123456789"), k["backend"], k["device"]) for k in exe.kernels) == [
        ("add", "wgsl", 0), ("fused_multiply_exp", "c-wasm", 1), ("subtract", "wgsl", 0)]
    code = exe.functions["main"]["code"]
    assert [op["device"] for op in code if op["op"] == "to_device"] == [1, 0]
    memory = exe.functions["main"]["memory"]
    assert sorted(set(memory["buffer_devices"])) == [0, 1]  # an arena on each device
    vm = VirtualMachine(exe)
    rng = np.random.default_rng(0)
    for n in (3, 16):
        x, y, z = (rng.standard_normal((n, 8)).astype(np.float32) for _ in range(3))
        np.testing.assert_allclose(vm["main"](x, y, z), np.exp((x + y) * z) - x, rtol=1e-5, atol=1e-5)
    assert vm.copies == 4  # two per call, each where the program moves a value


def test_vdevices_on_one_device_share_its_memory():
    """Two targets of one device kind (llvmpipe and webgpu both run on the WebGPU device): kernels for
    each, but no copy and one device, so the executable is an ordinary version 3 one."""
    source = SPLIT_ACROSS_DEVICES.replace('I.vdevice("wasm", 0)', 'I.vdevice("webgpu", 0)').replace('"wasm:0"', '"webgpu:1"') \
        .replace('vdevice="wasm"', 'vdevice="webgpu:1"')
    exe = tessera.build(from_source(source), "llvmpipe")
    assert exe.version == 3 and not exe.devices
    assert not [op for op in exe.functions["main"]["code"] if op["op"] == "to_device"]
    x, y, z = (np.full((2, 8), v, np.float32) for v in (0.5, 0.25, 2.0))
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x, y, z), np.exp(1.5) - x, rtol=1e-5)


def test_a_kernel_bound_to_another_devices_tensor_is_refused_on_load(split_exe, tmp_path):
    doc = json.loads((split_exe / "executable.json").read_text())
    main = doc["functions"]["main"]
    launch = next(op for op in main["code"] if op["op"] == "launch" and doc["kernels"][op["kernel"]]["device"] == 1)
    main["tensors"][str(launch["args"][1])]["device"] = 0  # z, a parameter on the WASM device
    shutil.copytree(split_exe, tmp_path, dirs_exist_ok=True)
    (tmp_path / "executable.json").write_text(json.dumps(doc))
    with pytest.raises(ExecutableError, match="on device 0, to kernel .*, which runs on device 1"):
        Executable.load(str(tmp_path))
    doc["version"] = 3
    (tmp_path / "executable.json").write_text(json.dumps(doc))
    with pytest.raises(ExecutableError, match="devices"):
        Executable.load(str(tmp_path))


def test_a_copy_between_tensors_of_different_sizes_is_refused(split_exe, tmp_path):
    """to_device copies a tensor into one of the same bytes; a file that says otherwise fails the call
    with a Tessera error, on the fast path and in the interpreter alike."""
    doc = json.loads((split_exe / "executable.json").read_text())
    main = doc["functions"]["main"]
    copy = next(op for op in main["code"] if op["op"] == "to_device")
    main["tensors"][str(copy["dst"])]["bytes"] = "16"
    shutil.copytree(split_exe, tmp_path, dirs_exist_ok=True)
    (tmp_path / "executable.json").write_text(json.dumps(doc))
    vm = VirtualMachine(Executable.load(str(tmp_path)))
    x = np.ones((3, 8), np.float32)
    with pytest.raises(RuntimeCheckError, match="main: to_device copies 96 bytes into a tensor of 16"):
        vm["main"](x, x, x)


def test_hints_place_a_program_and_become_copies_where_values_change_device():
    """R.hint_on_device: the build realizes the placement (transform.realize_vdevice) before lowering; an
    unannotated program with two hints runs its first op on the GPU and the rest on the CPU; the
    parameters go where their first readers run."""
    source = '''
@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("webgpu", 0), I.vdevice("wasm", 0)]})

    @R.function
    def main(x: R.Tensor((4, 8), "float32"), y: R.Tensor((4, 8), "float32"), z: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            a = R.add(x, y)
            h = R.hint_on_device(a, "gpu")
            c = R.hint_on_device(h, "cpu")
            d = R.multiply(c, z)
            R.output(d)
        return d
'''
    exe = tessera.build(from_source(source), "llvmpipe")
    devices = sorted((k["name"].rstrip("0123456789"), k["device"]) for k in exe.kernels)
    assert devices == [("add", 0), ("multiply", 1)]
    vm = VirtualMachine(exe)
    x, y = np.full((4, 8), 2.0, np.float32), np.full((4, 8), 3.0, np.float32)
    np.testing.assert_allclose(vm["main"](x, y, y), 15.0)
    assert [p["device"] for p in exe.functions["main"]["params"]] == [0, 0, 1]
    assert vm.copies == 1  # a, where the second hint moves it
