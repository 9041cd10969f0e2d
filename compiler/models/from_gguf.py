"""A GGUF model file as the model its architecture builds and its weights, keeping quantized blocks
as they are. The architecture's registry entry (tessera.models.registry) says which tensors the model
needs, where each goes, and how a weight is converted from the file's layout."""

from __future__ import annotations

import os

import numpy as np

from ..frontend.gguf_reader import GGUFModel, QuantizedWeight
from .registry import Architecture, get_architecture


def model_from_gguf(model: GGUFModel):
    """(the model, its weights by module path); a GGUFError naming the first tensor the model needs
    that the file lacks (load_gguf checked the shapes of those it has)."""
    entry = get_architecture(model.architecture, model.path)
    config = model.config
    entry.check_tensors(config, model.tensors, os.path.basename(model.path))
    weights: dict[str, np.ndarray] = {}
    formats: dict[str, str] = {}
    for name, tensor in model.tensors.items():
        path = module_path(entry, name)
        if path is None:
            continue
        module, leaf = path
        value = tensor.words if isinstance(tensor, QuantizedWeight) else np.asarray(tensor, np.float32)
        value = entry.convert_weight(module, leaf, value, config)
        if isinstance(tensor, QuantizedWeight):
            formats[module] = tensor.format
        weights[f"{module}.{leaf}"] = np.ascontiguousarray(value)
    return entry.build(config, formats), weights


def module_path(entry: Architecture, name: str) -> tuple[str, str] | None:
    """(module path, leaf) of the GGUF tensor ``name`` in ``entry``'s models; None: not read."""
    parts = name.split(".")
    leaf = parts[-1]
    if parts[0] == "blk" and len(parts) > 3:
        mapped = entry.layer_names.get(parts[2])
        return (f"model.layers.{parts[1]}.{mapped}", leaf) if mapped else None
    mapped = entry.global_names.get(parts[0])
    return (mapped, leaf) if mapped else None
