"""Chat that keeps working (issue 17, item 5): a conversation past the context loses its oldest turns, the
system prompt kept, and the user is told; bad requests are one-line errors; a chat config that asks for
more context than its build has is refused at load. fit_conversation with a stand-in tokenizer, then
`tessera chat` and ChatSession on the tiny random-weight model (context 64) through the Python VM, and
through runtime-native's (which `make test` builds first: a missing or broken libtessera.so fails here)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from tessera.app.chat import ChatError, ChatSession, NativeChatSession, Sampling
from tessera.app.conversation import check_max_tokens, fit_conversation
from tessera.frontend.chat_template import TemplateBudgetError
from tessera.native import load_library

TESSERA = [sys.executable, "-m", "tessera.cli"]
CONTEXT = 64


def words(messages):
    """A stand-in for the chat template and tokenizer: a token per word, two per message around it."""
    return [0] * sum(2 + len(m["content"].split()) for m in messages)


def turns(n, size=3):
    conversation = []
    for i in range(n):
        conversation += [{"role": "user", "content": f"question {i} " + "x " * (size - 2)},
                         {"role": "assistant", "content": f"answer {i} " + "y " * (size - 2)}]
    return conversation


# ---- fit_conversation ---------------------------------------------------------------------------------------

def test_a_conversation_that_fits_is_sent_whole():
    messages = turns(3) + [{"role": "user", "content": "and now?"}]
    fitted = fit_conversation(messages, words, 64, max_tokens=16)
    assert fitted.messages == messages and fitted.dropped == 0 and fitted.notice is None
    assert len(fitted.prompt_ids) == len(words(messages))


def test_the_oldest_turns_are_dropped_the_system_prompt_kept_and_the_reply_given_room():
    system = {"role": "system", "content": "be brief"}
    messages = [system] + turns(10) + [{"role": "user", "content": "last question"}]  # 4 + 100 + 4 tokens
    fitted = fit_conversation(messages, words, 64, max_tokens=16)
    # 64 - 16 = 48 for the prompt: the system prompt (4), the last question (4) and 4 whole turns (40).
    assert fitted.messages == [system] + messages[-9:]
    assert fitted.dropped == 12 and len(fitted.prompt_ids) == 48
    assert fitted.notice == ("the conversation no longer fits the model's context of 64 tokens: the 12 oldest "
                             "messages were left out (the system prompt is kept)")
    assert fitted.messages[1]["role"] == "user"  # what remains starts with a user turn
    # A reply asked for longer than half the context gets half of it.
    assert len(fit_conversation(messages, words, 64, max_tokens=1000).prompt_ids) <= 32


def test_a_long_history_costs_no_more_than_a_context_of_it():
    """A client resends the whole chat every turn: only the newest context_length messages can fit (each
    costs a token at least), so no longer history is ever rendered, and the result is the same."""
    system = {"role": "system", "content": "be brief"}
    messages = [system] + turns(5000) + [{"role": "user", "content": "last question"}]
    seen = []

    def counting(chosen):
        seen.append(len(chosen))
        return words(chosen)

    fitted = fit_conversation(messages, counting, CONTEXT, max_tokens=16)
    assert max(seen) <= CONTEXT + 1  # the system prompt and at most CONTEXT messages after it
    assert fitted.messages == [system] + messages[-9:] and fitted.dropped == len(messages) - 10
    assert fitted.messages == fit_conversation([system] + messages[-200:], words, CONTEXT, max_tokens=16).messages


def test_a_last_turn_too_long_for_the_context_is_a_clear_error():
    messages = turns(2) + [{"role": "user", "content": "w " * 70}]
    with pytest.raises(ChatError, match=r"^the prompt has 72 tokens; the context window is 64 \(with room for one "
                                        r"reply token\), even with only its last turn: shorten the message"):
        fit_conversation(messages, words, 64, max_tokens=8)
    # One that fits without the room asked for the reply is sent as it is: the reply stops at the context.
    alone = [{"role": "user", "content": "w " * 58}]
    assert fit_conversation(alone, words, 64, max_tokens=8).dropped == 0


@pytest.mark.parametrize("messages, error", [
    ([], "the conversation has no messages"),
    ("hello", "the conversation has no messages"),
    ([{"role": "user"}], "message 0 is not an object with a role and a content"),
    ([{"role": "user", "content": "hi"}, "hi"], "message 1 is not an object"),
    ([{"role": "user", "content": ""}], "the prompt is empty"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": " \n"}],
     "the prompt is empty"),
])
def test_bad_conversations_are_clear_errors(messages, error):
    with pytest.raises(ChatError, match=error):
        fit_conversation(messages, words, 64, 8)


@pytest.mark.parametrize("max_tokens", [0, -3, True, 2.5, "8", None])
def test_max_tokens_below_one_is_a_clear_error(max_tokens):
    with pytest.raises(ChatError, match="max_tokens must be a whole number of at least 1"):
        check_max_tokens(max_tokens)
    with pytest.raises(ChatError, match="max_tokens must be a whole number of at least 1"):
        fit_conversation([{"role": "user", "content": "hi"}], words, 64, max_tokens)


# ---- on the tiny model ---------------------------------------------------------------------------------------

def run(*args, stdin=None, timeout=300):
    return subprocess.run(TESSERA + list(args), input=stdin, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def compiled(tiny_gguf, tmp_path_factory):
    """The tiny model for WebGPU (the Python VM on llvmpipe) with a context of 64."""
    output = str(tmp_path_factory.mktemp("compiled") / "tiny")
    result = run("compile", tiny_gguf, "-o", output, "--context", str(CONTEXT), "-q")
    assert result.returncode == 0, result.stderr
    return output


QUESTIONS = ["Hello there", "What is the capital of France?", "And of Italy?", "Tell me more about it",
             "Why is that?", "One more question, please"]


def test_an_interactive_chat_past_the_context_goes_on_and_says_what_it_dropped(compiled):
    """The bug: every turn after the context filled failed. Now each of six turns is answered."""
    result = run("chat", compiled, "--max-tokens", "8", "--temperature", "0", stdin="\n".join(QUESTIONS) + "\n")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert not [line for line in lines if line.startswith("error:")], result.stderr
    assert sum(line.startswith("[prefill ") for line in lines) == len(QUESTIONS), result.stderr
    notes = [line for line in lines if line.startswith("note: ")]
    assert notes and all(note.startswith("note: the conversation no longer fits the model's context of 64 tokens: "
                                         "the 2 oldest messages were left out") for note in notes), notes
    assert "Traceback" not in result.stderr


def test_a_session_drops_turns_keeps_the_system_prompt_and_reuses_its_cache(compiled):
    session = ChatSession(compiled)
    messages = [{"role": "system", "content": "You answer briefly."}]
    dropped = []
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        fitted = session.fit(messages, 8)
        result = session.reply(messages, 8, Sampling(temperature=0))
        assert result["dropped_messages"] == fitted.dropped
        assert result["completion_tokens"] >= 1 and result["prompt_tokens"] >= 1
        dropped.append(fitted.dropped)
        messages = fitted.messages + [{"role": "assistant", "content": result["reply"]}]
        assert messages[0]["role"] == "system" and messages[1]["role"] == "user"
        if fitted.dropped:
            assert fitted.notice.endswith("left out (the system prompt is kept)")
    assert any(dropped), dropped


def test_bad_requests_are_one_line_errors(compiled):
    for args, error in [(["--max-tokens", "0"], "error: max_tokens must be a whole number of at least 1, not 0"),
                        (["--max-tokens", "-3"], "error: max_tokens must be a whole number of at least 1, not -3"),
                        (["--prompt", ""], "error: the prompt is empty: the last message has no text"),
                        (["--prompt", "  \n"], "error: the prompt is empty: the last message has no text")]:
        result = run("chat", compiled, *(["--prompt", "Hi"] if "--prompt" not in args else []), *args)
        assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == error, result.stderr
        assert "Traceback" not in result.stderr
    session = ChatSession(compiled)
    with pytest.raises(ChatError, match="the conversation has no messages"):
        session.reply([], 8, Sampling())
    with pytest.raises(ChatError, match="max_tokens must be a whole number of at least 1, not 0"):
        session.reply([{"role": "user", "content": "Hi"}], 0, Sampling())
    with pytest.raises(ChatError, match="max_tokens must be a whole number"):
        session.generate(session.encode_chat([{"role": "user", "content": "Hi"}]), -3)


def with_chat_config(compiled, tmp_path, name, **changes):
    folder = str(tmp_path / name)
    shutil.copytree(compiled, folder)
    path = os.path.join(folder, "chat-config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config.update(changes)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    return folder


def test_a_chat_config_asking_for_more_context_than_the_build_is_refused_at_load(compiled, tmp_path):
    """It failed deep in decode ("total = 65 exceeds its upper bound"); now at load, naming both numbers."""
    folder = with_chat_config(compiled, tmp_path, "larger-context", context_length=CONTEXT + 1)
    with pytest.raises(ChatError, match="chat-config.json asks for a context of 65 tokens, but this build was compiled "
                                        "for 64: recompile with --context 65, or set context_length to at most 64"):
        ChatSession(folder)
    result = run("chat", folder, "--prompt", "Hi")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: chat-config.json asks for a context of 65 tokens")
    # A smaller context than the build's is the config's to choose.
    assert ChatSession(with_chat_config(compiled, tmp_path, "smaller-context", context_length=48)).context_length == 48


def test_a_hostile_chat_template_is_a_one_line_error_in_tessera_chat(compiled, tmp_path):
    """Refused at the first step past the budget (run's timeout is only a guard against a hang)."""
    loops = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    folder = with_chat_config(compiled, tmp_path, "hostile", chat_template=loops)
    result = run("chat", folder, "--prompt", "Hi")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == ("error: the chat template ran past its budget of 100,064 steps "
                                                      "(loop iterations, calls and filters)")
    with pytest.raises(TemplateBudgetError) as refused:
        ChatSession(folder).encode_chat([{"role": "user", "content": "Hi"}])
    assert refused.value.steps == 100_065


# ---- runtime-native ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compiled_cpu(tiny_gguf, tmp_path_factory):
    load_library()  # `make native` builds it before the tests: a missing or broken library fails, with its error
    output = str(tmp_path_factory.mktemp("compiled") / "tiny-cpu")
    result = run("compile", tiny_gguf, "-o", output, "--context", str(CONTEXT), "--target", "cpu", "-q")
    assert result.returncode == 0, result.stderr
    return output


def test_the_native_runtime_chat_goes_on_past_the_context_too(compiled_cpu, tmp_path):
    result = run("chat", compiled_cpu, "--max-tokens", "8", "--temperature", "0", "--runtime", "native",
                 stdin="\n".join(QUESTIONS) + "\n")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert not [line for line in lines if line.startswith("error:")], result.stderr
    assert sum(line.startswith("[prefill ") for line in lines) == len(QUESTIONS), result.stderr
    assert any(line.startswith("note: the conversation no longer fits the model's context of 64 tokens")
               for line in lines), result.stderr
    session = NativeChatSession(compiled_cpu)
    messages = [{"role": "system", "content": "Brief."}, *[{"role": r, "content": f"{r} turn {i} " * 4}
                                                          for i in range(6) for r in ("user", "assistant")],
                {"role": "user", "content": "last"}]
    fitted = session.fit(messages, 8)
    assert fitted.dropped and fitted.messages[0]["role"] == "system" and len(fitted.prompt_ids) <= CONTEXT - 8
    reply = session.reply(messages, 8, Sampling(temperature=0))
    assert reply["dropped_messages"] == fitted.dropped and reply["completion_tokens"] >= 1
    assert reply["prompt_tokens"] == len(fitted.prompt_ids)  # fit counts the tokens as the C runtime lays them out
    folder = with_chat_config(compiled_cpu, tmp_path, "native-larger-context", context_length=CONTEXT + 1)
    refused = run("chat", folder, "--prompt", "Hi", "--runtime", "native")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "65" in refused.stderr.splitlines()[-1] and "64" in refused.stderr.splitlines()[-1], refused.stderr
