"""A Llama split after N decoder layers (llama.cpp's --n-gpu-layers): the first N on WebGPU
(llvmpipe), the rest with the head on WASM, in the Python VM; the greedy tokens are the unsplit
build's, and the copies per step are what the split implies: one, the hidden state."""

import os

import numpy as np
import pytest
import tessera
from tessera import nn
from tessera.models import LlamaForCausalLM, export_llm
from tessera.vm import VirtualMachine
from test_llama_vs_transformers import reference


def tiny_greedy(vm, prompt, steps):
    vm.reset_state()
    tokens = [int(vm["prefill"](prompt, len(prompt))[0].argmax())]
    while len(tokens) < steps:
        tokens.append(int(vm["decode"](np.array([tokens[-1]], np.int32), len(prompt) + len(tokens))[0].argmax()))
    return tokens


@pytest.mark.parametrize("variant", ["gqa-2x", "mha"])  # mha ties the head to the embedding
def test_a_llama_split_after_n_layers_decodes_like_the_unsplit_model(variant):
    _, config, weights = reference(variant)
    prompt = np.array([5, 17, 3, 88, 41], np.int32)
    whole = tiny_greedy(VirtualMachine(tessera.build(
        nn.bind_weights(export_llm(LlamaForCausalLM(config), 32), weights), "llvmpipe")), prompt, 8)
    for gpu_layers in range(config.num_layers + 1):
        exe = tessera.build(nn.bind_weights(export_llm(LlamaForCausalLM(config), 32, gpu_layers=gpu_layers),
                                            weights), "llvmpipe")
        kernels = {k["name"]: k["device"] for k in exe.kernels}
        assert set(kernels.values()) == {0, 1}
        vm = VirtualMachine(exe)
        assert tiny_greedy(vm, prompt, 8) == whole, gpu_layers
        # One copy per step, the hidden state, whatever the number of layers on either side (the CPU
        # layers count their positions themselves).
        assert vm.copies == 8
        # Each weight lives on the device that reads it (both, when both do).
        assert {d for devices in exe.constant_devices.values() for d in devices} == {0, 1}


@pytest.mark.parametrize("gpu, cpu", [("lavapipe", "cpu"), ("pocl", "cpu")])
def test_vulkan_or_opencl_beside_the_native_cpu_kernels(gpu, cpu):
    """The edge GPU kinds split the same way: SPIR-V on Vulkan (lavapipe) or OpenCL C (PoCL) for the
    first layer, the C kernels of kernels.so (through ctypes) for the rest."""
    _, config, weights = reference("gqa-2x")
    prompt = np.array([5, 17, 3, 88, 41], np.int32)
    whole = tiny_greedy(VirtualMachine(tessera.build(
        nn.bind_weights(export_llm(LlamaForCausalLM(config), 32), weights), "llvmpipe")), prompt, 8)
    exe = tessera.build(nn.bind_weights(export_llm(LlamaForCausalLM(config), 32, gpu_layers=1, devices=(gpu, cpu)),
                                        weights), gpu)
    assert [d["target"]["backend"] for d in exe.devices] == [exe.target["backend"], "c-native"]
    vm = VirtualMachine(exe)
    assert tiny_greedy(vm, prompt, 8) == whole
    assert vm.copies == 8


# Not in `make test` (about a minute of compiling per split): run with -m long. SmolLM2's first two
# layers split in `make test`: tests/models/test_split_smollm2_layers.py.
@pytest.mark.long
def test_smollm2_split_at_none_half_and_all_decodes_like_the_whole_model(reference, smollm2_chat_vm):
    """SmolLM2 (30 layers) split after 0, 15 and 30 layers (WebGPU on llvmpipe + WASM) gives the whole
    llvmpipe build's greedy tokens on a plain-text prompt, with one copy per decode step. The WASM half
    reads q8 activations in decode, as the all-WASM build does, so on a near tie a split may follow the
    all-WASM build instead: split after 0 layers, all its arithmetic that build's, must equal it always.

    A split build of SmolLM2 compiles in about 45 s here, so this is a `long` test, left out of `make
    test` (the tiny Llamas split at every N there, and bench/split.py checks SmolLM2's split tokens):
    ``-m long`` splits after 15 layers, and ``TESSERA_SPLIT_LAYERS=0,15,30`` all three (with the
    all-WASM build), about 4 minutes."""
    from model_helpers import prompt_ids
    from tessera.frontend import bundled_smollm2_path, load_gguf
    from tessera.models import model_from_gguf

    model, weights = model_from_gguf(load_gguf(bundled_smollm2_path()))
    prompt = prompt_ids(reference[0], "The history of the printing press begins in the fifteenth century, when")
    whole = tiny_greedy(smollm2_chat_vm, prompt, 12)
    splits = [int(n) for n in os.environ.get("TESSERA_SPLIT_LAYERS", "15").split(",")]
    wasm = tiny_greedy(VirtualMachine(tessera.build(nn.bind_weights(
        export_llm(model, 256, quantized_activations="q8"), weights), "wasm")), prompt, 12) if 0 in splits else None
    for gpu_layers in splits:
        exe = tessera.build(nn.bind_weights(export_llm(model, 256, gpu_layers=gpu_layers), weights), "llvmpipe")
        vm = VirtualMachine(exe)
        tokens = tiny_greedy(vm, prompt, 12)
        assert tokens == whole, gpu_layers
        if gpu_layers == 0:
            assert tokens == wasm
        assert vm.copies == 12
