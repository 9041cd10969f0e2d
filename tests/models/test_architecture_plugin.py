"""An LLM architecture defined entirely in this file and plugged in through the registry alone
(``tessera.models.register_architecture``): adding an architecture touches no core file (issue 33).

The architecture, ``gelu-llama``, is a Llama whose MLP gates with GELU (tanh approximation) where
Llama's uses SiLU: transformers' LlamaForCausalLM with ``hidden_act="gelu_pytorch_tanh"``. Its entry
is the llama entry with another model class; the test writes a GGUF of transformers' random weights
as llama.cpp's converter would (q/k rows interleaved for its RoPE, ``gelu-llama.*`` keys), compiles
it with ``compile_model`` and runs it: prefill and decode logits equal transformers' on the same
weights on the Python VM and on runtime-native, and runtime-js's WASM VM in Node continues a prompt
with transformers' greedy tokens.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess

import gguf
import numpy as np
import pytest
import torch
import transformers
from tessera import op
from tessera.app.chat import ChatSession
from tessera.app.compile import compile_model
from tessera.frontend import GGUFError, load_gguf, load_tokenizer
from tessera.models import get_architecture, register_architecture, registered_architectures, unregister_architecture
from tessera.models.llama import LlamaForCausalLM, LlamaMLP

ARCH = "gelu-llama"
HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 64, 128, 2, 4, 2
HEAD_DIM = HIDDEN // HEADS
CONTEXT = 32
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IDS = [5, 17, 3, 880, 2047, 2, 600, 1999, 1024]


class GeluMLP(LlamaMLP):
    def forward(self, x):
        return self.down_proj(op.multiply(op.nn.gelu_tanh(self.gate_proj(x)), self.up_proj(x)))


class GeluLlama(LlamaForCausalLM):
    """LlamaForCausalLM with each layer's MLP gated by GELU."""

    def __init__(self, config, formats=None):
        super().__init__(config, formats)
        for index, layer in enumerate(self.model.layers):
            layer.mlp = GeluMLP(config, formats, f"model.layers.{index}.mlp.")


@pytest.fixture(scope="module")
def gelu_llama():
    entry = register_architecture(dataclasses.replace(get_architecture("llama"), name=ARCH, build=GeluLlama))
    yield entry
    unregister_architecture(ARCH)


def reference_model(vocab_size: int):
    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, rope_theta=10000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False, max_position_embeddings=512, hidden_act="gelu_pytorch_tanh")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    model.eval()
    with torch.no_grad():  # logits far apart (a random init's are all near 0): no near tie in a greedy step
        model.model.norm.weight.fill_(40.0)
    return model


def llama_cpp_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's q/k row order: the two halves of each head interleaved."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, -1).swapaxes(1, 2).reshape(weight.shape)


GGUF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
              "post_attention_layernorm": "ffn_norm"}


def write_gguf(path: str, model, tokenizer_source: str) -> str:
    spec = load_tokenizer(tokenizer_source)
    writer = gguf.GGUFWriter(path, ARCH)
    writer.add_block_count(LAYERS)
    writer.add_context_length(512)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model(spec.model)
    writer.add_tokenizer_pre(spec.pre)
    writer.add_token_list(spec.tokens)
    writer.add_token_types(spec.token_types)
    writer.add_token_merges(spec.merges)
    writer.add_bos_token_id(spec.bos_token_id)
    writer.add_eos_token_id(spec.eos_token_id)
    writer.add_chat_template(spec.chat_template)
    for name, value in model.state_dict().items():
        value = value.detach().numpy().astype(np.float32)
        if name == "model.embed_tokens.weight":
            writer.add_tensor("token_embd.weight", value)
        elif name == "model.norm.weight":
            writer.add_tensor("output_norm.weight", value)
        elif name == "lm_head.weight":
            writer.add_tensor("output.weight", value)
        else:
            layer, module = name.removeprefix("model.layers.").removesuffix(".weight").split(".", 1)
            if module == "self_attn.q_proj":
                value = llama_cpp_rows(value, HEADS)
            elif module == "self_attn.k_proj":
                value = llama_cpp_rows(value, KV_HEADS)
            writer.add_tensor(f"blk.{layer}.{GGUF_NAMES[module]}.weight", value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def gguf_file(gelu_llama, tiny_gguf, tmp_path_factory):
    reference = reference_model(len(load_tokenizer(tiny_gguf).tokens))
    return write_gguf(str(tmp_path_factory.mktemp("gelu-llama") / "gelu-llama.gguf"), reference, tiny_gguf), reference


def compiled_for(gguf_file, target: str) -> str:
    path, _ = gguf_file
    return compile_model(path, os.path.join(os.path.dirname(path), target), target, CONTEXT).directory


@pytest.fixture(scope="module")
def compiled(gguf_file):
    path, reference = gguf_file
    return path, reference, compiled_for(gguf_file, "llvmpipe")


def program_of(directory: str) -> dict:
    with open(os.path.join(directory, "chat-config.json"), encoding="utf-8") as f:
        return json.load(f)["program"]


def transformers_greedy(model, ids: list[int], steps: int) -> list[int]:
    """``steps`` greedy tokens after ``ids``, each chosen by a margin no float32 summation order can flip."""
    ids, tokens = list(ids), []
    for _ in range(steps):
        logits = reference_logits(model, ids)
        first, second = np.sort(logits)[::-1][:2]
        assert first - second > 1e-2, f"a near tie: {first} and {second}"
        tokens.append(int(logits.argmax()))
        ids.append(tokens[-1])
    return tokens


def reference_logits(model, ids) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([list(ids)], dtype=torch.int64)).logits[0, -1].numpy()


