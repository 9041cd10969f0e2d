"""runtime-js's tokenizer gives llama.cpp's ids on every case of llama.cpp's tokenizer test vectors,
one test per vocabulary of the llama-cpp-python sdist whose tokenizer.ggml.model is byte-level BPE
("gpt2") or SentencePiece ("llama"); vocabularies of other model types are left out by that type
(tests/fixtures/llama_cpp_vocabs.py). The tokenizer is the tokenizer.json Tessera bundles
(build_tokenizer's), run by node through tests/js/encode_texts.mjs; each text is encoded as llama.cpp's
test-tokenizer-0 encodes it: no BOS/EOS added, control tokens in the text taken as text."""

import json
import os
import shutil
import subprocess

import pytest
from fixtures.llama_cpp_vocabs import built_vocabularies, mismatches, tokenizer_json

DRIVER = os.path.join(os.path.dirname(__file__), "encode_texts.mjs")


@pytest.mark.parametrize("vocab", built_vocabularies())
def test_runtime_js_tokenizer_matches_llama_cpp(vocab, tmp_path):
    if isinstance(vocab, Exception):
        pytest.fail(str(vocab))
    node = shutil.which("node")
    assert node, "node is not on PATH (runtime-js's tests need Node.js 20 or later)"
    texts = tmp_path / "texts.json"
    texts.write_text(json.dumps([text for text, _ in vocab.cases()]), encoding="utf-8")
    result = subprocess.run([node, DRIVER, tokenizer_json(vocab), str(texts), "--text-specials"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = mismatches(vocab, json.loads(result.stdout), "runtime-js")
    assert not report, report
