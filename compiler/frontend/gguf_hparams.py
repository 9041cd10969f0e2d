"""A GGUF file's hyperparameters, read and checked before anything is built from them.

The metadata of a GGUF file says how large the model is (``llama.block_count``,
``llama.embedding_length`` ...), and everything after the reader is sized by it: the model's layers,
its weights' shapes, the KV cache, the rotary tables. A file may say anything, so each value must be
an integer (or a finite number) within bounds far beyond any released model, the values must agree
with one another (heads divide into KV-head groups, the embedding into heads), and with the shapes of
the tensors the file holds. A file that breaks one of these is a GGUFError naming the key, before any
model is built or anything allocated: ``block_count = 2**31`` or ``head_count = 0`` is a sentence, not
3.7 GB of layers or a ZeroDivisionError.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from .gguf_file import GGUFError

# (lowest, highest) each integer hyperparameter may be, by key after "<arch>.": a few times the largest
# released model's (Llama 3.1 405B: 126 blocks, embedding 16384, FFN 53248, 128 heads; Gemma: vocabulary
# 262144, key length 256; Llama 4 Scout: 10M positions of context).
BOUNDS = {
    "block_count": (1, 1024),
    "embedding_length": (1, 1 << 16),
    "feed_forward_length": (1, 1 << 18),
    "attention.head_count": (1, 1024),
    "attention.head_count_kv": (1, 1024),
    "attention.key_length": (1, 1024),
    "attention.value_length": (1, 1024),
    "context_length": (1, 1 << 24),
    "vocab_size": (1, 1 << 22),
}
LAYER_TENSOR = re.compile(r"blk\.(\d+)\.")


@dataclass(frozen=True)
class GGUFHyperparameters:
    """What the file's metadata says about the model; the model's LlamaConfig takes the fields it shares."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    context_length: int
    tie_word_embeddings: bool
    attention_bias: bool


