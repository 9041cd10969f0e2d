"""SmolLM2 compiled for the edge kernel languages answers like the WebGPU build, token for token:
SPIR-V run by Vulkan (Mesa's lavapipe), OpenCL C run by PoCL, and Metal, which cannot run here,
compile-checked kernel by kernel (tests/codegen/test_metal.py). Three prompts, 32 greedy tokens
each, with the KV cache (one prefill, then one decode per token)."""

import warnings

import numpy as np
import pytest
import tessera
from model_helpers import greedy
from tessera import nn
from tessera.frontend import bundled_smollm2_path, load_gguf
from tessera.frontend.tokenizer import build_tokenizer
from tessera.models import export_llm, model_from_gguf
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
    return model_from_gguf(gguf)


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


def logit_shift(a: np.ndarray, b: np.ndarray) -> float:
    """The largest move of a logit from ``a`` to ``b`` past their common offset (which changes no
    probability): if every logit moves by at most s, no logit can overtake one that led by more than 2 s."""
    return float(np.abs((a - a.mean()) - (b - b.mean())).max())


def margin(logits: np.ndarray) -> float:
    top = np.sort(logits)[-2:]
    return float(top[1] - top[0])


def test_the_q8_build_decodes_the_f32_builds_tokens_where_the_margins_allow(smollm2_compiled_cpu, smollm2_cpu_folder,
                                                                            prompts):
    """The q8 build (what `tessera chat` and `tessera serve` run on a CPU) against the f32 build,
    greedy, token by token from the same prompt. Every logit moves by less than the rounding's bound
    (PREFILL_LOGIT_SHIFT for the first token: prefill reads x as it is; MAX_LOGIT_SHIFT after it;
    both asserted at each step), so wherever the f32 build's top-2 margin exceeds twice that bound
    the q8 build must pick the same token. At a near tie (a smaller margin) it may pick another: the
    comparison goes on while it picks the same one, and otherwise stops there, saying so, since the
    two replies then part. The demo question comes through the chat template, as a user asks it."""
    from tessera.app.chat import NativeChatSession
    from tessera.native import NativeModel

    exact, rounded = NativeModel(smollm2_cpu_folder, n_threads=2), NativeModel(smollm2_compiled_cpu, n_threads=2)
    chat = NativeChatSession(smollm2_compiled_cpu).encode_chat([{"role": "user",
                                                                 "content": "What is the capital of France?"}])
    cases = [("demo question (chat template)", np.asarray(chat, np.int32))] + list(zip(PROMPTS, prompts))
    parted, compared = [], {}
    for name, ids in cases:
        exact.reset_state()
        rounded.reset_state()
        a, b = exact.call("prefill", ids, len(ids))[0][0], rounded.call("prefill", ids, len(ids))[0][0]
        bound, tokens = PREFILL_LOGIT_SHIFT, []
        while len(tokens) < STEPS:
            assert logit_shift(a, b) < bound, (name, len(tokens), logit_shift(a, b))
            want, got = int(a.argmax()), int(b.argmax())
            if margin(a) > 2 * bound:
                assert got == want, (name, len(tokens), rounded.detokenize(tokens))
            elif got != want:
                parted.append(f"{name!r} after {len(tokens)} equal tokens, at a near tie (the f32 build's margin "
                              f"{margin(a):.3f} <= 2 x {bound})")
                break
            tokens.append(want)
            position = np.array([want], np.int32)
            a = exact.call("decode", position, len(ids) + len(tokens))[0][0]
            b = rounded.call("decode", position, len(ids) + len(tokens))[0][0]
            bound = MAX_LOGIT_SHIFT
        compared[name] = rounded.detokenize(tokens)
    # The reply a user sees first is compared whole (and what follows its end, <|im_end|>).
    assert compared["demo question (chat template)"].startswith("The capital of France is Paris."), compared
    if parted:
        warnings.warn("the q8 build's greedy tokens were compared with the f32 build's until " + "; ".join(parted),
                      stacklevel=1)


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
# Prefill reads x unrounded in both builds: its logits differ only by float32 sums in another order,
# within 1e-4 + 1e-4 |logit| of each other (test_rounding_decodes_activations_moves_logits_little), so
# by less than 4e-3 for logits below 30, and past the common offset by less than twice that.
PREFILL_LOGIT_SHIFT = 1e-2
