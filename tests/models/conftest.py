import os

import numpy as np
import pytest
import tessera
from tessera import nn
from tessera.frontend import bundled_smollm2_path, load_gguf
from tessera.models import export_llm, model_from_gguf
from tessera.vm import VirtualMachine


@pytest.fixture(scope="session")
def reference():
    """transformers on PyTorch's CPU build, loading the same GGUF file (dequantized to float32)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = bundled_smollm2_path()
    folder, name = os.path.dirname(path), os.path.basename(path)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.eval()
    return tokenizer, model, torch


@pytest.fixture(scope="session")
def smollm2_chat_vm():
    """SmolLM2 compiled with a 256-position KV cache: prefill and decode."""
    model, weights = model_from_gguf(load_gguf(bundled_smollm2_path()))
    return VirtualMachine(tessera.build(nn.bind_weights(export_llm(model, 256), weights), "llvmpipe"))


def prompt_ids(tokenizer, prompt) -> np.ndarray:
    text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True) \
        if isinstance(prompt, list) else prompt
    return np.asarray(tokenizer(text).input_ids, np.int32)


def greedy(vm, ids: np.ndarray, steps: int) -> list[int]:
    """Greedy decoding with the KV cache: one prefill, then one decode per token."""
    vm.reset_state()
    logits = vm["prefill"](ids, len(ids))
    tokens = [int(logits[0].argmax())]
    while len(tokens) < steps:
        logits = vm["decode"](np.array([tokens[-1]], np.int32), len(ids) + len(tokens))
        tokens.append(int(logits[0].argmax()))
    return tokens


PROMPT_TEXTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    return  n  if n<2 else fibonacci(n - 1)",
    "Héllo wörld! 12345 — ünicode 😀",
    "  leading spaces\tand tabs\n\n",
]
