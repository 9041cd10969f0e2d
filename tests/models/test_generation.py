"""Greedy generation with the KV cache (prefill, then one decode per token) against transformers."""

import numpy as np
import pytest
import tessera
import torch
from model_helpers import greedy, prompt_ids
from tessera import nn
from tessera.ir import interpret
from tessera.models import LlamaForCausalLM, export_llm
from tessera.vm import VirtualMachine
from test_llama_vs_transformers import reference as tiny_reference

PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write a haiku about the sea."}],
    "The three primary colors are",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
]


@pytest.mark.parametrize("variant", ["gqa-2x", "qwen2-bias"])
def test_tiny_models_decode_like_transformers(variant):
    model, config, weights = tiny_reference(variant)
    mod = nn.bind_weights(export_llm(LlamaForCausalLM(config), 32), weights)
    prompt = np.array([5, 17, 3, 88, 41], np.int32)
    with torch.no_grad():
        want = model.generate(torch.tensor(prompt[None].astype(np.int64)), max_new_tokens=12,
                              do_sample=False)[0, len(prompt):].tolist()
    # The interpreter: caches are ordinary arrays that the reference writes into.
    caches = [np.zeros((32, config.num_kv_heads, config.head_dim), np.float32) for _ in range(2 * config.num_layers)]
    tokens = [int(interpret(mod, "prefill", prompt, len(prompt), *caches)[0].argmax())]
    while len(tokens) < 12:
        logits = interpret(mod, "decode", np.array([tokens[-1]], np.int32), len(prompt) + len(tokens), *caches)
        tokens.append(int(logits[0].argmax()))
    assert tokens == want
    assert greedy(VirtualMachine(tessera.build(mod, "llvmpipe")), prompt, 12) == want


def test_a_prompt_prefilled_in_chunks_continues_like_one_prefill():
    """export_llm(prefill_chunk=4): an 11-token prompt in chunks of 4, 4 and 3, each after the last,
    gives the logits of transformers' last position, and greedy decoding then matches it token for
    token; a chunk longer than 4 is refused by name."""
    from tessera.ir import RuntimeCheckError

    model, config, weights = tiny_reference("gqa-2x")
    vm = VirtualMachine(tessera.build(nn.bind_weights(export_llm(LlamaForCausalLM(config), 32, prefill_chunk=4),
                                                      weights), "llvmpipe"))
    prompt = np.array([5, 17, 3, 88, 41, 7, 9, 60, 2, 33, 12], np.int32)
    with torch.no_grad():
        want_logits = model(torch.tensor(prompt[None].astype(np.int64))).logits[0, -1].numpy()
        want = model.generate(torch.tensor(prompt[None].astype(np.int64)), max_new_tokens=10,
                              do_sample=False)[0, len(prompt):].tolist()
    for begin in range(0, len(prompt), 4):
        end = min(begin + 4, len(prompt))
        logits = vm["prefill"](prompt[begin:end], end)
    np.testing.assert_allclose(logits[0], want_logits, rtol=1e-4, atol=1e-4)
    tokens = [int(logits[0].argmax())]
    while len(tokens) < 10:
        tokens.append(int(vm["decode"](np.array([tokens[-1]], np.int32), len(prompt) + len(tokens))[0].argmax()))
    assert tokens == want
    with pytest.raises(RuntimeCheckError, match="prefill: n = 5 exceeds its upper bound 4"):
        vm["prefill"](prompt[:5], 5)


@pytest.mark.parametrize("index", range(len(PROMPTS)))
def test_smollm2_generates_the_same_32_tokens_as_transformers(reference, smollm2_chat_vm, index):
    tokenizer, model, torch_ = reference
    ids = prompt_ids(tokenizer, PROMPTS[index])
    want = hf_greedy(model, torch_, ids, 32)
    assert greedy(smollm2_chat_vm, ids, 32) == want


def hf_greedy(model, torch_, ids: np.ndarray, steps: int) -> list[int]:
    """transformers' argmax decoding with its own cache, past the end-of-turn token too (32 tokens)."""
    with torch_.no_grad():
        out = model(torch_.tensor(ids[None].astype(np.int64)), use_cache=True)
        tokens = [int(out.logits[0, -1].argmax())]
        while len(tokens) < steps:
            out = model(torch_.tensor([[tokens[-1]]]), past_key_values=out.past_key_values, use_cache=True)
            tokens.append(int(out.logits[0, -1].argmax()))
    return tokens


def test_a_sequence_longer_than_the_cache_is_refused(smollm2_chat_vm):
    from tessera.ir import RuntimeCheckError

    with pytest.raises(RuntimeCheckError, match="prefill: n = 300 exceeds its upper bound 256"):
        smollm2_chat_vm["prefill"](np.zeros(300, np.int32), 300)
    # A new turn that fits on its own but not after the conversation so far.
    with pytest.raises(RuntimeCheckError, match="prefill: total = 300 exceeds its upper bound 256"):
        smollm2_chat_vm["prefill"](np.zeros(200, np.int32), 300)
