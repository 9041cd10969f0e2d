"""Tessera: compile ML models, LLMs first, for WebGPU, WebAssembly and native GPUs."""

from .driver import build
from .inference import InferenceSession

__version__ = "0.1.0"
