"""Write the fuzzers' seed corpora (corpus/<target>/): a tiny Llama GGUF with a byte-level vocabulary
and the files of its compiled folder, a vocabulary-only GGUF, and real chat templates.

    .venv/bin/python tests/fuzz/make_seeds.py      # rewrites corpus/; commit what changed

The seeds are small on purpose (the fuzzer mutates them byte by byte): one layer of hidden size 32,
a vocabulary of the 256 byte tokens, two merges and ChatML's two markers, Q8_0 and F32 tensors.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import gguf
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CORPORA = os.path.join(HERE, "corpus")
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")
HIDDEN, FFN, HEADS, KV_HEADS = 32, 64, 2, 1


def byte_tokens() -> list[str]:
    """GPT-2's printable spelling of the 256 bytes (what byte-level BPE vocabularies list)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    spelled, extra = {}, 0
    for b in range(256):
        if b in printable:
            spelled[b] = chr(b)
        else:
            spelled[b] = chr(256 + extra)
            extra += 1
    return [spelled[b] for b in range(256)]


def write_vocabulary(writer: gguf.GGUFWriter) -> int:
    tokens = byte_tokens() + ["Ġt", "he", "<|im_start|>", "<|im_end|>"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * 258 + [3, 3])
    writer.add_token_merges(["Ġ t", "h e"])
    writer.add_bos_token_id(258)
    writer.add_eos_token_id(259)
    writer.add_chat_template(CHATML)
    return len(tokens)


def write_tiny_llama(path: str) -> None:
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    vocab = write_vocabulary(writer)
    writer.add_vocab_size(vocab)

    def q8(name, rows, cols):
        w = rng.standard_normal((rows, cols)).astype(np.float32) * cols ** -0.5
        writer.add_tensor(name, gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0),
                          raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    head = HIDDEN // HEADS
    q8("token_embd.weight", vocab, HIDDEN)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(HIDDEN, np.float32))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(HIDDEN, np.float32))
    q8("blk.0.attn_q.weight", HIDDEN, HIDDEN)
    q8("blk.0.attn_k.weight", KV_HEADS * head, HIDDEN)
    q8("blk.0.attn_v.weight", KV_HEADS * head, HIDDEN)
    q8("blk.0.attn_output.weight", HIDDEN, HIDDEN)
    q8("blk.0.ffn_gate.weight", FFN, HIDDEN)
    q8("blk.0.ffn_up.weight", FFN, HIDDEN)
    q8("blk.0.ffn_down.weight", HIDDEN, FFN)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_vocabulary_only(path: str) -> None:
    writer = gguf.GGUFWriter(path, "llama")
    write_vocabulary(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def templates() -> dict[str, str]:
    sys.path.insert(0, os.path.join(HERE, ".."))
    from fixtures.zoo_gguf import LLAMA2_TEMPLATE, QWEN2_TEMPLATE
    from tessera.frontend import bundled_smollm2_path, load_tokenizer

    return {"chatml": CHATML, "qwen2": QWEN2_TEMPLATE, "llama2": LLAMA2_TEMPLATE,
            "smollm2": load_tokenizer(bundled_smollm2_path()).chat_template}


def main() -> None:
    from tessera.app import compile_model

    shutil.rmtree(CORPORA, ignore_errors=True)
    folders = {name: os.path.join(CORPORA, name) for name in ("gguf", "executable", "tensor_cache", "chat_config",
                                                               "template")}
    for folder in folders.values():
        os.makedirs(folder)
    write_tiny_llama(os.path.join(folders["gguf"], "tiny-llama.gguf"))
    write_vocabulary_only(os.path.join(folders["gguf"], "vocabulary-only.gguf"))
    with tempfile.TemporaryDirectory() as scratch:
        compile_model(os.path.join(folders["gguf"], "tiny-llama.gguf"), scratch, "webgpu", context_length=32)
        for name, target in (("executable.json", "executable"), ("tensor-cache.json", "tensor_cache"),
                             ("chat-config.json", "chat_config")):
            shutil.copy(os.path.join(scratch, name), os.path.join(folders[target], name))
    for name, template in templates().items():
        with open(os.path.join(folders["template"], name), "wb") as f:
            f.write(template.encode() + b"\0Hello\x01Hi! How can I help?\x01What is 2 + 2?")


if __name__ == "__main__":
    main()
