"""SmolLM2 compiled for the edge kernel languages answers like the WebGPU build, token for token:
SPIR-V run by Vulkan (Mesa's lavapipe), OpenCL C run by PoCL, and Metal, which cannot run here,
compile-checked kernel by kernel (tests/codegen/test_metal.py). Three prompts, 32 greedy tokens
each, with the KV cache (one prefill, then one decode per token)."""

import numpy as np
import pytest
import tessera
from conftest import greedy
from tessera import nn
from tessera.frontend import bundled_smollm2_path, load_gguf
from tessera.frontend.tokenizer import build_tokenizer
from tessera.models.from_gguf import llama_from_gguf
from tessera.models.llama import export_llm
from tessera.vm import VirtualMachine

PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    ",
]
STEPS = 32
CONTEXT = 256  # as conftest's smollm2_chat_vm, the WebGPU build these replies are compared with


@pytest.fixture(scope="module")
def gguf():
    return load_gguf(bundled_smollm2_path())


@pytest.fixture(scope="module")
def smollm2(gguf):
    return llama_from_gguf(gguf)


@pytest.fixture(scope="module")
def prompts(gguf):
    tokenizer = build_tokenizer(gguf.tokenizer)
    return [np.asarray(tokenizer.encode(p).ids, np.int32) for p in PROMPTS]


def replies(smollm2, prompts, target: str, device_kind: str) -> list[list[int]]:
    model, weights = smollm2
    vm = VirtualMachine(tessera.build(nn.bind_weights(export_llm(model, CONTEXT), weights), target))
    assert vm.device.kind == device_kind  # the VM picked the device that runs the build's kernels
    return [greedy(vm, ids, STEPS) for ids in prompts]


@pytest.fixture(scope="module")
def webgpu_replies(smollm2_chat_vm, prompts):
    assert smollm2_chat_vm.device.kind == "webgpu"
    return [greedy(smollm2_chat_vm, ids, STEPS) for ids in prompts]


@pytest.mark.parametrize("target,device_kind", [("lavapipe", "vulkan"), ("pocl", "opencl")])
def test_greedy_replies_equal_the_webgpu_build(smollm2, prompts, webgpu_replies, target, device_kind):
    got = replies(smollm2, prompts, target, device_kind)
    for prompt, want, have in zip(PROMPTS, webgpu_replies, got):
        assert have == want, f"{target} on {prompt!r}"


@pytest.fixture(scope="module")
def smollm2_cpu_folder(smollm2, tmp_path_factory):
    """SmolLM2 built for the cpu target (kernels in one shared object), saved as a folder."""
    model, weights = smollm2
    folder = str(tmp_path_factory.mktemp("smollm2") / "cpu")
    tessera.build(nn.bind_weights(export_llm(model, CONTEXT), weights), "cpu").save(folder)
    return folder


def native_greedy(model, ids: np.ndarray, steps: int) -> list[int]:
    model.reset_state()
    logits = model.call("prefill", ids, len(ids))[0]
    tokens = [int(logits[0].argmax())]
    while len(tokens) < steps:
        logits = model.call("decode", np.array([tokens[-1]], np.int32), len(ids) + len(tokens))[0]
        tokens.append(int(logits[0].argmax()))
    return tokens


def test_the_native_runtime_answers_like_the_webgpu_build(smollm2_cpu_folder, prompts, webgpu_replies):
    """runtime-native (the C runtime, on two threads) runs the cpu build: the same greedy tokens."""
    from native.build import ensure_native_build
    from tessera.native import NativeModel

    ensure_native_build()
    model = NativeModel(smollm2_cpu_folder, n_threads=2)
    for prompt, ids, want in zip(PROMPTS, prompts, webgpu_replies):
        assert native_greedy(model, ids, STEPS) == want, prompt


def test_native_and_python_vm_logits_agree_on_the_cpu_build(smollm2_cpu_folder, prompts):
    """The same kernels through two runtimes: the C runtime and the Python VM's cpu device."""
    from tessera.native import NativeModel
    from tessera.vm import Executable

    native = NativeModel(smollm2_cpu_folder, n_threads=2)
    python = VirtualMachine(Executable.load(smollm2_cpu_folder))
    ids = prompts[0]
    a = native.call("prefill", ids, len(ids))[0]
    b = python["prefill"](ids, len(ids))
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
