"""More of the GGUF zoo (issue 16, item 11): a Qwen2 (biases on Q/K/V, an untied output head, the
qwen2 pre-tokenizer, ChatML) and a Llama 2-style model (a SentencePiece vocabulary, Llama 2's [INST]
template), tiny random-weight files written with the gguf package (tests/fixtures/zoo_gguf.py),
loaded by Tessera and by transformers from the same file: the same logits, the same greedy chat.

These files have 2,048-token vocabularies, because transformers reads a GGUF with gguf's GGUFReader,
which takes a minute over Qwen2's 151,936 tokens and merges. The full-size vocabularies are chatted
with in the Python VM and in runtime-js by tests/js/zoo.test.mjs; their tokenizers are checked in
tests/frontend/test_tokenizer_zoo.py."""

import os
import warnings

import numpy as np
import pytest
import torch
from fixtures.zoo_gguf import write_llama_spm_gguf, write_qwen2_gguf
from tessera.app.chat import ChatSession, Sampling
from tessera.app.compile import compile_model
from tessera.frontend import load_gguf

FAMILIES = {"qwen2": (write_qwen2_gguf, "Qwen2ForCausalLM"), "llama-spm": (write_llama_spm_gguf, "LlamaForCausalLM")}
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    """(name, the GGUF's path, transformers' model of it, a ChatSession on Tessera's llvmpipe build of it)."""
    from transformers import AutoModelForCausalLM

    name = request.param
    writer, _ = FAMILIES[name]
    folder = tmp_path_factory.mktemp(name)
    path = writer(str(folder / f"{name}.gguf"), vocab_size=2048)
    os.environ["HF_HUB_OFFLINE"] = "1"
    reference = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=os.path.basename(path),
                                                     dtype=torch.float32).eval()
    with warnings.catch_warnings():  # Llama 2's template does not reduce for the native runtime: said, not tested here
        warnings.simplefilter("ignore")
        compiled = compile_model(path, str(folder / "compiled"), "llvmpipe", context_length=64)
    return name, path, reference, ChatSession(compiled.directory)


def reference_logits(model, ids) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([list(ids)], dtype=torch.int64)).logits[0, -1].numpy()


def test_each_family_loads_as_its_architecture(family):
    name, path, reference, _ = family
    model = load_gguf(path)
    c = model.config
    assert type(reference).__name__ == FAMILIES[name][1]
    assert (c.vocab_size, c.tie_word_embeddings) == (2048, False)
    if name == "qwen2":
        assert c.architecture == "qwen2" and c.attention_bias and model.tokenizer.pre == "qwen2"
        assert "blk.1.attn_v.bias" in model.tensors
    else:
        assert c.architecture == "llama" and not c.attention_bias and model.tokenizer.model == "llama"
        assert len(model.tokenizer.scores) == 2048 and model.tokenizer.add_bos_token


def test_prefill_and_decode_logits_match_transformers(family):
    _, _, reference, session = family
    vm = session.vm
    ids = [5, 17, 3, 880, 2047, 2, 600, 1999, 1024]
    for n in (1, 5, 9):
        vm.reset_state()
        got = vm["prefill"](np.asarray(ids[:n], np.int32), n)
        np.testing.assert_allclose(got[0], reference_logits(reference, ids[:n]), rtol=1e-3, atol=1e-3)
    for n in (10, 11):  # decode steps after the prefill of 9, reading the KV cache
        ids.append(int(got[0].argmax()))
        got = vm["decode"](np.asarray(ids[-1:], np.int32), n)
        np.testing.assert_allclose(got[0], reference_logits(reference, ids), rtol=1e-3, atol=1e-3)


def test_greedy_chat_matches_transformers(family):
    name, path, reference, session = family
    prompt = session.encode_chat(MESSAGES)
    if name == "qwen2":  # ChatML through transformers' own tokenizer of the same file
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
        assert prompt == list(tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True,
                                                            return_dict=False))
        assert session.tokenizer.decode(prompt, skip_special_tokens=False).startswith("<|im_start|>system\nBe brief.")
    else:  # the template writes <s> itself; the text after it gets SentencePiece's "▁", as llama.cpp gives it
        assert prompt[0] == 1 and prompt.count(1) == 1
        assert session.tokenizer.id_to_token(prompt[1]).startswith("\u2581")
        assert session.tokenizer.decode(prompt) == "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWhat is the capital of " \
                                                   "France? [/INST]"
    steps = 12
    expected = []
    while len(expected) < steps:
        token = int(reference_logits(reference, prompt + expected).argmax())
        if token in session.stop_ids:
            break
        expected.append(token)
    session.reset()
    reply = session.reply(MESSAGES, max_tokens=steps, sampling=Sampling(temperature=0.0))
    assert reply["completion_tokens"] == len(expected) and reply["prompt_tokens"] == len(prompt)
    assert reply["reply"] == session.tokenizer.decode(expected)
    assert len(expected) == steps  # (no stop token in these seeds' replies: every step is compared)