def read_hyperparameters(meta: dict, arch: str, tensors: dict, path: str) -> GGUFHyperparameters:
    """The model's hyperparameters from ``meta``, each checked on its own, against the others and against
    the shapes of ``tensors`` (the file's, by name: arrays or QuantizedWeights, each with ``shape``)."""
    name = os.path.basename(path)

    def fail(problem: str):
        raise GGUFError(f"{name}: {problem}")

    def integer(key: str, default=None):
        full = f"{arch}.{key}"
        value = meta.get(full, default)
        if value is None:
            fail(f"metadata {full} is missing")
        if isinstance(value, list):
            fail(f"metadata {full} is an array (a value per layer), which Tessera does not support")
        if isinstance(value, bool) or not isinstance(value, int):
            fail(f"metadata {full} is {_show(value)}, not an integer")
        low, high = BOUNDS[key]
        if not low <= value <= high:
            fail(f"metadata {full} is {value}, outside {low} .. {high}")
        return value

    def number(key: str, default: float, low: float, high: float) -> float:
        full = f"{arch}.{key}"
        value = meta.get(full, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            fail(f"metadata {full} is {_show(value)}, not a finite number")
        if not low < value < high:
            fail(f"metadata {full} is {value}, outside {low} .. {high}")
        return float(value)

    hidden = integer("embedding_length")
    heads = integer("attention.head_count")
    kv_heads = integer("attention.head_count_kv", heads)
    if heads % kv_heads:
        fail(f"metadata {arch}.attention.head_count ({heads}) is not a multiple of {arch}.attention.head_count_kv "
             f"({kv_heads}): the query heads cannot share the KV heads in groups")
    if f"{arch}.attention.key_length" not in meta and hidden % heads:
        fail(f"metadata {arch}.embedding_length ({hidden}) is not a multiple of {arch}.attention.head_count "
             f"({heads}), and no {arch}.attention.key_length says the head size")
    head_dim = integer("attention.key_length", hidden // heads)
    if head_dim % 2:
        fail(f"the head size ({arch}.attention.key_length or embedding_length / head_count) is {head_dim}; rotary "
             "embeddings need an even one")
    if integer("attention.value_length", head_dim) != head_dim:
        fail(f"metadata {arch}.attention.value_length differs from the key length {head_dim}, which Tessera does not "
             "support")
    layers = integer("block_count")
    ffn = integer("feed_forward_length")
    context = integer("context_length", 2048)
    theta = number("rope.freq_base", 10000.0, 0.0, 1e12)
    eps = number("attention.layer_norm_rms_epsilon", 1e-6, 0.0, 1.0)

    tokens = meta.get("tokenizer.ggml.tokens")
    embedding = tensors.get("token_embd.weight")
    # The embedding's rows, else the vocabulary's length (a vocabulary-only file has no tensors).
    if f"{arch}.vocab_size" in meta:
        vocab = integer("vocab_size")
    elif embedding is not None and len(embedding.shape) == 2:
        vocab = embedding.shape[0]
    elif isinstance(tokens, list) and tokens:
        vocab = len(tokens)
    else:
        fail(f"no vocabulary size ({arch}.vocab_size), token embedding or tokenizer.ggml.tokens")
    if not 1 <= vocab <= BOUNDS["vocab_size"][1]:
        fail(f"the vocabulary has {vocab} tokens, outside 1 .. {BOUNDS['vocab_size'][1]}")
    if isinstance(tokens, list) and len(tokens) > vocab:
        fail(f"tokenizer.ggml.tokens has {len(tokens)} tokens, more than the model's vocabulary of {vocab}: the "
             "tokenizer could give ids the embedding does not have")
    config = GGUFHyperparameters(
        architecture=arch, vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn, num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, rope_theta=theta, rms_norm_eps=eps,
        context_length=context, tie_word_embeddings="output.weight" not in tensors,
        attention_bias="blk.0.attn_q.bias" in tensors)
    check_tensor_shapes(config, tensors, name)
    return config


def expected_shapes(config: GGUFHyperparameters) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor a model of ``config`` reads, by GGUF name: (rows, columns) of a matrix
    (a quantized one's too: rows of blocks along the columns), (length,) of a vector."""
    c = config
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    shapes = {"token_embd.weight": (c.vocab_size, c.hidden_size), "output.weight": (c.vocab_size, c.hidden_size),
              "output_norm.weight": (c.hidden_size,)}
    for layer in range(c.num_layers):
        prefix = f"blk.{layer}."
        shapes.update({prefix + "attn_norm.weight": (c.hidden_size,), prefix + "ffn_norm.weight": (c.hidden_size,),
                       prefix + "attn_q.weight": (q, c.hidden_size), prefix + "attn_k.weight": (kv, c.hidden_size),
                       prefix + "attn_v.weight": (kv, c.hidden_size), prefix + "attn_output.weight": (c.hidden_size, q),
                       prefix + "ffn_gate.weight": (c.intermediate_size, c.hidden_size),
                       prefix + "ffn_up.weight": (c.intermediate_size, c.hidden_size),
                       prefix + "ffn_down.weight": (c.hidden_size, c.intermediate_size),
                       prefix + "attn_q.bias": (q,), prefix + "attn_k.bias": (kv,), prefix + "attn_v.bias": (kv,)})
    return shapes


def check_tensor_shapes(config: GGUFHyperparameters, tensors: dict, name: str) -> None:
    """Every tensor the model reads that the file holds has the shape the hyperparameters give it, and no
    layer's tensor lies beyond ``block_count``."""
    shapes = expected_shapes(config)
    for tensor_name, tensor in tensors.items():
        layer = LAYER_TENSOR.match(tensor_name)
        if layer and int(layer.group(1)) >= config.num_layers:
            raise GGUFError(f"{name}: tensor {tensor_name} belongs to layer {layer.group(1)}, but "
                            f"{config.architecture}.block_count is {config.num_layers}")
        want = shapes.get(tensor_name)
        if want is not None and tuple(tensor.shape) != want:
            raise GGUFError(f"{name}: tensor {tensor_name} has shape {tuple(tensor.shape)}, but the hyperparameters "
                            f"({_keys_of(tensor_name, config.architecture)}) give it {want}")


def check_model_tensors(config: GGUFHyperparameters, tensors: dict, name: str) -> None:
    """The file holds every tensor a model of ``config`` needs (``check_tensor_shapes`` checked their shapes):
    the weights of each layer, the embedding and the final norm; the output head may be the embedding
    (tied), the biases are Qwen2's."""
    optional = ("output.weight", ".attn_q.bias", ".attn_k.bias", ".attn_v.bias")
    for tensor_name in expected_shapes(config):
        if tensor_name not in tensors and not tensor_name.endswith(optional):
            raise GGUFError(f"{name}: the file has no tensor {tensor_name}, which a model of "
                            f"{config.architecture}.block_count = {config.num_layers} layers needs")
    if config.attention_bias:
        for layer in range(config.num_layers):
            for part in ("q", "k", "v"):
                if f"blk.{layer}.attn_{part}.bias" not in tensors:
                    raise GGUFError(f"{name}: the file has attention biases (blk.0.attn_q.bias) but no "
                                    f"blk.{layer}.attn_{part}.bias")


def _keys_of(tensor_name: str, arch: str) -> str:
    """The hyperparameters a tensor's shape comes from, for the message."""
    keys = ["embedding_length"]
    if "attn_" in tensor_name and "norm" not in tensor_name:
        keys += ["attention.head_count", "attention.head_count_kv", "attention.key_length"]
    if "ffn_" in tensor_name and "norm" not in tensor_name:
        keys.append("feed_forward_length")
    if tensor_name.startswith(("token_embd", "output.")):
        keys.append("vocab_size")
    return ", ".join(f"{arch}.{key}" for key in keys)


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
