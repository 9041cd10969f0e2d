"""The GGUF frontend on the bundled SmolLM2 and on small files made with ggml's own writer."""

import gguf
import numpy as np
import pytest
from fixtures.quantized_blocks import GGML_TYPES, block_values, quantized_blocks
from tessera.frontend import GGUFError, QuantizedWeight, bundled_smollm2_path, load_gguf
from tessera.frontend.gguf_file import GGUFContents, GGUFTensor, read_gguf_file
from tessera.frontend.gguf_reader import _tensor
from tessera.op.quantized import dequantize


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
    elif tensor_type == gguf.GGMLQuantizationType.IQ4_NL:  # a type Tessera does not read: any bytes
        writer.add_tensor("token_embd.weight", np.zeros((64, 36), np.uint8), raw_dtype=tensor_type)
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
    with pytest.raises(GGUFError, match=r"^gpt2.gguf: general.architecture is 'gpt2', an architecture Tessera does not "
                       r"support \(supported: llama, qwen2, mistral\)$"):
        load_gguf(str(write_gguf(tmp_path / "gpt2.gguf", arch="gpt2")))
    with pytest.raises(GGUFError, match=r"iq4nl.gguf: tensor token_embd.weight is IQ4_NL, a quantization type "
                       r"Tessera does not support yet \(supported: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, "
                       r"Q3_K, Q4_K, Q5_K, Q6_K\)"):
        load_gguf(str(write_gguf(tmp_path / "iq4nl.gguf", tensor_type=gguf.GGMLQuantizationType.IQ4_NL)))


