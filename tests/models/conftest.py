import os

import pytest
import tessera
from tessera import nn
from tessera.frontend import bundled_smollm2_path, load_gguf
from tessera.models import export_llm, model_from_gguf
from tessera.vm import VirtualMachine


@pytest.fixture(scope="session")
def reference():
    """transformers on PyTorch's CPU build, loading the same GGUF file (dequantized to float32)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = bundled_smollm2_path()
    folder, name = os.path.dirname(path), os.path.basename(path)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.eval()
    return tokenizer, model, torch


@pytest.fixture(scope="session")
def smollm2_chat_vm():
    """SmolLM2 compiled with a 256-position KV cache: prefill and decode."""
    model, weights = model_from_gguf(load_gguf(bundled_smollm2_path()))
    return VirtualMachine(tessera.build(nn.bind_weights(export_llm(model, 256), weights), "llvmpipe"))
