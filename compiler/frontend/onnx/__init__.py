"""The ONNX importer: ``from_onnx(model, shapes=None, dims=None) -> IRModule`` (docs/onnx.md)."""

from .errors import OnnxImportError
from .importer import from_onnx
from .registry import supported_ops

__all__ = ["OnnxImportError", "from_onnx", "supported_ops"]
