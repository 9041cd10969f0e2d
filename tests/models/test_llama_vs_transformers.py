"""Tiny random Llama-family models against transformers with the same weights: every variant."""

import numpy as np
import pytest
import tessera
import torch
import transformers
from tessera import nn
from tessera.ir import Tensor, interpret
from tessera.models import LlamaForCausalLM
from tessera.vm import VirtualMachine
from tiny_llama import VARIANTS, tiny_config


def reference(name):
    heads, kv_heads, bias, tied = VARIANTS[name]
    kwargs = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, rope_theta=10000.0,
                  rms_norm_eps=1e-5, tie_word_embeddings=tied, max_position_embeddings=128)
    torch.manual_seed(0)
    if bias:
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**kwargs))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kwargs))
    model.eval()
    config = tiny_config(name)
    weights = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    return model, config, weights


def tessera_module(config, weights):
    model = LlamaForCausalLM(config)
    mod = nn.export(model, "prefill", {"input_ids": Tensor(("n",), "int32")},
                    attrs={"tir_var_upper_bound": {"n": 32}})
    return nn.bind_weights(mod, weights)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_logits_match_transformers(name):
    model, config, weights = reference(name)
    mod = tessera_module(config, weights)
    ids = np.array([5, 17, 3, 88, 41, 2, 60], np.int32)
    with torch.no_grad():
        want = model(torch.tensor(ids[None, :].astype(np.int64))).logits[0].numpy()
    np.testing.assert_allclose(interpret(mod, "prefill", ids), want, rtol=1e-4, atol=1e-4)
    vm = VirtualMachine(tessera.build(mod, "llvmpipe"))
    for n in (1, 7, 32):
        ids_n = np.arange(n, dtype=np.int32) * 7 % 96
        with torch.no_grad():
            want = model(torch.tensor(ids_n[None, :].astype(np.int64))).logits[0].numpy()
        np.testing.assert_allclose(vm["prefill"](ids_n), want, rtol=1e-3, atol=1e-3)
