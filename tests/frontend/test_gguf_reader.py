"""The GGUF frontend on the bundled SmolLM2 and on small files made with ggml's own writer."""

import gguf
import numpy as np
import pytest
from tessera.frontend import GGUFError, QuantizedWeight, bundled_smollm2_path, load_gguf


@pytest.fixture(scope="module")
def smollm2():
    return load_gguf(bundled_smollm2_path())


def test_smollm2_config_tokenizer_and_weights(smollm2):
    c = smollm2.config
    assert (c.architecture, c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim) == \
        ("llama", 30, 576, 9, 3, 64)
    assert (c.intermediate_size, c.vocab_size, c.rope_theta, c.tie_word_embeddings) == (1536, 49152, 100000.0, True)
    assert abs(c.rms_norm_eps - 1e-5) < 1e-9
    tok = smollm2.tokenizer
    assert tok.model == "gpt2" and len(tok.tokens) == 49152 and tok.tokens[tok.eos_token_id] == "<|im_end|>"
    assert "<|im_start|>" in tok.chat_template
    embedding = smollm2.tensors["token_embd.weight"]
    assert isinstance(embedding, QuantizedWeight) and embedding.format == "q8_0" and embedding.shape == (49152, 576)
    down = smollm2.tensors["blk.0.ffn_down.weight"]
    assert (down.format, down.shape, down.words.dtype) == ("q4_1", (576, 1536), np.dtype("<u4"))
    assert smollm2.tensors["blk.0.attn_norm.weight"].dtype == np.float32


def write_gguf(path, arch="llama", tensor_type=gguf.GGMLQuantizationType.F32):
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    weights = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    if tensor_type == gguf.GGMLQuantizationType.F32:
        writer.add_tensor("token_embd.weight", weights)
    else:
        blocks = gguf.quants.quantize(weights, tensor_type)
        writer.add_tensor("token_embd.weight", blocks, raw_dtype=tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_small_llama_file(tmp_path):
    model = load_gguf(str(write_gguf(tmp_path / "tiny.gguf")))
    assert model.config.hidden_size == 64 and model.config.head_dim == 16
    assert model.tensors["token_embd.weight"].shape == (64, 64)


def test_unsupported_architecture_and_quantization_are_named(tmp_path):
    with pytest.raises(GGUFError, match=r"architecture 'gpt2' is not supported \(supported: llama, qwen2, mistral\)"):
        load_gguf(str(write_gguf(tmp_path / "gpt2.gguf", arch="gpt2")))
    with pytest.raises(GGUFError, match="tensor token_embd.weight is Q5_0, a quantization type Tessera does not "
                       "support yet"):
        load_gguf(str(write_gguf(tmp_path / "q5.gguf", tensor_type=gguf.GGMLQuantizationType.Q5_0)))


def test_truncated_and_missing_files_are_clear_errors(tmp_path):
    truncated = tmp_path / "truncated.gguf"
    with open(bundled_smollm2_path(), "rb") as source, open(truncated, "wb") as target:
        target.write(source.read(1 << 20))
    with pytest.raises(GGUFError, match="cannot read GGUF file .*truncated.gguf: truncated or corrupted"):
        load_gguf(str(truncated))
    with pytest.raises(GGUFError, match="no GGUF file at"):
        load_gguf(str(tmp_path / "missing.gguf"))
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all")
    with pytest.raises(GGUFError, match="truncated or corrupted"):
        load_gguf(str(garbage))
