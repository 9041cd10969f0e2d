"""The bundled SmolLM2-135M-Instruct (GGUF, Q4_1 with a Q8_0 embedding) on WebGPU against transformers
loading the same file: final-position logits within 1e-2, and the same greedy tokens.

This file runs the model without a cache (the whole prefix each time); tests/models/test_generation.py
decodes with the KV cache."""

import numpy as np
import pytest
import tessera
from model_helpers import prompt_ids  # noqa: E402
from tessera import nn
from tessera.frontend import bundled_smollm2_path, load_gguf
from tessera.ir import Tensor
from tessera.models import model_from_gguf
from tessera.vm import VirtualMachine

PROMPTS = {
    "chat": [{"role": "user", "content": "What is the capital of France?"}],
    "completion": "The three primary colors are",
}


@pytest.fixture(scope="module")
def vm():
    model, weights = model_from_gguf(load_gguf(bundled_smollm2_path()))
    mod = nn.export(model, "prefill", {"input_ids": Tensor(("n",), "int32")}, method="last_logits",
                    attrs={"tir_var_upper_bound": {"n": 64}})
    return VirtualMachine(tessera.build(nn.bind_weights(mod, weights), "llvmpipe"))


@pytest.mark.parametrize("kind", sorted(PROMPTS))
def test_final_logits_match_transformers(reference, vm, kind):
    tokenizer, model, torch = reference
    ids = prompt_ids(tokenizer, PROMPTS[kind])
    with torch.no_grad():
        want = model(torch.tensor(ids[None].astype(np.int64))).logits[0, -1].numpy()
    got = vm["prefill"](ids)[0]
    assert np.abs(got - want).max() < 1e-2
    assert got.argmax() == want.argmax()


def test_greedy_tokens_match_transformers(reference, vm):
    tokenizer, model, torch = reference
    ids = prompt_ids(tokenizer, PROMPTS["chat"])
    steps = 6
    with torch.no_grad():
        want = model.generate(torch.tensor(ids[None].astype(np.int64)), max_new_tokens=steps, do_sample=False)
    want = want[0, len(ids):].numpy().tolist()
    tokens = list(ids)
    for _ in range(steps):
        tokens.append(int(vm["prefill"](np.asarray(tokens, np.int32))[0].argmax()))
    assert tokens[len(ids):] == want
    assert tokenizer.decode(tokens[len(ids):]).startswith("The capital of France")
