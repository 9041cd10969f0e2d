"""Chat templates reduced to fixed strings (tessera.frontend.chat_format): real models' templates reduce
to what renders byte-identically with Jinja, position-dependent ones are refused with a reason, and
the native runtime's fixtures (runtime-native/tests/data/chat_format) are the Jinja renderings.

Regenerate the fixtures after changing the reduction or a template here:
    .venv/bin/python tests/frontend/test_chat_format.py --regenerate
"""

import json
import os
import random
import sys
import warnings

import pytest
from tessera.frontend import bundled_smollm2_path, load_gguf
from tessera.frontend.chat_format import (
    ChatFormat,
    analyze_chat_template,
    random_conversations,
    reduce_chat_template,
    render_jinja,
)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "runtime-native", "tests", "data", "chat_format")
REGENERATE = ".venv/bin/python tests/frontend/test_chat_format.py --regenerate"

SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
           "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
           "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
           "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
          " + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
QWEN2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
         "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
         "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
         "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
          "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
ZEPHYR = ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
          "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
          "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
          "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}")
GEMMA = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
         "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
         "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
         "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
         "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
         "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")
LLAMA2 = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
          "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
          "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
          "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + "
          "'\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
          "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
          "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
          "{% endfor %}")


ROLE_NAMES = ("system", "user", "assistant")
CHATML_FORMAT = {"version": 1, "begin": "", "default_system": None,
                 "roles": {r: {"prefix": f"<|im_start|>{r}\n", "suffix": "<|im_end|>\n"} for r in ROLE_NAMES},
                 "generation_prompt": "<|im_start|>assistant\n", "end": "", "trim_content": False}
LLAMA3_HEADER = "<|start_header_id|>{}<|end_header_id|>\n\n"