def test_the_registered_architecture_reads_its_own_keys_and_lists_itself(compiled):
    path, _, _ = compiled
    model = load_gguf(path)
    assert model.architecture == ARCH and model.config.architecture == ARCH
    assert (model.config.num_layers, model.config.num_kv_heads, model.config.context_length) == (LAYERS, KV_HEADS, 512)
    assert registered_architectures() == ("llama", "qwen2", "mistral", ARCH)


def test_the_compiled_architecture_gives_transformers_logits_on_the_python_vm(compiled):
    _, reference, directory = compiled
    session = ChatSession(directory)
    vm = session.vm
    ids = list(IDS)
    for n in (1, 9):
        vm.reset_state()
        got = vm[session.prefill_function](np.asarray(ids[:n], np.int32), n)
        np.testing.assert_allclose(got[0], reference_logits(reference, ids[:n]), rtol=1e-3, atol=1e-3)
    for total in (10, 11):  # decode steps after the prefill of 9, reading the KV cache
        ids.append(int(got[0].argmax()))
        got = vm[session.decode_function](np.asarray(ids[-1:], np.int32), total)
        np.testing.assert_allclose(got[0], reference_logits(reference, ids), rtol=1e-3, atol=1e-3)
    program = program_of(directory)
    assert program["functions"] == {"prefill": "prefill", "decode": "decode", "sample": "sample",
                                    "sample_greedy": "sample_greedy"}
    assert program["state"] == [f"cache_{kind}_{layer}" for layer in range(LAYERS) for kind in "kv"]


def test_an_architecture_is_registered_once_and_unknown_ones_are_listed(gelu_llama, tmp_path):
    with pytest.raises(ValueError, match="an architecture named 'gelu-llama' is registered already"):
        register_architecture(gelu_llama)
    with pytest.raises(GGUFError, match=r"^phi2\.gguf: general\.architecture is 'phi2', an architecture Tessera does "
                                        r"not support \(supported: llama, qwen2, mistral, gelu-llama\)$"):
        get_architecture("phi2", str(tmp_path / "phi2.gguf"))


def test_runtime_native_gives_transformers_logits(gguf_file):
    from tessera.native import NativeModel

    directory = compiled_for(gguf_file, "cpu")
    functions = program_of(directory)["functions"]
    model = NativeModel(directory, n_threads=1)
    reference = gguf_file[1]
    ids = list(IDS)
    got = model.call(functions["prefill"], np.asarray(ids, np.int32), len(ids))[0]
    np.testing.assert_allclose(got[0], reference_logits(reference, ids), rtol=1e-3, atol=1e-3)
    ids.append(int(got[0].argmax()))
    got = model.call(functions["decode"], np.asarray(ids[-1:], np.int32), len(ids))[0]
    np.testing.assert_allclose(got[0], reference_logits(reference, ids), rtol=1e-3, atol=1e-3)


def test_runtime_js_continues_a_prompt_with_transformers_greedy_tokens_in_node(gguf_file, tmp_path):
    directory = compiled_for(gguf_file, "wasm")
    ids_json = tmp_path / "ids.json"
    ids_json.write_text(json.dumps(IDS))
    node = subprocess.run(["node", os.path.join(ROOT, "tests", "js", "greedy-ids.mjs"), directory, str(ids_json), "6"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert node.returncode == 0, node.stderr
    assert json.loads(node.stdout)["tokens"] == transformers_greedy(gguf_file[1], IDS, 6)
