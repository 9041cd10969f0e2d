"""The tiny random-weight Llama variants every model test and the conformance suite share.

Each variant is one shape of the family that Tessera supports: grouped-query, multi-head and
multi-query attention, and Qwen2's QKV bias; two layers, hidden 64, a vocabulary of 96.
Importing this module loads neither torch nor transformers."""

from __future__ import annotations

from tessera.models import LlamaConfig

VARIANTS = {
    # name: (heads, kv heads, attention bias (Qwen2), tied embeddings)
    "gqa-2x": (4, 2, False, False),
    "mha": (4, 4, False, True),
    "mqa": (4, 1, False, False),
    "qwen2-bias": (4, 2, True, True),
}
VOCAB, HIDDEN, FFN, LAYERS, HEAD_DIM = 96, 64, 128, 2, 16


def tiny_config(name: str) -> LlamaConfig:
    heads, kv_heads, bias, tied = VARIANTS[name]
    return LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_layers=LAYERS,
                       num_heads=heads, num_kv_heads=kv_heads, head_dim=HEAD_DIM, rope_theta=10000.0,
                       rms_norm_eps=1e-5, tie_word_embeddings=tied, attention_bias=bias)
