"""Which split a byte-level vocabulary gets from its tokenizer.ggml.pre: the table's, by llama.cpp's
names; llama.cpp's "default" when the file names none; a clear error for a name the table lacks."""

import pytest
from tessera.frontend.gguf_reader import GGUFError, TokenizerSpec
from tessera.frontend.pretokenizers import PRE_TOKENIZERS
from tessera.frontend.tokenizer import build_tokenizer

BYTES = [chr(c) for c in range(33, 127)] + ["Ġ"]  # enough of GPT-2's byte symbols for the texts below


def vocabulary(pre):
    return build_tokenizer(TokenizerSpec(model="gpt2", tokens=BYTES, token_types=[1] * len(BYTES), merges=[],
                                         bos_token_id=None, eos_token_id=None, chat_template=None,
                                         add_bos_token=False, pre=pre))


def pieces(pre, text):
    return [piece for piece, _ in vocabulary(pre).pre_tokenizer.pre_tokenize_str(text)]


def test_a_pre_tokenizer_name_selects_llama_cpps_split():
    assert pieces("llama-bpe", "12345 It'S") == ["123", "45", "ĠIt", "'S"]
    assert pieces("qwen2", "12345") == ["1", "2", "3", "4", "5"]
    assert pieces("gpt-2", "12345 It'S") == ["12345", "ĠIt", "'", "S"]
    assert PRE_TOKENIZERS["llama-bpe"].ignore_merges and not PRE_TOKENIZERS["qwen2"].ignore_merges


def test_a_file_naming_none_gets_llama_cpps_default():
    # punctuation runs first, then GPT-2's split, then digits in threes
    assert pieces(None, "a+=1234567!") == ["a", "+=", "123", "456", "7", "!"]


def test_an_unknown_name_is_refused():
    with pytest.raises(GGUFError, match="tokenizer.ggml.pre 'no-such-split' is not a pre-tokenizer Tessera knows"):
        vocabulary("no-such-split")
