"""A GGUF Llama-family file as a LlamaForCausalLM and its weights, keeping quantized blocks as they are."""

from __future__ import annotations

import os
from dataclasses import fields

import numpy as np

from ..frontend.gguf_hparams import check_model_tensors
from ..frontend.gguf_reader import GGUFModel, QuantizedWeight
from .llama import LlamaConfig, LlamaForCausalLM

# GGUF tensor name (after "blk.N.") -> module path (after "model.layers.N.")
LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def llama_from_gguf(model: GGUFModel) -> tuple[LlamaForCausalLM, dict[str, np.ndarray]]:
    """The model and its weights; a GGUFError naming the first tensor the model needs that the file lacks
    (load_gguf checked the shapes of those it has)."""
    g = model.config
    check_model_tensors(g, model.tensors, os.path.basename(model.path))
    config = LlamaConfig(**{f.name: getattr(g, f.name) for f in fields(LlamaConfig)})
    weights: dict[str, np.ndarray] = {}
    formats: dict[str, str] = {}
    for name, tensor in model.tensors.items():
        path = _module_path(name)
        if path is None:
            continue
        module, leaf = path
        value = tensor.words if isinstance(tensor, QuantizedWeight) else np.asarray(tensor, np.float32)
        if leaf == "weight" and module.endswith(("q_proj", "k_proj")) and g.architecture in ("llama", "mistral"):
            heads = g.num_heads if module.endswith("q_proj") else g.num_kv_heads
            value = value[_unpermute_rows(heads, g.head_dim)]
        if isinstance(tensor, QuantizedWeight):
            formats[module] = tensor.format
        weights[f"{module}.{leaf}"] = np.ascontiguousarray(value)
    return LlamaForCausalLM(config, formats), weights


def _module_path(name: str) -> tuple[str, str] | None:
    parts = name.split(".")
    leaf = parts[-1]
    if parts[0] == "blk":
        mapped = LAYER_NAMES.get(parts[2])
        return (f"model.layers.{parts[1]}.{mapped}", leaf) if mapped else None
    mapped = GLOBAL_NAMES.get(parts[0])
    return (mapped, leaf) if mapped else None


def _unpermute_rows(heads: int, head_dim: int) -> np.ndarray:
    """llama.cpp interleaves the two halves of each head's q/k rows for its RoPE; this row order
    restores transformers' layout, which the rotate-half RoPE here expects (rows are whole blocks,
    so quantized weights reorder as they are)."""
    return np.arange(heads * head_dim).reshape(heads, head_dim // 2, 2).swapaxes(1, 2).reshape(-1)
