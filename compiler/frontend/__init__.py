"""Model frontends: GGUF files (llama.cpp's format) first."""

from .gguf_reader import (
    GGUFError,
    GGUFModel,
    QuantizedWeight,
    bundled_smollm2_path,
    check_gguf_file,
    load_gguf,
    load_tokenizer,
)
from .onnx import OnnxImportError, from_onnx
from .torch_export import TorchImportError, from_exported_program

__all__ = ["GGUFError", "GGUFModel", "QuantizedWeight", "bundled_smollm2_path",
           "check_gguf_file", "load_gguf", "load_tokenizer", "OnnxImportError", "from_onnx",
           "TorchImportError", "from_exported_program"]
