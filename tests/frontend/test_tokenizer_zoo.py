"""The tokenizers of the GGUF zoo's vocabularies (tests/fixtures/zoo_gguf.py), built from the GGUF
metadata as tokenizer.json: Qwen2's byte-level BPE with its pre-tokenizer and 151,936 tokens, and a
Llama 2-style SentencePiece vocabulary of 32,000 scored pieces with byte fallback.

References: transformers' tokenizer of the same file for Qwen2 (a 2,048-token file: transformers'
reader takes a minute over the full vocabulary); for SentencePiece, llama.cpp's algorithm (below, in
a few lines of Python: join the best-scored adjacent pair until none is a piece, then spell what is
left by its bytes), because transformers' GGUF loader deviates from llama.cpp and from Llama 2's own
tokenizer.json where text follows a special token or starts with a space (it gives "<s>[INST]" no
"▁"), and agrees elsewhere, which is checked too. tests/js/zoo.test.mjs checks that runtime-js gives
the ids this tokenizer gives."""

import os
import re

import pytest
from fixtures.zoo_gguf import write_llama_spm_gguf, write_qwen2_gguf
from tessera.frontend import load_gguf
from tessera.frontend.tokenizer import build_tokenizer

# Bytes fallback, whitespace of every kind, case in contractions, digits, code, specials as text.
TEXTS = [
    "Hello world", " Hello world", "  two leading spaces", "trailing space ", "tabs\tand\ttabs", "\n", " ", "",
    "line one\nline two\r\nline three\n\n\n", "   \t  \n  mixed   whitespace   ",
    "The capital of France is Paris.", "Héllo wörld! café naïve Zürich", "emoji 😀🦙 and ünicode — dashes",
    "中文 日本語 한국어", "It's DON'T we'll It'S I'M", "12345 3.14159 2026-11-24", "ﬁ ſ K Ω",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "<s>[INST] What? [/INST] Paris.</s>",
    "[PAD151700] and [PAD2000]", "\u0000\u0001 control \u007f chars", "a" * 200,
]


def vocabulary(path):
    spec = load_gguf(path).tokenizer
    return spec, build_tokenizer(spec)


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    return vocabulary(write_qwen2_gguf(str(tmp_path_factory.mktemp("qwen2") / "qwen2.gguf")))


@pytest.fixture(scope="module")
def llama_spm(tmp_path_factory):
    return vocabulary(write_llama_spm_gguf(str(tmp_path_factory.mktemp("spm") / "llama-spm.gguf")))


def hf_tokenizer(path):
    from transformers import AutoTokenizer

    os.environ["HF_HUB_OFFLINE"] = "1"
    return AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))


def test_qwen2_vocabulary_is_laid_out_as_qwen2s(qwen2):
    spec, tokenizer = qwen2
    assert len(spec.tokens) == tokenizer.get_vocab_size() == 151_936 and spec.pre == "qwen2"
    assert [tokenizer.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")] == \
        [151643, 151644, 151645]
    # The learned tokens have the highest ids: every test here sees ids above 65,535.
    assert max(tokenizer.encode("The capital of France is Paris.").ids) > 65_535
    ids = tokenizer.encode("<|im_start|>user\nHi<|im_end|>[PAD151700]").ids
    assert ids[0] == 151644 and 151645 in ids and ids[-1] == 151700


def test_qwen2_matches_transformers_on_the_same_file(tmp_path):
    path = write_qwen2_gguf(str(tmp_path / "qwen2.gguf"), vocab_size=2048)
    _, ours = vocabulary(path)
    theirs = hf_tokenizer(path)
    for text in TEXTS:
        ids = ours.encode(text).ids
        assert ids == theirs(text, add_special_tokens=False).input_ids, text
        assert ours.decode(ids, skip_special_tokens=False) == text, text


def test_qwen2_splits_text_as_its_pre_tokenizer_does(qwen2):
    """Single digits and the case-insensitive contractions: where Qwen2's split differs from GPT-2's."""
    _, tokenizer = qwen2
    pieces = tokenizer.pre_tokenizer.pre_tokenize_str("12345 It'S DON'T")
    assert [p for p, _ in pieces] == ["1", "2", "3", "4", "5", "ĠIt", "'S", "ĠDON", "'T"]


def llama_cpp_sentencepiece(text: str, spec) -> list[int]:
    """llama.cpp's SPM tokenizer (llm_tokenizer_spm): special tokens split out first; each piece of
    text gets a leading space, spaces become "▁", then the adjacent pair whose join is the
    best-scored piece is joined (ties: leftmost) until none is; what is not a piece is its bytes."""
    vocab = {token: index for index, token in enumerate(spec.tokens)}
    special = [t for t, kind in zip(spec.tokens, spec.token_types) if kind in (2, 3)]
    ids = []
    for part in re.split("(" + "|".join(map(re.escape, special)) + ")", text):
        if part in special:
            ids.append(vocab[part])
            continue
        if not part:
            continue
        symbols = list((" " + part).replace(" ", "\u2581"))
        while True:
            best = None
            for i in range(len(symbols) - 1):
                index = vocab.get(symbols[i] + symbols[i + 1])
                if index is not None and (best is None or spec.scores[index] > best[0]):
                    best = (spec.scores[index], i)
            if best is None:
                break
            i = best[1]
            symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
        for symbol in symbols:
            ids.extend([vocab[symbol]] if symbol in vocab else [vocab[f"<0x{b:02X}>"] for b in symbol.encode()])
    return ids


def test_sentencepiece_is_llama_cpps(llama_spm):
    spec, tokenizer = llama_spm
    assert tokenizer.get_vocab_size() == 32_000 and spec.model == "llama"
    for text in TEXTS:
        ids = tokenizer.encode(text).ids
        assert ids == llama_cpp_sentencepiece(text, spec), text
        if "<s>" not in text and "</s>" not in text:
            assert tokenizer.decode(ids) == text, text  # bytes pieces join back into characters
    # Byte fallback: an emoji no piece covers is its four UTF-8 bytes.
    assert [tokenizer.id_to_token(i) for i in tokenizer.encode("😀").ids][-4:] == ["<0xF0>", "<0x9F>", "<0x98>",
                                                                                 "<0x80>"]
    # Text after a special token gets its "▁" too (Llama 2's prompts: <s> "▁[" "INST" "]").
    ids = tokenizer.encode("<s>[INST]").ids
    assert ids[0] == 1 and tokenizer.id_to_token(ids[1]).startswith("\u2581")


def test_sentencepiece_matches_transformers_where_it_follows_llama_cpp(tmp_path):
    """transformers' GGUF Llama tokenizer (Metaspace, prepend "first") agrees except on text after a
    special token or starting with a space, where it follows neither llama.cpp nor Llama 2."""
    path = write_llama_spm_gguf(str(tmp_path / "llama-spm.gguf"), vocab_size=2048)
    _, ours = vocabulary(path)
    theirs = hf_tokenizer(path)
    compared = 0
    for text in TEXTS:
        if text.startswith(" ") or "<s>" in text or "</s>" in text:
            continue
        assert ours.encode(text).ids == theirs(text, add_special_tokens=False).input_ids, text
        compared += 1
    assert compared >= 15
