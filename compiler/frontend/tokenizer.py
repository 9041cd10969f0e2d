"""Tokenizers from GGUF metadata, as Hugging Face ``tokenizers`` objects (tokenizer.json), and the chat
template rendered with jinja2, as transformers renders it."""

from __future__ import annotations

import functools

from .gguf_reader import GGUFError, TokenizerSpec


def build_tokenizer(spec: TokenizerSpec):
    """A byte-level BPE tokenizer (GGUF model "gpt2": SmolLM2, Qwen2, Llama 3) from the GGUF vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if spec.model != "gpt2":
        raise GGUFError(f"tokenizer model {spec.model!r} is not supported yet (supported: gpt2, byte-level BPE)")
    vocab = {token: index for index, token in enumerate(spec.tokens)}
    merges = [tuple(merge.split(" ", 1)) for merge in spec.merges]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    # Token type 3 is "control" in GGUF: chat markers such as <|im_start|>, never split.
    special = [AddedToken(token, special=True, normalized=False)
               for token, kind in zip(spec.tokens, spec.token_types) if kind == 3]
    tokenizer.add_special_tokens(special)
    return tokenizer


def render_chat(template: str, messages: list[dict], add_generation_prompt: bool = True, **extra) -> str:
    """The conversation as the model's chat template lays it out (jinja2, sandboxed)."""
    return _compiled_template(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                               **extra)


@functools.lru_cache(maxsize=8)
def _compiled_template(template: str):
    """Compiling a template costs about 100 renderings of it: `tessera compile` renders one ~250
    times to check its reduction (frontend/chat_format.py), a chat once per turn."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(template)
