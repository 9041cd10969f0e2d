"""The Python VM runs WASM builds too: the same program, storage layer and bytecode, on the wasm
device (wasmtime) instead of WebGPU. The tiny Llama decodes as transformers does on both."""

import numpy as np
import pytest
import tessera
import torch
from tessera import nn
from tessera.models import LlamaForCausalLM, export_llm
from tessera.vm import DeviceError, VirtualMachine
from tessera.vm.devices.wasm import WasmDevice
from tessera.vm.program import straight_line
from test_llama_vs_transformers import reference as tiny_reference


def greedy(vm, prompt, steps):
    vm.reset_state()
    tokens = [int(vm["prefill"](prompt, len(prompt))[0].argmax())]
    while len(tokens) < steps:
        tokens.append(int(vm["decode"](np.array([tokens[-1]], np.int32), len(prompt) + len(tokens))[0].argmax()))
    return tokens


@pytest.fixture(scope="module")
def tiny():
    model, config, weights = tiny_reference("gqa-2x")
    mod = nn.bind_weights(export_llm(LlamaForCausalLM(config), 32), weights)
    prompt = np.array([5, 17, 3, 88, 41], np.int32)
    with torch.no_grad():
        want = model.generate(torch.tensor(prompt[None].astype(np.int64)), max_new_tokens=10,
                              do_sample=False)[0, len(prompt):].tolist()
    return mod, prompt, want


def test_the_tiny_llama_decodes_on_the_wasm_device_as_on_webgpu(tiny):
    mod, prompt, want = tiny
    wasm = VirtualMachine(tessera.build(mod, "wasm"))
    assert isinstance(wasm.device, WasmDevice)
    assert greedy(wasm, prompt, 10) == want
    webgpu = VirtualMachine(tessera.build(mod, "llvmpipe"))
    assert webgpu.device.kind == "webgpu"
    assert greedy(webgpu, prompt, 10) == want


@pytest.mark.parametrize("target", ["wasm", "llvmpipe"])
def test_prefill_and_decode_stay_on_the_fast_path_and_allocate_nothing(tiny, target):
    """Issue 13 put calls, branches and run-time allocation in the VM; the LLM must not pay for them."""
    mod, prompt, want = tiny
    exe = tessera.build(mod, target)
    for name, record in exe.functions.items():
        assert straight_line(record) and not record["runtime_allocations"], name
    vm = VirtualMachine(exe)
    assert greedy(vm, prompt, 2) == want[:2]
    before = vm.buffers_created
    assert greedy(vm, prompt, 6) == want[:6]
    assert vm.buffers_created == before
    assert vm.interpreter.pool.device_allocations == 0


def test_results_stay_on_the_wasm_device_and_feed_the_sampler(tiny, tmp_path):
    mod, prompt, want = tiny
    tessera.build(mod, "wasm").save(tmp_path)
    vm = VirtualMachine(tessera.vm.Executable.load(tmp_path))
    vm.reset_state()
    logits = vm.call_on_device("prefill", prompt, len(prompt))
    history = prompt.copy()
    params = np.array([0.0, 0, 1.0, 1.0, 0.0], np.float32)
    assert int(vm["sample_greedy"](logits, history, params)[0]) == want[0]
    assert int(np.argmax(logits.numpy()[0])) == want[0]
    vm.call_on_device("prefill", prompt, len(prompt))
    with pytest.raises(tessera.ir.RuntimeCheckError, match="overwritten by a later call of prefill"):
        logits.numpy()


def test_a_device_that_cannot_run_the_kernels_is_named(tiny):
    mod, _, _ = tiny
    with pytest.raises(DeviceError, match="the webgpu device runs wgsl kernels; this executable's are c-wasm"):
        VirtualMachine(tessera.build(mod, "wasm"), "webgpu")
