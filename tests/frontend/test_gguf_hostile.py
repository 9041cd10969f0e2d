"""A GGUF file may say anything (issue 17): its hyperparameters are checked against bounds, against each
other and against its own tensors before any model is built or anything is allocated, each error naming
the key; its header's counts, dimensions and offsets are checked against the file; a file without a
tokenizer is refused before `tessera compile` writes anything. Files are written byte by byte here, so
that any field can hold any value."""

import os
import struct
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from tessera.frontend import GGUFError, load_gguf
from tessera.models import model_from_gguf

UINT32, INT32, FLOAT32, STRING, ARRAY, UINT64 = 4, 5, 6, 8, 9, 10
F32 = 0
HIDDEN, HEADS, KV_HEADS, FFN, LAYERS, VOCAB = 8, 2, 1, 16, 2, 6
TOKENS = ["a", "b", "ab", "<s>", "</s>", "<|im_end|>"]


def value_bytes(kind: int, value) -> bytes:
    if kind == STRING:
        data = value.encode()
        return struct.pack("<Q", len(data)) + data
    if kind == ARRAY:
        item_kind, items = value
        return struct.pack("<IQ", item_kind, len(items)) + b"".join(value_bytes(item_kind, v) for v in items)
    return struct.pack({UINT32: "<I", INT32: "<i", FLOAT32: "<f", UINT64: "<Q"}[kind], value)


def write_gguf(path, kvs: dict, tensors: list, alignment: int = 32, tensor_count=None, offsets=None) -> str:
    """A GGUF v3 file: ``kvs`` {key: (type, value)}; ``tensors`` [(name, array)] as F32 (``offsets`` overrides
    where each says its data is; ``tensor_count`` what the header says)."""
    header = struct.pack("<IIQQ", 0x46554747, 3, len(tensors) if tensor_count is None else tensor_count, len(kvs))
    body = b"".join(value_bytes(STRING, key) + struct.pack("<I", kind) + value_bytes(kind, value)
                    for key, (kind, value) in kvs.items())
    data, infos, at = b"", b"", 0
    for index, (name, array) in enumerate(tensors):
        blob = np.ascontiguousarray(array, np.float32).tobytes()
        offset = offsets[index] if offsets is not None else at
        dims = tuple(reversed(array.shape))
        infos += value_bytes(STRING, name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, F32, offset)
        data += blob + bytes(-len(blob) % alignment)
        at += len(blob) + (-len(blob) % alignment)
    text = header + body + infos
    with open(path, "wb") as f:
        f.write(text + bytes(-len(text) % alignment) + data)
    return str(path)


def model_kvs(**changes) -> dict:
    kvs = {"general.architecture": (STRING, "llama"), "llama.block_count": (UINT32, LAYERS),
           "llama.context_length": (UINT32, 64), "llama.embedding_length": (UINT32, HIDDEN),
           "llama.feed_forward_length": (UINT32, FFN), "llama.attention.head_count": (UINT32, HEADS),
           "llama.attention.head_count_kv": (UINT32, KV_HEADS), "llama.rope.freq_base": (FLOAT32, 10000.0),
           "llama.attention.layer_norm_rms_epsilon": (FLOAT32, 1e-5),
           "tokenizer.ggml.model": (STRING, "gpt2"), "tokenizer.ggml.pre": (STRING, "qwen2"),
           "tokenizer.ggml.tokens": (ARRAY, (STRING, TOKENS)), "tokenizer.ggml.token_type": (ARRAY, (INT32, [1] * 6)),
           "tokenizer.ggml.merges": (ARRAY, (STRING, ["a b"])), "tokenizer.ggml.bos_token_id": (UINT32, 3),
           "tokenizer.ggml.eos_token_id": (UINT32, 5)}
    for key, value in changes.items():
        key = key.replace("__", ".")
        if value is None:
            kvs.pop(key, None)
        else:
            kvs[key] = value
    return kvs


