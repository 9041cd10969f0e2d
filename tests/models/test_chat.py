"""tessera compile / tessera chat: tokenizer and template from the GGUF, a chat that keeps its cache."""

import json
import subprocess
import sys

import pytest
from model_helpers import PROMPT_TEXTS
from tessera.app.chat import ChatError, ChatSession, Sampling
from tessera.app.compile import compile_model
from tessera.frontend import bundled_smollm2_path, load_gguf
from tessera.frontend.tokenizer import build_tokenizer, render_chat


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compile_model(bundled_smollm2_path(), str(tmp_path_factory.mktemp("smollm2")), "llvmpipe",
                         context_length=128).directory


def test_tokenizer_and_chat_template_match_transformers(reference):
    tokenizer, _, _ = reference
    spec = load_gguf(bundled_smollm2_path()).tokenizer
    ours = build_tokenizer(spec)
    for text in PROMPT_TEXTS:
        assert ours.encode(text).ids == tokenizer(text).input_ids
        assert ours.decode(ours.encode(text).ids, skip_special_tokens=False) == text
    messages = [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "What is 2 + 2?"}]
    assert render_chat(spec.chat_template, messages) == tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)


def test_a_chat_keeps_its_cache_across_turns_and_survives_a_failed_turn(compiled):
    session = ChatSession(compiled)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    first = session.generate(session.encode_chat(messages), 32, Sampling(temperature=0))
    assert first["reply"] == "The capital of France is Paris."
    messages += [{"role": "assistant", "content": first["reply"]}, {"role": "user", "content": "And of Italy?"}]
    conversation = session.encode_chat(messages)
    second = session.generate(conversation, 16, Sampling(temperature=0))
    assert second["prefilled_tokens"] < len(conversation) / 2  # only the new turn was computed
    assert "Rome" in second["reply"]
    with pytest.raises(ChatError, match="the prompt has .* tokens; the context window is 128"):
        session.generate(session.encode_chat([{"role": "user", "content": "word " * 200}]), 8)
    again = session.generate(session.encode_chat(messages[:1]), 32, Sampling(temperature=0))
    assert again["reply"] == "The capital of France is Paris."


def test_sampling_is_seeded(compiled):
    session = ChatSession(compiled)
    ids = session.encode_chat([{"role": "user", "content": "Tell me a word."}])
    settings = Sampling(temperature=1.0, top_k=40, top_p=0.9, repetition_penalty=1.1, seed=7)
    assert session.generate(ids, 8, settings)["reply"] == session.generate(ids, 8, settings)["reply"]


def test_cli_prompt_json(compiled):
    result = subprocess.run([sys.executable, "-m", "tessera.cli", "chat", compiled, "--prompt",
                             "What is the capital of France?", "--max-tokens", "16", "--temperature", "0", "--json"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["reply"] == "The capital of France is Paris."
    assert set(data) >= {"reply", "prompt_tokens", "completion_tokens", "prefill_tokens_per_s",
                         "decode_tokens_per_s"}
    assert data["decode_tokens_per_s"] > 0


def test_device_sampling_with_top_k_1_is_greedy(compiled):
    session = ChatSession(compiled)
    ids = session.encode_chat([{"role": "user", "content": "What is the capital of France?"}])
    top_1 = session.generate(ids, 16, Sampling(temperature=0.8, top_k=1, top_p=0.5, seed=3))
    assert top_1["reply"] == "The capital of France is Paris."


def test_interactive_chat_goes_on_after_a_failed_turn(compiled):
    """`tessera chat DIR` reading turns from stdin: a turn too long for the context is reported and the
    conversation continues; an empty line ends it."""
    turns = "What is the capital of France?\n" + "word " * 200 + "\nAnd of Italy?\n\n"
    result = subprocess.run([sys.executable, "-m", "tessera.cli", "chat", compiled, "--temperature", "0",
                             "--max-tokens", "16"], input=turns, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "The capital of France is Paris." in result.stdout
    assert "Rome" in result.stdout.split("Paris.", 1)[1]
    assert "error: the prompt has" in result.stderr and "the context window is 128" in result.stderr
    assert result.stderr.count("[prefill") == 2  # two turns answered, each followed by its speeds
