"""The Llama family (Llama 2/3, SmolLM2, TinyLlama, Mistral; Qwen2 with QKV bias) in tessera.nn.

Module paths mirror Hugging Face's parameter names (``model.layers.0.self_attn.q_proj.weight``),
so a transformers state dict binds as it is. RoPE uses the rotate-half convention of
transformers' Llama. ``forward`` computes the logits of every position of one sequence; ``step``,
``prefill_paged`` and ``decode_batch`` are what tessera.models.llm_program exports to the functions
the runtimes call. The GGUF architectures built as this model: tessera.models.architectures.llama.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import op
from ..ir import Constant, PrimValue
from ..ir.expr import Expr, TupleGetItem
from ..nn import Embedding, Linear, Module, ModuleList, RMSNorm
from .llm_program import Placement


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    architecture: str = "llama"  # GGUF's general.architecture of the file read (tessera.models.registry)
    context_length: int = 2048  # the positions the model was trained for (GGUF <arch>.context_length)


class LlamaAttention(Module):
    def __init__(self, c: LlamaConfig, formats=None, prefix=""):
        self.c = c
        q = _formats(formats, prefix)
        self.q_proj = Linear(c.hidden_size, c.num_heads * c.head_dim, bias=c.attention_bias, quant=q("q_proj"))
        self.k_proj = Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.attention_bias, quant=q("k_proj"))
        self.v_proj = Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.attention_bias, quant=q("v_proj"))
        self.o_proj = Linear(c.num_heads * c.head_dim, c.hidden_size, quant=q("o_proj"))

    def forward(self, x: Expr, cos: Expr, sin: Expr, n) -> Expr:
        c = self.c
        q, k, v = self._qkv(x, cos, sin, n)
        return self.o_proj(self._attend(q, k, op.reshape(v, [n, c.num_kv_heads, c.head_dim]), n))

    def cached(self, x: Expr, cos: Expr, sin: Expr, n, start, end, cache) -> Expr:
        """Attention of n new positions over ``end`` cached ones, writing the new keys and values.
        One kernel rotates q and k and appends k and v to the caches (op.rope_append), reading the
        projections side by side: the concat is no copy once combine_parallel_matmul has made them
        one GEMV. The attention kernel reads the cache where it lies, rows 0 .. end - 1 only."""
        qkv = op.concat((self.q_proj(x), self.k_proj(x), self.v_proj(x)), axis=1)
        appended = op.rope_append(qkv, cos, sin, cache[0], cache[1], PrimValue(start))
        q, keys, values = (TupleGetItem(appended, i) for i in range(3))
        return self.o_proj(self._attend(q, keys, values, end))

    def paged(self, x: Expr, cos: Expr, sin: Expr, positions: Expr, page_table: Expr, cache, page_size: int) -> Expr:
        """``cached`` over a KV cache in pages (op/paged.py): each row's key and value written at its
        position in its sequence's pages, and each row attending its own sequence's keys."""
        qkv = op.concat((self.q_proj(x), self.k_proj(x), self.v_proj(x)), axis=1)
        appended = op.paged_rope_append(qkv, cos, sin, cache[0], cache[1], positions, page_table, page_size=page_size)
        q, keys, values = (TupleGetItem(appended, i) for i in range(3))
        return self.o_proj(op.nn.paged_attention(q, keys, values, positions, page_table, page_size=page_size,
                                                 scale=self.c.head_dim ** -0.5))

    def _qkv(self, x: Expr, cos: Expr, sin: Expr, n):
        c = self.c
        q = _rope(op.reshape(self.q_proj(x), [n, c.num_heads, c.head_dim]), cos, sin, c.head_dim)
        k = _rope(op.reshape(self.k_proj(x), [n, c.num_kv_heads, c.head_dim]), cos, sin, c.head_dim)
        return q, k, self.v_proj(x)

    def _attend(self, q: Expr, keys: Expr, values: Expr, end) -> Expr:
        """Causal grouped-query attention (tessera.op.attention: one fused kernel), (n, heads * d) out."""
        return op.nn.attention(q, keys, values, PrimValue(end), scale=self.c.head_dim ** -0.5)


class LlamaMLP(Module):
    def __init__(self, c: LlamaConfig, formats=None, prefix=""):
        q = _formats(formats, prefix)
        self.gate_proj = Linear(c.hidden_size, c.intermediate_size, quant=q("gate_proj"))
        self.up_proj = Linear(c.hidden_size, c.intermediate_size, quant=q("up_proj"))
        self.down_proj = Linear(c.intermediate_size, c.hidden_size, quant=q("down_proj"))

    def forward(self, x: Expr) -> Expr:
        return self.down_proj(op.multiply(op.nn.silu(self.gate_proj(x)), self.up_proj(x)))


class LlamaDecoderLayer(Module):
    def __init__(self, c: LlamaConfig, formats=None, prefix=""):
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = LlamaAttention(c, formats, prefix + "self_attn.")
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = LlamaMLP(c, formats, prefix + "mlp.")

    def forward(self, x: Expr, cos: Expr, sin: Expr, n) -> Expr:
        h = op.add(x, self.self_attn(self.input_layernorm(x), cos, sin, n))
        return op.add(h, self.mlp(self.post_attention_layernorm(h)))


class LlamaModel(Module):
    def __init__(self, c: LlamaConfig, formats=None):
        q = _formats(formats, "model.")
        self.embed_tokens = Embedding(c.vocab_size, c.hidden_size, quant=q("embed_tokens"))
        self.layers = ModuleList(LlamaDecoderLayer(c, formats, f"model.layers.{i}.") for i in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class LlamaForCausalLM(Module):
    """``formats`` maps a weight's path without ".weight" (``model.layers.0.mlp.up_proj``) to its GGUF
    block format when the weight is quantized."""

    def __init__(self, c: LlamaConfig, formats: dict[str, str] | None = None):
        self.config = c
        self.model = LlamaModel(c, formats)
        head = _formats(formats, "")("lm_head")
        self.lm_head = None if c.tie_word_embeddings else Linear(c.hidden_size, c.vocab_size, quant=head)

    def forward(self, input_ids: Expr) -> Expr:
        """Logits (n, vocab) for ``input_ids`` (n,) int32, attending causally from position 0."""
        return self._head(self._hidden(input_ids))

    def last_logits(self, input_ids: Expr) -> Expr:
        """Logits (1, vocab) of the last position only: what generation needs, without the other rows."""
        n = input_ids.struct_info.shape[0]
        return self._head(op.strided_slice(self._hidden(input_ids), axes=[0], begin=[n - 1], end=[n]))

    def step(self, input_ids: Expr, total: Expr, *caches: Expr, placement: Placement | None = None) -> Expr:
        """Last-position logits (1, vocab) for ``input_ids`` (n,) at positions total - n .. total - 1,
        with earlier positions' keys and values read from ``caches`` (per layer: keys, values; each
        (capacity, kv heads, head dim)), into which this step writes its own. ``placement``: a build
        split across two devices (layers from ``placement.split_at`` on, the final norm and the head
        on its CPU vdevice); None: one device."""
        c = self.config
        split_at = placement.split_at if placement is not None else None
        n = input_ids.struct_info.shape[0]
        end = total.struct_info.value
        start = end - n
        positions = op.arange(start=start, end=end, step=1, dtype="int32")
        cos, sin = _rope_tables_at(positions, n, c)
        x = self.model.embed_tokens(input_ids)
        for index, layer in enumerate(self.model.layers):
            if index == split_at:
                x, cos, sin = self._to_cpu(x, start, end, n, placement.cpu_vdevice)
            cache = (caches[2 * index], caches[2 * index + 1])
            h = op.add(x, layer.self_attn.cached(layer.input_layernorm(x), cos, sin, n, start, end, cache))
            x = op.add(h, layer.mlp(layer.post_attention_layernorm(h)))
        if split_at == c.num_layers:
            x = op.to_vdevice(x, vdevice=placement.cpu_vdevice)
        x = self.model.norm(x)
        return self._head(op.strided_slice(x, axes=[0], begin=[n - 1], end=[n]))

    def _to_cpu(self, x: Expr, start, end, n, cpu_vdevice: str):
        """Where a split build leaves the GPU: the hidden state moves (one copy per step, whatever the
        layers), and the CPU layers make their own RoPE tables, of positions counted on the CPU (a hint
        that realize_vdevice places there) rather than copied from the GPU's."""
        x = op.to_vdevice(x, vdevice=cpu_vdevice)
        positions = op.hint_on_device(op.arange(start=start, end=end, step=1, dtype="int32"), device="cpu")
        cos, sin = _rope_tables_at(positions, n, self.config)
        return x, cos, sin

    def prefill_paged(self, input_ids: Expr, total: Expr, page_table: Expr, *caches: Expr, page_size: int) -> Expr:
        """``step`` for one sequence of a paged KV cache (``page_table`` (1, pages) of ``page_size``
        positions each): the prompt's chunk ``input_ids`` (n,) at positions total - n .. total - 1; the
        last position's logits (1, vocab)."""
        n = input_ids.struct_info.shape[0]
        end = total.struct_info.value
        positions = op.arange(start=end - n, end=end, step=1, dtype="int32")
        x = self._paged_layers(input_ids, positions, page_table, caches, page_size)
        return self._head(op.strided_slice(x, axes=[0], begin=[n - 1], end=[n]))

    def decode_batch(self, input_ids: Expr, positions: Expr, page_table: Expr, *caches: Expr, page_size: int) -> Expr:
        """One decode step of b sequences together: token ``input_ids[i]`` at ``positions[i]`` of the
        sequence whose pages are ``page_table[i]``; logits (b, vocab). The projections are GEMMs over
        the batch; attention reads each sequence's own pages."""
        return self._head(self._paged_layers(input_ids, positions, page_table, caches, page_size))

    def _paged_layers(self, input_ids: Expr, positions: Expr, page_table: Expr, caches, page_size: int) -> Expr:
        c = self.config
        n = input_ids.struct_info.shape[0]
        cos, sin = _rope_tables_at(positions, n, c)
        x = self.model.embed_tokens(input_ids)
        for index, layer in enumerate(self.model.layers):
            cache = (caches[2 * index], caches[2 * index + 1])
            attention = layer.self_attn.paged(layer.input_layernorm(x), cos, sin, positions, page_table, cache,
                                              page_size)
            h = op.add(x, attention)
            x = op.add(h, layer.mlp(layer.post_attention_layernorm(h)))
        return self.model.norm(x)

    def _hidden(self, input_ids: Expr) -> Expr:
        c = self.config
        n = input_ids.struct_info.shape[0]
        cos, sin = _rope_tables(n, c)
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, n)
        return self.model.norm(x)

    def _head(self, x: Expr) -> Expr:
        if self.lm_head is not None:
            return self.lm_head(x)
        embedding = self.model.embed_tokens
        if embedding.quant:  # tied to a quantized embedding: read its blocks as the head's rows
            return op.quantized_matmul(x, embedding.weight.var, format=embedding.quant, k=embedding.dim)
        return op.matmul(x, op.permute_dims(embedding.weight.var))