def model_tensors(layers: int = LAYERS, hidden: int = HIDDEN, skip: tuple = ()) -> list:
    rng = np.random.default_rng(0)
    head_dim = hidden // HEADS
    shapes = {"token_embd.weight": (VOCAB, hidden), "output_norm.weight": (hidden,)}
    for i in range(layers):
        shapes.update({f"blk.{i}.attn_norm.weight": (hidden,), f"blk.{i}.ffn_norm.weight": (hidden,),
                       f"blk.{i}.attn_q.weight": (HEADS * head_dim, hidden),
                       f"blk.{i}.attn_k.weight": (KV_HEADS * head_dim, hidden),
                       f"blk.{i}.attn_v.weight": (KV_HEADS * head_dim, hidden),
                       f"blk.{i}.attn_output.weight": (hidden, HEADS * head_dim),
                       f"blk.{i}.ffn_gate.weight": (FFN, hidden), f"blk.{i}.ffn_up.weight": (FFN, hidden),
                       f"blk.{i}.ffn_down.weight": (hidden, FFN)})
    return [(name, rng.standard_normal(shape).astype(np.float32)) for name, shape in shapes.items() if name not in skip]


def test_the_hand_written_model_loads_and_builds(tmp_path):
    model = load_gguf(write_gguf(tmp_path / "ok.gguf", model_kvs(), model_tensors()))
    assert (model.config.num_layers, model.config.hidden_size, model.config.head_dim) == (LAYERS, HIDDEN, 4)
    model_from_gguf(model)


