"""The Llama family as registry entries: ``llama`` (Llama 2/3, SmolLM2, TinyLlama), ``qwen2`` (QKV
bias) and ``mistral``, all built as tessera.models.llama's LlamaForCausalLM.

The three read the same keys (``<arch>.block_count`` ...) and the same tensors; they differ in the
row order of the q and k projections: llama.cpp's converter interleaves the two halves of each head
for llama and mistral (its RoPE rotates adjacent pairs), and leaves qwen2's as transformers has them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...frontend.gguf_file import GGUFError
from ...frontend.gguf_hparams import HyperparameterReader, check_tensor_shapes, check_tensors_present
from ..llama import LlamaConfig, LlamaForCausalLM
from ..registry import Architecture, register_architecture, weight_as_is

# GGUF tensor name (after "blk.N.") -> module path (after "model.layers.N.")
LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# Tokens that end an assistant turn in the chat templates of the Llama family (ChatML, Llama 3).
END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>")
# Tensors a model may lack: a tied head reads the embedding; the biases are Qwen2's.
OPTIONAL_TENSORS = ("output.weight", ".attn_q.bias", ".attn_k.bias", ".attn_v.bias")


def read_llama_config(meta: dict, arch: str, tensors: dict, path: str) -> LlamaConfig:
    """The model's hyperparameters from ``meta``, each checked on its own, against the others and against
    the shapes of ``tensors`` (the file's, by name: arrays or QuantizedWeights, each with ``shape``)."""
    read = HyperparameterReader(meta, arch, path)
    hidden = read.integer("embedding_length")
    heads = read.integer("attention.head_count")
    kv_heads = read.integer("attention.head_count_kv", heads)
    if heads % kv_heads:
        read.fail(f"metadata {arch}.attention.head_count ({heads}) is not a multiple of "
                  f"{arch}.attention.head_count_kv ({kv_heads}): the query heads cannot share the KV heads in groups")
    if not read.has("attention.key_length") and hidden % heads:
        read.fail(f"metadata {arch}.embedding_length ({hidden}) is not a multiple of {arch}.attention.head_count "
                  f"({heads}), and no {arch}.attention.key_length says the head size")
    head_dim = read.integer("attention.key_length", hidden // heads)
    if head_dim % 2:
        read.fail(f"the head size ({arch}.attention.key_length or embedding_length / head_count) is {head_dim}; "
                  "rotary embeddings need an even one")
    if read.integer("attention.value_length", head_dim) != head_dim:
        read.fail(f"metadata {arch}.attention.value_length differs from the key length {head_dim}, which Tessera "
                  "does not support")
    layers = read.integer("block_count")
    ffn = read.integer("feed_forward_length")
    context = read.integer("context_length", 2048)
    theta = read.number("rope.freq_base", 10000.0, 0.0, 1e12)
    eps = read.number("attention.layer_norm_rms_epsilon", 1e-6, 0.0, 1.0)
    config = LlamaConfig(
        vocab_size=read.vocabulary_size(tensors), hidden_size=hidden, intermediate_size=ffn, num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, rope_theta=theta, rms_norm_eps=eps,
        tie_word_embeddings="output.weight" not in tensors, attention_bias="blk.0.attn_q.bias" in tensors,
        architecture=arch, context_length=context)
    check_tensor_shapes(expected_shapes(config), tensors, read, layers, _keys_of)
    return config


def expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
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


def check_llama_tensors(config: LlamaConfig, tensors: dict, name: str) -> None:
    """The file holds every tensor a model of ``config`` needs (read_llama_config checked their shapes):
    the weights of each layer, the embedding and the final norm; the output head may be the embedding
    (tied); a file with attention biases has them in every layer."""
    check_tensors_present(expected_shapes(config), tensors, name, config.architecture, config.num_layers,
                          OPTIONAL_TENSORS)
    if config.attention_bias:
        for layer in range(config.num_layers):
            for part in ("q", "k", "v"):
                if f"blk.{layer}.attn_{part}.bias" not in tensors:
                    raise GGUFError(f"{name}: the file has attention biases (blk.0.attn_q.bias) but no "
                                    f"blk.{layer}.attn_{part}.bias")


def _keys_of(tensor_name: str) -> list[str]:
    """The hyperparameters a tensor's shape comes from, for the message."""
    keys = ["embedding_length"]
    if "attn_" in tensor_name and "norm" not in tensor_name:
        keys += ["attention.head_count", "attention.head_count_kv", "attention.key_length"]
    if "ffn_" in tensor_name and "norm" not in tensor_name:
        keys.append("feed_forward_length")
    if tensor_name.startswith(("token_embd", "output.")):
        keys.append("vocab_size")
    return keys


def from_llama_cpp_rope_order(module: str, leaf: str, value: np.ndarray, config: LlamaConfig) -> np.ndarray:
    """llama.cpp interleaves the two halves of each head's q/k rows for its RoPE; this row order
    restores transformers' layout, which the rotate-half RoPE here expects (rows are whole blocks,
    so quantized weights reorder as they are)."""
    if leaf != "weight" or not module.endswith(("q_proj", "k_proj")):
        return value
    heads = config.num_heads if module.endswith("q_proj") else config.num_kv_heads
    rows = np.arange(heads * config.head_dim).reshape(heads, config.head_dim // 2, 2).swapaxes(1, 2).reshape(-1)
    return value[rows]


LLAMA = Architecture(
    name="llama", read_config=read_llama_config, check_tensors=check_llama_tensors, layer_names=LAYER_NAMES,
    global_names=GLOBAL_NAMES, build=LlamaForCausalLM, convert_weight=from_llama_cpp_rope_order,
    end_of_turn_tokens=END_OF_TURN_TOKENS)
QWEN2 = replace(LLAMA, name="qwen2", convert_weight=weight_as_is)
MISTRAL = replace(LLAMA, name="mistral")

for _entry in (LLAMA, QWEN2, MISTRAL):  # this order is the one an unknown architecture's error lists
    register_architecture(_entry)

__all__ = ["END_OF_TURN_TOKENS", "GLOBAL_NAMES", "LAYER_NAMES", "LLAMA", "MISTRAL", "QWEN2", "check_llama_tensors",
           "expected_shapes", "from_llama_cpp_rope_order", "read_llama_config"]
