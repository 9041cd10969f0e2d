"""runtime-js's tokenizer gives llama.cpp's ids on every case of llama.cpp's tokenizer test vectors,
one test per vocabulary of the llama-cpp-python sdist whose tokenizer.ggml.model is byte-level BPE
("gpt2"), SentencePiece ("llama") or Gemma 4's ("gemma4"); vocabularies of other model types
(WordPiece "bert", Unigram "t5", RWKV, ...) are left out by that type
(tests/fixtures/llama_cpp_vocabs.py). The tokenizer is the tokenizer.json Tessera bundles
(build_tokenizer's), run by node through tests/js/encode_texts.mjs; each text is encoded as llama.cpp's
test-tokenizer-0 encodes it: no BOS/EOS added, control tokens in the text taken as text."""

import json
import os
import shutil
import subprocess

import pytest
from fixtures.llama_cpp_vocabs import (
    all_texts,
    built_vocabularies,
    mismatches,
    pre_tokenizer_params,
    tokenizer_json,
    under_pre_tokenizer,
)

DRIVER = os.path.join(os.path.dirname(__file__), "encode_texts.mjs")


def run_js(tokenizer_path: str, texts: list[str], tmp_path) -> list[list[int]]:
    node = shutil.which("node")
    assert node, "node is not on PATH (runtime-js's tests need Node.js 20 or later)"
    texts_path = tmp_path / "texts.json"
    texts_path.write_text(json.dumps(texts), encoding="utf-8")
    result = subprocess.run([node, DRIVER, tokenizer_path, str(texts_path), "--text-specials"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.mark.parametrize("vocab", built_vocabularies())
def test_runtime_js_tokenizer_matches_llama_cpp(vocab, tmp_path):
    if isinstance(vocab, Exception):
        pytest.fail(str(vocab))
    got = run_js(tokenizer_json(vocab), [text for text, _ in vocab.cases()], tmp_path)
    report = mismatches(vocab, got, "runtime-js")
    assert not report, report


@pytest.mark.parametrize("pre", pre_tokenizer_params())
def test_every_pre_tokenizer(pre, tmp_path):
    """Each pre-tokenizer Tessera knows (by llama.cpp's names) splits in JavaScript as in Hugging
    Face's Oniguruma, on GPT-2's vocabulary: the vocabularies above exercise a few of them only."""
    from tokenizers import Tokenizer

    path = tmp_path / "tokenizer.json"
    path.write_text(under_pre_tokenizer(pre), encoding="utf-8")
    hf = Tokenizer.from_file(str(path))
    hf.encode_special_tokens = True
    texts = all_texts()
    got = run_js(str(path), texts, tmp_path)
    wrong = [(text, ids, hf.encode(text, add_special_tokens=False).ids) for text, ids in zip(texts, got)
             if ids != hf.encode(text, add_special_tokens=False).ids]
    assert not wrong, f"runtime-js differs from Python on {len(wrong)} of {len(texts)} texts: " + "\n".join(
        f"{text!r}: JS {ids} != Python {want}" for text, ids, want in wrong[:10])