# A guard against a hang (a loop over 2**31 layers, say), not a time the check must keep: each takes
# milliseconds, and what it must not do is allocate, which the test measures.
@pytest.mark.timeout(120)
@pytest.mark.parametrize("changes, message", [
    ({"llama.block_count": (UINT32, 2 ** 31)}, r"llama\.block_count is 2147483648, outside 1 \.\. 1024"),
    ({"llama.embedding_length": (UINT32, 2 ** 31)}, r"llama\.embedding_length is 2147483648, outside 1 \.\. 65536"),
    ({"llama.attention.head_count": (UINT32, 0)}, r"llama\.attention\.head_count is 0, outside 1 \.\. 1024"),
    ({"llama.attention.head_count_kv": (UINT32, 0)}, r"llama\.attention\.head_count_kv is 0, outside"),
    ({"llama.feed_forward_length": (UINT32, 2 ** 31)}, r"llama\.feed_forward_length is 2147483648, outside"),
    ({"llama.context_length": (UINT64, 2 ** 40)}, r"llama\.context_length is 1099511627776, outside"),
    ({"llama.vocab_size": (UINT32, 2 ** 31)}, r"llama\.vocab_size is 2147483648, outside"),
    ({"llama.attention.key_length": (UINT32, 100000)}, r"llama\.attention\.key_length is 100000, outside"),
    ({"llama.attention.head_count_kv": (UINT32, 3)}, r"head_count \(2\) is not a multiple of llama\.attention"
                                                     r"\.head_count_kv \(3\)"),
    ({"llama.embedding_length": (UINT32, 9)}, r"embedding_length \(9\) is not a multiple of llama\.attention\."
                                              r"head_count \(2\)"),
    ({"llama.attention.key_length": (UINT32, 3)}, "rotary embeddings need an even one"),
    ({"llama.block_count": (STRING, "2")}, r"llama\.block_count is '2', not an integer"),
    ({"llama.block_count": (FLOAT32, 2.0)}, r"llama\.block_count is 2\.0, not an integer"),
    ({"llama.attention.head_count": (ARRAY, (UINT32, [2, 2]))}, r"head_count is an array \(a value per layer\)"),
    ({"llama.embedding_length": None}, r"metadata llama\.embedding_length is missing"),
    ({"llama.rope.freq_base": (FLOAT32, float("nan"))}, r"llama\.rope\.freq_base is nan, not a finite number"),
    ({"llama.rope.freq_base": (FLOAT32, -1.0)}, r"llama\.rope\.freq_base is -1\.0, outside"),
    ({"llama.attention.layer_norm_rms_epsilon": (FLOAT32, 0.0)}, r"layer_norm_rms_epsilon is 0\.0, outside"),
    ({"llama.vocab_size": (UINT32, 4)}, r"tokenizer\.ggml\.tokens has 6 tokens, more than the model's vocabulary"),
    ({"llama.attention.head_count": (UINT32, 4)},
     r"tensor blk\.0\.attn_k\.weight has shape \(4, 8\), but the hyperparameters \(llama\.embedding_length, "
     r"llama\.attention\.head_count, llama\.attention\.head_count_kv, llama\.attention\.key_length\) give it \(2, 8\)"),
    ({"llama.block_count": (UINT32, 1)}, r"tensor blk\.1\.\w+\.weight belongs to layer 1, but llama\.block_count is 1"),
    ({"tokenizer.ggml.bos_token_id": (UINT32, 99)}, r"tokenizer\.ggml\.bos_token_id is 99, not one of the 6 token ids"),
    ({"tokenizer.ggml.tokens": (ARRAY, (UINT32, [1, 2, 3]))}, r"tokenizer\.ggml\.tokens is not an array of strs"),
    ({"tokenizer.ggml.token_type": (ARRAY, (INT32, [1]))}, r"tokenizer\.ggml\.token_type has 1 entries for 6 tokens"),
])
def test_each_bad_hyperparameter_is_an_error_naming_its_key_before_anything_is_built(tmp_path, changes, message):
    path = write_gguf(tmp_path / "bad.gguf", model_kvs(**{k.replace(".", "__"): v for k, v in changes.items()}),
                      model_tensors())
    tracemalloc.start()
    try:
        with pytest.raises(GGUFError, match=message):
            load_gguf(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak


def test_a_layer_the_file_lacks_is_named_before_the_model_is_built(tmp_path):
    model = load_gguf(write_gguf(tmp_path / "short.gguf", model_kvs(llama__block_count=(UINT32, 3)),
                                 model_tensors()))
    with pytest.raises(GGUFError, match=r"the file has no tensor blk\.2\.attn_norm\.weight, which a model of "
                                        r"llama\.block_count = 3 layers needs"):
        model_from_gguf(model)
    model = load_gguf(write_gguf(tmp_path / "holed.gguf", model_kvs(), model_tensors(skip=("blk.1.ffn_up.weight",))))
    with pytest.raises(GGUFError, match=r"no tensor blk\.1\.ffn_up\.weight"):
        model_from_gguf(model)


@pytest.mark.parametrize("how, message", [
    ("misaligned", r"starts at offset 4, not a multiple of the alignment 32"),
    ("overlapping", r"tensors .* overlap"),
    ("past the end", r"ends past the end of the file"),
    ("a count the file cannot hold", r"cannot fit in"),
])
def test_the_header_is_checked_against_the_file(tmp_path, how, message):
    tensors = model_tensors()[:3]
    sizes = [-(-t.nbytes // 32) * 32 for _, t in tensors]
    offsets = [0, sizes[0], sizes[0] + sizes[1]]
    kwargs = {"misaligned": {"offsets": [0, 4, offsets[2]]},
              "overlapping": {"offsets": [0, 0, offsets[2]]},
              "past the end": {"offsets": [0, offsets[1], 1 << 40]},
              "a count the file cannot hold": {"tensor_count": 2 ** 60}}[how]
    path = write_gguf(tmp_path / "bad.gguf", model_kvs(), tensors, **kwargs)
    with pytest.raises(GGUFError, match=f"truncated or corrupted .*{message}"):
        load_gguf(path)


def test_a_gguf_without_a_tokenizer_is_refused_before_anything_is_written(tmp_path):
    kvs = {k: v for k, v in model_kvs().items() if not k.startswith("tokenizer.")}
    path = write_gguf(tmp_path / "no-tokenizer.gguf", kvs, model_tensors())
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "tessera.cli", "compile", path, "-o", str(out), "--context", "16"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == ("error: no-tokenizer.gguf has no tokenizer (tokenizer.ggml.tokens): a chat "
                                              "model needs one")
    assert not os.path.exists(out)
