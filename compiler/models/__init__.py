"""Model definitions in tessera.nn: the Llama family, and a MobileNet-style CNN."""

from .llama import LlamaConfig, LlamaForCausalLM
from .mobilenet import MobileNet, MobileNetConfig, export_mobilenet, fold_batch_norm, random_checkpoint

__all__ = ["LlamaConfig", "LlamaForCausalLM", "MobileNet", "MobileNetConfig", "export_mobilenet", "fold_batch_norm",
           "random_checkpoint"]
