"""The LLM architectures Tessera compiles, keyed by GGUF's ``general.architecture``, as llama.cpp keys
its architecture tables.

An entry says all that is particular to one architecture: how its hyperparameters are read from the
file's metadata (and checked against the tensors' shapes), which tensors a model needs, where each
GGUF tensor goes in the model (its tensor-name table), how the model is built, and its chat defaults
(the tokens that end an assistant turn). Everything after that is shared: tessera.models.from_gguf
maps the weights by the entry's table, and tessera.models.llm_program exports any entry's model to
the functions the runtimes call. The built-in entries are in tessera.models.architectures;
``register_architecture`` adds one from outside the package (docs/models.md shows how).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..frontend.gguf_file import GGUFError


def weight_as_is(module: str, leaf: str, value: np.ndarray, config: Any) -> np.ndarray:
    """An architecture's ``convert_weight`` when the file holds its weights as the model reads them."""
    return value


@dataclass(frozen=True)
class Architecture:
    """One architecture: ``name`` is the GGUF ``general.architecture`` it reads.

    - ``read_config(metadata, arch, tensors, path)``: the model's config from the file's metadata,
      each value checked and the shapes of ``tensors`` (by GGUF name) checked against it; a problem
      is a GGUFError naming the key or the tensor. ``arch`` is the file's architecture, the prefix of
      its keys (``llama.block_count``), so that a variant may share a reader.
    - ``check_tensors(config, tensors, file name)``: a GGUFError naming the first tensor the model
      needs that the file lacks (a vocabulary-only file loads, but builds no model).
    - ``layer_names``: a layer's GGUF tensor name (after ``blk.N.``) -> its module path (after
      ``model.layers.N.``); ``global_names``: the other tensors' names (before the first ``.``) ->
      their module paths. A tensor neither names is not read.
    - ``build(config, formats)``: the model (``formats``: a weight's module path -> its GGUF block
      format when quantized); a model that tessera.models.llm_program can export.
    - ``convert_weight(module path, leaf, value, config)``: a weight as the model wants it, from the
      file's layout (llama.cpp's q/k row order, say); by default as it is.
    - ``end_of_turn_tokens``: the tokens that end an assistant turn in this family's chat templates;
      each one the vocabulary has is a stop token of the compiled model, with the file's EOS token.
    """

    name: str
    read_config: Callable[[dict, str, dict, str], Any]
    check_tensors: Callable[[Any, dict, str], None]
    layer_names: Mapping[str, str]
    global_names: Mapping[str, str]
    build: Callable[[Any, dict[str, str]], Any]
    convert_weight: Callable[[str, str, np.ndarray, Any], np.ndarray] = weight_as_is
    end_of_turn_tokens: tuple[str, ...] = field(default=())


_ARCHITECTURES: dict[str, Architecture] = {}


def register_architecture(entry: Architecture, replace: bool = False) -> Architecture:
    """Add ``entry`` under its name; an entry of that name already there is a ValueError unless ``replace``."""
    if not isinstance(entry, Architecture):
        raise TypeError(f"register_architecture takes an Architecture, not {type(entry).__name__}")
    if entry.name in _ARCHITECTURES and not replace:
        raise ValueError(f"an architecture named {entry.name!r} is registered already")
    _ARCHITECTURES[entry.name] = entry
    return entry


def unregister_architecture(name: str) -> None:
    """Remove the entry ``name`` (a test's own architecture, once the test is done)."""
    if name not in _ARCHITECTURES:
        raise ValueError(f"no architecture named {name!r} is registered")
    del _ARCHITECTURES[name]


def registered_architectures() -> tuple[str, ...]:
    """The registered architectures' names, in the order they were registered."""
    return tuple(_ARCHITECTURES)


def get_architecture(name: Any, path: str = "") -> Architecture:
    """The entry for ``general.architecture`` = ``name``; else one GGUFError (prefixed by the file
    name of ``path``, when given) that lists the registered architectures."""
    entry = _ARCHITECTURES.get(name) if isinstance(name, str) else None
    if entry is None:
        where = f"{os.path.basename(path)}: " if path else ""
        raise GGUFError(f"{where}general.architecture is {name!r}, an architecture Tessera does not support "
                        f"(supported: {', '.join(_ARCHITECTURES)})")
    return entry
