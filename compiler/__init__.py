"""Tessera: compile ML models, LLMs first, for WebGPU, WebAssembly and native GPUs."""

__version__ = "0.1.0"
