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
from tessera.target import Target
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
    """SmolLM2 built for the cpu target (kernels in one shared object), saved as a folder: the same
    f32 program as the WebGPU build, for comparing runtimes and backends."""
    model, weights = smollm2
    folder = str(tmp_path_factory.mktemp("smollm2") / "cpu")
    tessera.build(nn.bind_weights(export_llm(model, CONTEXT), weights), "cpu").save(folder)
    return folder


@pytest.fixture(scope="module")
def smollm2_compiled_cpu(tmp_path_factory):
    """SmolLM2 as `tessera compile --target cpu` builds it: decode's GEMVs read activations rounded
    to 8 bits (Target.quantized_activations), with the tokenizer and chat config."""
    from tessera.app.compile import compile_model

    assert Target.preset("cpu").quantized_activations == "q8"
    folder = str(tmp_path_factory.mktemp("smollm2") / "cpu-q8")
    compile_model(bundled_smollm2_path(), folder, "cpu", CONTEXT)
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


def test_the_native_cpu_build_answers_the_demo_question(smollm2_compiled_cpu):
    """The chat a user runs first: prefill reads x in f32, so the first token of the reply is the
    f32 model's ("The", a near tie with "L" that rounding x would flip), and the reply is right."""
    from tessera.native import NativeModel

    session = NativeModel(smollm2_compiled_cpu, n_threads=2).session()
    reply = session.chat([{"role": "user", "content": "What is the capital of France?"}], max_tokens=12)["reply"]
    assert reply.startswith("The capital of France is Paris"), reply


def test_rounding_decodes_activations_moves_logits_little(smollm2_compiled_cpu, smollm2_cpu_folder, prompts,
                                                           webgpu_replies):
    """The q8 build against the f32 build, both fed the f32 reply (teacher forcing): the logits stay
    close, and the greedy choice is the same wherever the f32 model's margin exceeds twice the
    largest move of a logit (where it cannot change)."""
    from tessera.native import NativeModel

    exact, rounded = NativeModel(smollm2_cpu_folder, n_threads=2), NativeModel(smollm2_compiled_cpu, n_threads=2)
    for ids, reply in zip(prompts, webgpu_replies):
        a, b = exact.call("prefill", ids, len(ids))[0][0], rounded.call("prefill", ids, len(ids))[0][0]
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)  # prefill reads x as it is
        for step, token in enumerate(reply[:-1]):
            position = np.array([token], np.int32)
            a = exact.call("decode", position, len(ids) + step + 1)[0][0]
            b = rounded.call("decode", position, len(ids) + step + 1)[0][0]
            top = np.sort(a)[-2:]
            shift = np.abs((a - a.mean()) - (b - b.mean())).max()  # a common offset changes no probability
            assert shift < MAX_LOGIT_SHIFT, (step, shift)
            if top[1] - top[0] > 2 * shift:  # no logit moved enough to pass the best one
                assert int(b.argmax()) == int(a.argmax()) == reply[step + 1]
        exact.reset_state()
        rounded.reset_state()


# Logits of SmolLM2 span about 30; rounding decode's activations to 8 bits moves them (past a common
# offset) by 1.04 at most over these prompts' 93 steps, 0.5 typically.
MAX_LOGIT_SHIFT = 1.5
