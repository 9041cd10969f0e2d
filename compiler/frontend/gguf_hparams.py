"""A GGUF file's hyperparameters, read and checked before anything is built from them.

The metadata of a GGUF file says how large the model is (``llama.block_count``,
``llama.embedding_length`` ...), and everything after the reader is sized by it: the model's layers,
its weights' shapes, the KV cache, the rotary tables. A file may say anything, so each value must be
an integer (or a finite number) within bounds far beyond any released model, the values must agree
with one another (heads divide into KV-head groups, the embedding into heads), and with the shapes of
the tensors the file holds. A file that breaks one of these is a GGUFError naming the key, before any
model is built or anything allocated: ``block_count = 2**31`` or ``head_count = 0`` is a sentence, not
3.7 GB of layers or a ZeroDivisionError.

What is read, and which shapes follow from it, is each architecture's own (tessera.models.registry);
this module holds what every architecture reads with: a checked reader of ``<arch>.*`` keys and the
checks of the file's tensors against the shapes an architecture expects.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable
from typing import NoReturn

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


class HyperparameterReader:
    """The metadata keys of one architecture (``<arch>.<key>``) of the file ``path``, each checked as it
    is read; every problem is a GGUFError that starts with the file's name and names the key."""

    def __init__(self, meta: dict, arch: str, path: str):
        self.meta, self.arch, self.name = meta, arch, os.path.basename(path)

    def fail(self, problem: str) -> NoReturn:
        raise GGUFError(f"{self.name}: {problem}")

    def key(self, key: str) -> str:
        return f"{self.arch}.{key}"

    def has(self, key: str) -> bool:
        return self.key(key) in self.meta

    def integer(self, key: str, default: int | None = None) -> int:
        """``<arch>.<key>`` (or ``default`` when the file lacks it), an integer within ``BOUNDS[key]``."""
        full = self.key(key)
        value = self.meta.get(full, default)
        if value is None:
            self.fail(f"metadata {full} is missing")
        if isinstance(value, list):
            self.fail(f"metadata {full} is an array (a value per layer), which Tessera does not support")
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"metadata {full} is {_show(value)}, not an integer")
        low, high = BOUNDS[key]
        if not low <= value <= high:
            self.fail(f"metadata {full} is {value}, outside {low} .. {high}")
        return value

    def number(self, key: str, default: float, low: float, high: float) -> float:
        """``<arch>.<key>`` (or ``default``), a finite number strictly between ``low`` and ``high``."""
        full = self.key(key)
        value = self.meta.get(full, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(f"metadata {full} is {_show(value)}, not a finite number")
        if not low < value < high:
            self.fail(f"metadata {full} is {value}, outside {low} .. {high}")
        return float(value)

    def vocabulary_size(self, tensors: dict) -> int:
        """``<arch>.vocab_size``, else the token embedding's rows, else the tokenizer's length (a
        vocabulary-only file has no tensors); never fewer than the tokenizer's tokens."""
        tokens = self.meta.get("tokenizer.ggml.tokens")
        embedding = tensors.get("token_embd.weight")
        if self.has("vocab_size"):
            vocab = self.integer("vocab_size")
        elif embedding is not None and len(embedding.shape) == 2:
            vocab = embedding.shape[0]
        elif isinstance(tokens, list) and tokens:
            vocab = len(tokens)
        else:
            self.fail(f"no vocabulary size ({self.key('vocab_size')}), token embedding or tokenizer.ggml.tokens")
        if not 1 <= vocab <= BOUNDS["vocab_size"][1]:
            self.fail(f"the vocabulary has {vocab} tokens, outside 1 .. {BOUNDS['vocab_size'][1]}")
        if isinstance(tokens, list) and len(tokens) > vocab:
            self.fail(f"tokenizer.ggml.tokens has {len(tokens)} tokens, more than the model's vocabulary of {vocab}: "
                      "the tokenizer could give ids the embedding does not have")
        return vocab


def check_tensor_shapes(shapes: dict[str, tuple[int, ...]], tensors: dict, reader: HyperparameterReader,
                        layers: int, keys_of: Callable[[str], Iterable[str]]) -> None:
    """Every tensor of ``tensors`` (the file's, by name: arrays or QuantizedWeights, each with ``shape``)
    that ``shapes`` names has that shape, and no layer's tensor lies beyond ``layers`` (the file's
    ``<arch>.block_count``). ``keys_of(tensor name)``: the keys after ``<arch>.`` its shape comes from,
    for the message."""
    for tensor_name, tensor in tensors.items():
        layer = LAYER_TENSOR.match(tensor_name)
        if layer and int(layer.group(1)) >= layers:
            reader.fail(f"tensor {tensor_name} belongs to layer {layer.group(1)}, but {reader.key('block_count')} "
                        f"is {layers}")
        want = shapes.get(tensor_name)
        if want is not None and tuple(tensor.shape) != want:
            keys = ", ".join(reader.key(key) for key in keys_of(tensor_name))
            reader.fail(f"tensor {tensor_name} has shape {tuple(tensor.shape)}, but the hyperparameters ({keys}) give "
                        f"it {want}")


def check_tensors_present(shapes: dict[str, tuple[int, ...]], tensors: dict, name: str, arch: str, layers: int,
                          optional: tuple[str, ...] = ()) -> None:
    """The file ``name`` holds every tensor ``shapes`` names, but those whose names end with one of
    ``optional``; ``layers``: the file's ``<arch>.block_count``, for the message."""
    for tensor_name in shapes:
        if tensor_name not in tensors and not tensor_name.endswith(optional):
            raise GGUFError(f"{name}: the file has no tensor {tensor_name}, which a model of {arch}.block_count = "
                            f"{layers} layers needs")


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
