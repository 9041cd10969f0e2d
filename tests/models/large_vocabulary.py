"""A random-weight Qwen2-shaped model with Qwen2.5-0.5B's vocabulary and hidden size (151,936 x 896):
its tied Q8_0 token embedding is 144.6 MB, more than the 128 MiB one binding may be on WebGPU's default
limits, so every GPU build reads it in row chunks (transform/split_weights.py). One decoder layer
of float32 weights keeps the rest small. Shared by the Python VM's test and the browser test's
fixture (tests/browser/large-vocabulary.test.mjs writes it with ``python large_vocabulary.py FOLDER``)."""

from __future__ import annotations

import sys

import numpy as np
from tessera import nn
from tessera.models import LlamaConfig, LlamaForCausalLM, export_llm

VOCAB, HIDDEN = 151_936, 896
CONTEXT = 32
CONFIG = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_layers=1, num_heads=14,
                     num_kv_heads=2, head_dim=64, rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                     attention_bias=True)
FORMATS = {"model.embed_tokens": "q8_0"}
# Indices on both sides of every chunk boundary the build may choose, and the last row.
PROMPT = np.array([0, 1, 75_967, 75_968, 75_969, 151_935, 42, 100_000], np.int32)


def q8_0_words(rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Random Q8_0 blocks (a float16 scale, then 32 int8 values) as the uint32 words a kernel reads."""
    blocks = np.empty((rows, k // 32, 34), np.uint8)
    blocks[:, :, :2] = rng.uniform(0.005, 0.02, (rows, k // 32)).astype(np.float16)[..., None].view(np.uint8)
    blocks[:, :, 2:] = rng.integers(-127, 128, (rows, k // 32, 32), dtype=np.int8).view(np.uint8)
    return blocks.reshape(rows, -1).view(np.uint32)


def weights(model: LlamaForCausalLM, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for path, param in model.parameters().items():
        if param.quant:
            out[path] = q8_0_words(param.shape[0], param.k, rng)
        elif path.endswith("norm.weight"):
            out[path] = (1 + 0.1 * rng.standard_normal(param.shape)).astype(np.float32)
        else:
            out[path] = (rng.standard_normal(param.shape) * param.shape[-1] ** -0.5).astype(np.float32)
    return out


def large_vocabulary_module():
    """The model's prefill, decode and samplers with its weights bound: what the VMs compile."""
    model = LlamaForCausalLM(CONFIG, FORMATS)
    return nn.bind_weights(export_llm(model, CONTEXT), weights(model))


def write_fixture(folder: str, target: str = "swiftshader") -> None:
    """The build for ``target`` in ``folder``/build, and what the reference interpreter gives for it:
    the prefill logits of ``PROMPT`` (float32, little-endian) in ``folder``/prefill-logits.bin and the
    prompt in ``folder``/prompt.json."""
    import json
    import os

    import tessera
    from tessera.ir import interpret

    mod = large_vocabulary_module()
    tessera.build(mod, target).save(os.path.join(folder, "build"))
    caches = [np.zeros((CONTEXT, CONFIG.num_kv_heads, CONFIG.head_dim), np.float32)
              for _ in range(2 * CONFIG.num_layers)]
    logits = interpret(mod, "prefill", PROMPT, len(PROMPT), *caches)
    np.asarray(logits, "<f4").tofile(os.path.join(folder, "prefill-logits.bin"))
    with open(os.path.join(folder, "prompt.json"), "w") as f:
        json.dump([int(i) for i in PROMPT], f)


if __name__ == "__main__":
    write_fixture(sys.argv[1], *sys.argv[2:3])
