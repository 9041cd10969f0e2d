"""The built-in architectures, one module per family; importing this package registers them
(tessera.models.registry). Adding one: a module here, imported below, and its test (docs/models.md)."""

from . import llama  # noqa: F401  (registers llama, qwen2 and mistral)