# name: (template, bos_token, eos_token, the reduced form)
TEMPLATES = {
    "smollm2": (SMOLLM2, "<|im_start|>", "<|im_end|>", {
        **CHATML_FORMAT, "default_system": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                                           "Hugging Face<|im_end|>\n"}),
    "chatml": (CHATML, "", "", CHATML_FORMAT),
    "qwen2": (QWEN2, "", "<|endoftext|>", {
        **CHATML_FORMAT, "default_system": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"}),
    "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>", {
        "version": 1, "begin": "<|begin_of_text|>", "default_system": None,
        "roles": {r: {"prefix": LLAMA3_HEADER.format(r), "suffix": "<|eot_id|>"} for r in ROLE_NAMES},
        "generation_prompt": LLAMA3_HEADER.format("assistant"), "end": "", "trim_content": True}),
    "zephyr": (ZEPHYR, "<s>", "</s>", {
        "version": 1, "begin": "", "default_system": None,
        "roles": {r: {"prefix": f"<|{r}|>\n", "suffix": "</s>\n"} for r in ROLE_NAMES},
        "generation_prompt": "<|assistant|>\n", "end": "", "trim_content": False}),
    "gemma": (GEMMA, "<bos>", "<eos>", {
        "version": 1, "begin": "<bos>", "default_system": None,
        "roles": {"user": {"prefix": "<start_of_turn>user\n", "suffix": "<end_of_turn>\n"},
                  "assistant": {"prefix": "<start_of_turn>model\n", "suffix": "<end_of_turn>\n"}},
        "generation_prompt": "<start_of_turn>model\n", "end": "", "trim_content": True}),
}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_real_templates_reduce_and_render_like_jinja(name):
    template, bos, eos, expected = TEMPLATES[name]
    reduction = analyze_chat_template(template, bos, eos)
    assert reduction.reason is None
    assert reduction.format.to_json() == expected
    assert reduction.checked >= 200
    # Conversations the reduction did not see (another seed), and a long one.
    fmt = ChatFormat.from_json(json.loads(json.dumps(expected)))
    rng = random.Random(f"{name}-independent")
    conversations = list(random_conversations(rng, 300, "system" in fmt.roles))
    conversations.append([{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}\n"} for i in range(41)])
    for messages in conversations:
        assert fmt.render(messages) == render_jinja(template, messages, bos, eos)


def test_the_bundled_smollm2_template_reduces():
    spec = load_gguf(bundled_smollm2_path()).tokenizer
    fmt = reduce_chat_template(spec.chat_template, spec.tokens[spec.bos_token_id], spec.tokens[spec.eos_token_id])
    assert fmt is not None and fmt.to_json() == TEMPLATES["smollm2"][3]


def test_llama2_folds_the_system_prompt_into_the_first_user_turn_and_is_refused():
    reduction = analyze_chat_template(LLAMA2, "<s>", "</s>")
    assert reduction.format is None
    assert "folds the system prompt into the first user turn" in reduction.reason
    assert reduce_chat_template(LLAMA2, "<s>", "</s>") is None


@pytest.mark.parametrize("template, words", [
    # Numbering the turns: the text around a message depends on its position.
    ("{% for m in messages %}{{ loop.index }}:{{ m['role'] }}:{{ m['content'] }}\n{% endfor %}", "differs"),
    # The last message laid out differently from the others.
    ("{% for m in messages %}{{ m['content'] }}{% if not loop.last %}|{% endif %}{% endfor %}", "differs"),
    # Content transformed.
    ("{% for m in messages %}{{ m['content'] | upper }}{% endfor %}", "content"),
    ("{% for m in messages %}{{ m['content'] | replace('\n', ' ') }}{% endfor %}", "differs"),
    ("{% for m in messages %}{{ m['content'] }}{{ m['content'] }}{% endfor %}", "once"),
    # Broken or hostile templates give a reason, not an exception.
    ("{% for m in messages %}", "does not parse"),
    ("{{ raise_exception('never') }}", "refuses a conversation of one user message"),
    ("{{ messages[5]['content'] }}", "fails"),
    ("{% if not add_generation_prompt %}{{ raise_exception('no') }}{% endif %}{{ messages[0]['content'] }}",
     "with or without add_generation_prompt"),
])
def test_irreducible_templates_give_a_reason(template, words):
    reduction = analyze_chat_template(template)
    assert reduction.format is None and words in reduction.reason, reduction.reason


def test_compile_writes_the_chat_format_or_warns():
    from tessera.app.compile import chat_format_json

    spec = load_gguf(bundled_smollm2_path()).tokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert chat_format_json(spec, "smollm2.gguf") == TEMPLATES["smollm2"][3]
    spec.chat_template = LLAMA2
    with pytest.warns(UserWarning, match="llama2.gguf: .*native runtime will not be able to chat.*first user turn"):
        assert chat_format_json(spec, "llama2.gguf") is None
    spec.chat_template = None
    with pytest.warns(UserWarning, match="no chat template"):
        assert chat_format_json(spec, "bare.gguf") is None


# ---- fixtures of the native runtime's test (runtime-native/tests/test_chat_format.c) -------------------------

def fixture_text(name: str) -> str:
    template, bos, eos, expected = TEMPLATES[name]
    rng = random.Random(f"{name}-fixture")
    conversations = list(random_conversations(rng, 40, "system" in expected["roles"]))
    cases = [{"messages": m, "expected": render_jinja(template, m, bos, eos)} for m in conversations]
    config = {"model": f"{name} (tests/frontend/test_chat_format.py)", "chat_template": template,
              "chat_format": expected, "cases": cases}
    return json.dumps(config, indent=1, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_native_fixtures_are_the_jinja_renderings(name):
    path = os.path.join(FIXTURES, f"{name}.json")
    assert os.path.exists(path), f"{path} is missing: regenerate with {REGENERATE}"
    with open(path, encoding="utf-8") as f:
        assert f.read() == fixture_text(name), f"{path} is out of date: regenerate with {REGENERATE}"


def regenerate() -> None:
    os.makedirs(FIXTURES, exist_ok=True)
    for name in sorted(TEMPLATES):
        with open(os.path.join(FIXTURES, f"{name}.json"), "w", encoding="utf-8") as f:
            f.write(fixture_text(name))
        print(f"wrote {os.path.normpath(os.path.join(FIXTURES, name + '.json'))}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(f"usage: {REGENERATE}")
    regenerate()
