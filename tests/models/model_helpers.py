"""Helpers the model tests share: a prompt's token ids, greedy decoding with the KV cache, and a few
prompt texts. A module of its own rather than tests/models/conftest.py: with several conftest.py
files under tests/, ``from conftest import ...`` finds whichever one was imported first."""

import numpy as np


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