def test_every_block_format_loads_as_words_the_kernels_read(tmp_path):
    """A tensor of each format, K-quants included: its rows as uint32 words, padded to a whole word
    where its blocks end inside one (3 Q3_K or Q6_K blocks, 9 Q4_0, Q5_0 or Q8_0 blocks), which
    the op's reference dequantizes as ggml does."""
    writer = gguf.GGUFWriter(str(tmp_path / "formats.gguf"), "llama")
    expected = {}
    for index, fmt in enumerate(GGML_TYPES):
        k = (3 if block_values(fmt) == 256 else 9) * block_values(fmt)
        blocks, dense = quantized_blocks(fmt, 5, k, seed=index)
        writer.add_tensor(fmt, blocks, raw_dtype=GGML_TYPES[fmt])
        expected[fmt] = (k, blocks, dense)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    for tensor in read_gguf_file(str(tmp_path / "formats.gguf"), gguf).tensors:
        k, blocks, dense = expected[tensor.name]
        weight = _tensor(tensor, gguf, "formats.gguf")  # the file holds no model: one tensor at a time
        assert isinstance(weight, QuantizedWeight)
        assert (weight.format, weight.shape, weight.words.dtype) == (tensor.name, (5, k), np.dtype("<u4"))
        assert weight.words.shape[1] == -(-blocks.shape[1] // 4)
        assert np.array_equal(weight.words.view(np.uint8)[:, :blocks.shape[1]], blocks)
        np.testing.assert_array_equal(dequantize(weight.words, weight.format, k), dense)


def test_a_vocabulary_only_file_sizes_its_vocabulary_from_its_tokens(tmp_path):
    """llama.cpp's ggml-vocab-*.gguf files: hyperparameters and a tokenizer, no tensors."""
    path = str(tmp_path / "vocab-only.gguf")
    writer = gguf.GGUFWriter(path, "qwen2")
    writer.add_block_count(1)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(["a", "b", "ab", "<|im_end|>"])
    writer.add_token_types([1, 1, 1, 3])
    writer.add_token_merges(["a b"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model = load_gguf(path)
    assert model.config.vocab_size == 4 and model.tensors == {} and model.tokenizer.pre == "qwen2"


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


def test_header_parser_reads_what_ggufs_reader_reads(tmp_path):
    """gguf_file parses the header itself (GGUFReader took 2.5 s on SmolLM2's vocabulary): every
    value type, arrays included, and every tensor view equal GGUFReader's, on SmolLM2 too."""
    writer = gguf.GGUFWriter(str(tmp_path / "all.gguf"), "llama")
    writer.add_bool("t.bool", True)
    writer.add_int8("t.i8", -3)
    writer.add_uint16("t.u16", 65535)
    writer.add_int32("t.i32", -7)
    writer.add_uint64("t.u64", 2 ** 40)
    writer.add_float32("t.f32", 0.1)
    writer.add_float64("t.f64", 0.1)
    writer.add_string("t.str", "héllo")
    writer.add_array("t.ints", [1, 2, 3])
    writer.add_array("t.floats", [1.5, 0.1])
    writer.add_array("t.bools", [True, False])
    writer.add_array("t.strs", ["a", "ü", ""])
    writer.add_array("t.empty", [])
    writer.add_tensor("f32", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.add_tensor("f16", np.arange(6, dtype=np.float16).reshape(2, 3))
    q8 = gguf.quants.quantize(np.ones((4, 64), np.float32), gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("q8", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    for path in (str(tmp_path / "all.gguf"), bundled_smollm2_path()):
        ours, theirs = read_gguf_file(path, gguf), ggufs_reader_contents(path)
        assert list(ours.metadata) == list(theirs.metadata)
        for key, value in theirs.metadata.items():
            assert ours.metadata[key] == value and repr(ours.metadata[key]) == repr(value), key
        assert [(t.name, t.tensor_type, t.data.dtype, t.data.shape) for t in ours.tensors] == \
            [(t.name, t.tensor_type, t.data.dtype, t.data.shape) for t in theirs.tensors]
        for a, b in zip(ours.tensors, theirs.tensors):
            assert np.array_equal(a.data.view(np.uint8), b.data.view(np.uint8)), a.name


def ggufs_reader_contents(path: str) -> GGUFContents:
    """The file as the gguf package's GGUFReader reads it, in read_gguf_file's terms."""
    reader = gguf.GGUFReader(path)
    metadata = {name: _field_value(f) for name, f in reader.fields.items()}
    return GGUFContents(metadata, [GGUFTensor(t.name, t.tensor_type, t.data) for t in reader.tensors])


def _field_value(field):
    types = field.types
    if not types:
        return None
    if types[0] == gguf.GGUFValueType.ARRAY:
        if types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    value = field.parts[field.data[0]]
    if types[0] == gguf.GGUFValueType.STRING:
        return bytes(value).decode("utf-8", errors="replace")
    item = value.tolist()[0]
    return bool(item) if types[0] == gguf.GGUFValueType.BOOL else item


def _written(path, endianess=None, **arrays) -> str:
    writer = gguf.GGUFWriter(str(path), "llama", **({"endianess": endianess} if endianess else {}))
    for key, value in arrays.items():
        writer.add_array(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def test_a_big_endian_file_is_refused_by_name(tmp_path):
    """Kernels read quantized blocks as little-endian bytes: a big-endian file would compute garbage."""
    path = _written(tmp_path / "big.gguf", gguf.GGUFEndian.BIG)
    with pytest.raises(GGUFError, match="big-endian GGUF file"):
        load_gguf(path)


def test_other_versions_are_refused_by_number(tmp_path):
    path = _written(tmp_path / "v9.gguf")
    data = bytearray(open(path, "rb").read())
    data[4:8] = (9).to_bytes(4, "little")
    open(path, "wb").write(bytes(data))
    with pytest.raises(GGUFError, match="GGUF version 9, which Tessera does not read"):
        load_gguf(path)


def test_nested_arrays_are_read_and_bounded(tmp_path):
    path = _written(tmp_path / "nested.gguf", **{"t.nested": [[1, 2], [3]]})
    assert read_gguf_file(path, gguf).metadata["t.nested"] == [[1, 2], [3]]
    data = bytearray(open(path, "rb").read())
    at = data.index(b"t.nested") + len(b"t.nested") + 4 + 4  # the value type, then the item type: the count
    data[at:at + 8] = (2 ** 60).to_bytes(8, "little")
    open(path, "wb").write(bytes(data))
    with pytest.raises(GGUFError, match="an array of 1152921504606846976 arrays cannot fit"):
        load_gguf(path)
