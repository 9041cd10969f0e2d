"""Tessera's Python tokenizer (Hugging Face ``tokenizers`` running what build_tokenizer makes of the
GGUF) gives llama.cpp's ids on every case of llama.cpp's tokenizer test vectors, one test per
vocabulary of the llama-cpp-python sdist whose tokenizer.ggml.model is byte-level BPE ("gpt2"),
SentencePiece ("llama") or Gemma 4's BPE over SentencePiece pieces ("gemma4"); vocabularies of other
model types (WordPiece "bert", Unigram "t5", RWKV, ...) are left out by that type (tests/fixtures/llama_cpp_vocabs.py). Each text is encoded as llama.cpp's
test-tokenizer-0 encodes it: no BOS/EOS added, control tokens in the text taken as text.

runtime-js and runtime-native run the same cases in tests/js/test_runtime_js_vocabs.py and
tests/native/test_tokenizer.py."""

import pytest
from fixtures.llama_cpp_vocabs import built_vocabularies, mismatches, tokenizer_json


@pytest.mark.parametrize("vocab", built_vocabularies())
def test_python_tokenizer_matches_llama_cpp(vocab):
    from tokenizers import Tokenizer

    if isinstance(vocab, Exception):
        pytest.fail(str(vocab))
    tokenizer = Tokenizer.from_file(tokenizer_json(vocab))
    tokenizer.encode_special_tokens = True  # llama.cpp's parse_special=false
    got = [tokenizer.encode(text, add_special_tokens=False).ids for text, _ in vocab.cases()]
    report = mismatches(vocab, got, "Python")
    assert not report, report
