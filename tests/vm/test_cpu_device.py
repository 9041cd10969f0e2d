"""The cpu device: the VM runs c-native executables on it (kernels.so through ctypes), alone or with
a launch's workgroups split across threads, and `tessera compile --target cpu --cpu ISA` records
the instruction set it built for."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tessera
from llama_layer import build_layer, layer_inputs
from tessera.codegen.c.native import host_machine
from tessera.ir import interpret
from tessera.vm import Executable, VirtualMachine
from tessera.vm.devices.cpu import CPUDevice


@pytest.fixture(scope="module")
def layer_exe():
    return tessera.build(build_layer(), "cpu", upper_bounds={"n": 128})


def test_the_vm_picks_the_cpu_device_for_c_native_kernels(layer_exe, tmp_path):
    layer_exe.save(tmp_path)
    exe = Executable.load(tmp_path)  # the module's size and sha256 are checked here
    assert exe.backends == ["c-native"] and exe.target["cpu"] == "native"
    assert os.listdir(tmp_path).count("kernels.so") == 1
    vm = VirtualMachine(exe)
    assert isinstance(vm.device, CPUDevice)
    for n in (1, 7, 128):
        args = layer_inputs(n, seed=n)
        np.testing.assert_allclose(vm["layer"](*args), interpret(build_layer(), "layer", *args), rtol=1e-4,
                                   atol=1e-4)


def test_threads_share_each_launch_and_compute_the_same(layer_exe):
    args = layer_inputs(64, seed=3)
    alone = VirtualMachine(layer_exe, CPUDevice(threads=1))["layer"](*args)
    shared = VirtualMachine(layer_exe, CPUDevice(threads=3))["layer"](*args)
    np.testing.assert_array_equal(alone, shared)  # each workgroup computes alone: the same bits


def tessera_cli(*args):
    return subprocess.run([sys.executable, "-m", "tessera.cli", *args], capture_output=True, text=True, timeout=300)


def test_compile_for_a_chosen_cpu_records_it_and_chats(tiny_gguf, tmp_path):
    folder = str(tmp_path / "cpu")
    result = tessera_cli("compile", tiny_gguf, "-o", folder, "--context", "64", "--target", "cpu", "--cpu",
                         "x86-64-v2" if host_machine() == "x86_64" else "armv8.2-a", "-q")
    assert result.returncode == 0, result.stderr
    with open(os.path.join(folder, "executable.json")) as f:
        target = json.load(f)["target"]
    isa = target["cpu"]
    assert target == {"kind": "cpu", "name": f"cpu-{isa}", "backend": "c-native", "cpu": isa,
                      "features": ["shader-f16"]}
    chat = tessera_cli("chat", folder, "--prompt", "Hi", "--temperature", "0", "--max-tokens", "4", "--json")
    assert chat.returncode == 0, chat.stderr
    assert json.loads(chat.stdout)["reply"]


def test_cpu_choices_are_checked_before_compiling(tiny_gguf, tmp_path):
    unknown = tessera_cli("compile", tiny_gguf, "-o", str(tmp_path / "a"), "--target", "cpu", "--cpu", "pentium")
    assert unknown.returncode == 1 and "Traceback" not in unknown.stderr
    assert "unknown --cpu 'pentium' for cpu targets; known: android-arm64-v8a, android-x86_64, armv8.2-a, native, " \
        "x86-64-v2" in unknown.stderr
    gpu = tessera_cli("compile", tiny_gguf, "-o", str(tmp_path / "b"), "--target", "webgpu", "--cpu", "native")
    assert gpu.returncode == 1 and "--cpu applies to targets built to machine code" in gpu.stderr
