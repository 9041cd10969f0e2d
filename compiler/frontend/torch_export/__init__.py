"""The torch.export importer: ``from_exported_program(ep, dims=None) -> IRModule`` (docs/torch.md)."""

from .errors import TorchImportError
from .importer import from_exported_program
from .registry import supported_ops

__all__ = ["TorchImportError", "from_exported_program", "supported_ops"]