def _formats(formats: dict[str, str] | None, prefix: str):
    return lambda name: (formats or {}).get(prefix + name)


def _rope_tables(n, c: LlamaConfig):
    """cos and sin of shape (n, 1, head_dim) for positions 0..n-1 (halves repeated, as rotate-half wants)."""
    return _rope_tables_at(op.arange(start=0, end=n, step=1, dtype="int32"), n, c)


def _rope_tables_at(positions: Expr, n, c: LlamaConfig):
    half = c.head_dim // 2
    inv_freq = (1.0 / c.rope_theta ** (np.arange(half, dtype=np.float64) * 2 / c.head_dim)).astype(np.float32)
    positions = op.astype(positions, dtype="float32")
    angles = op.multiply(op.expand_dims(positions, axis=1), Constant(inv_freq[None, :]))
    angles = op.concat((angles, angles), axis=1)
    shape = [n, 1, c.head_dim]
    return op.reshape(op.cos(angles), shape), op.reshape(op.sin(angles), shape)


def _rope(x: Expr, cos: Expr, sin: Expr, head_dim: int) -> Expr:
    half = head_dim // 2
    first = op.strided_slice(x, axes=[2], begin=[0], end=[half])
    second = op.strided_slice(x, axes=[2], begin=[half], end=[head_dim])
    rotated = op.concat((op.negative(second), first), axis=2)
    return op.add(op.multiply(x, cos), op.multiply(rotated, sin))


__all__ = ["LlamaConfig", "LlamaForCausalLM"]
