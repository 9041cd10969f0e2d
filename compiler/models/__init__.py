"""Model definitions in tessera.nn: the LLM architectures by GGUF name (registry: the Llama family
built in), the LLM program contract they export to (llm_program), and a MobileNet-style CNN."""

from . import architectures  # noqa: F401  (registers the built-in architectures)
from .from_gguf import model_from_gguf
from .llama import LlamaConfig, LlamaForCausalLM
from .llm_program import Placement, export_llm, export_paged_llm, program_section, read_program
from .mobilenet import MobileNet, MobileNetConfig, export_mobilenet, fold_batch_norm, random_checkpoint
from .registry import (
    Architecture,
    get_architecture,
    register_architecture,
    registered_architectures,
    unregister_architecture,
)

__all__ = ["Architecture", "LlamaConfig", "LlamaForCausalLM", "MobileNet", "MobileNetConfig", "Placement",
           "export_llm", "export_mobilenet", "export_paged_llm", "fold_batch_norm", "get_architecture",
           "model_from_gguf", "program_section", "random_checkpoint", "read_program", "register_architecture",
           "registered_architectures", "unregister_architecture"]
