"""Chat templates render within a budget (tessera.frontend.chat_template, issue 17 item 4): real templates
render byte for byte as jinja2's sandbox renders them (as transformers does), and hostile ones end in
a one-line TemplateBudgetError, within the budget's steps and without the memory they ask for.

tests/js/chat-template.test.mjs feeds the same hostile templates (tests/fixtures/hostile_templates.json)
to runtime-js."""

import json
import os
import random
import resource
import subprocess
import sys

import pytest
from fixtures.zoo_gguf import LLAMA2_TEMPLATE, QWEN2_TEMPLATE
from frontend.test_chat_format import TEMPLATES
from tessera.frontend import bundled_smollm2_path, load_gguf
from tessera.frontend.chat_format import random_conversations
from tessera.frontend.chat_template import (
    DEFAULT_BUDGET,
    ChatTemplateError,
    TemplateBudget,
    TemplateBudgetError,
    TemplateRaised,
    render_chat_template,
)
from tessera.ir import TesseraError

HOSTILE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hostile_templates.json")
MESSAGES = [{"role": "user", "content": "Hi"}]


def reference_render(template, messages, **variables):
    """jinja2's sandbox as transformers sets it up, without a budget (the rendering before issue 17)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=True, **variables)


def real_templates():
    spec = load_gguf(bundled_smollm2_path()).tokenizer
    templates = {name: (template, bos, eos) for name, (template, bos, eos, _) in TEMPLATES.items()}
    templates["smollm2.gguf"] = (spec.chat_template, spec.tokens[spec.bos_token_id], spec.tokens[spec.eos_token_id])
    templates["zoo-qwen2"] = (QWEN2_TEMPLATE, "", "<|endoftext|>")
    templates["zoo-llama-spm"] = (LLAMA2_TEMPLATE, "<s>", "</s>")
    return templates


@pytest.mark.parametrize("name", sorted(real_templates()))
def test_real_templates_render_as_jinja2_renders_them(name):
    template, bos, eos = real_templates()[name]
    rng = random.Random(name)
    conversations = list(random_conversations(rng, 150, system_first=True))
    conversations.append([{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " * 40}
                          for i in range(301)])
    rendered = 0
    for messages in conversations:
        try:
            expected = reference_render(template, messages, bos_token=bos, eos_token=eos)
        except Exception:  # the template refuses this order of roles (it calls an undefined raise_exception)
            with pytest.raises(TemplateRaised, match="the chat template refuses this conversation: "):
                render_chat_template(template, messages, bos_token=bos, eos_token=eos)
            continue
        assert render_chat_template(template, messages, bos_token=bos, eos_token=eos) == expected
        rendered += 1
    assert rendered >= 80


def hostile_templates():
    with open(HOSTILE, encoding="utf-8") as f:
        return json.load(f)["templates"]


@pytest.mark.timeout(300)  # a guard against a hang: the budget's steps take well under a second
@pytest.mark.parametrize("case", hostile_templates(), ids=lambda case: case["name"])
def test_a_hostile_template_ends_in_a_budget_error(case):
    """Each runs in a process of its own, so that its memory is its own (and a regression cannot take
    the test run's): it fails within the budget's steps, having used little memory. Nothing is timed: a
    busy machine changes times, not steps."""
    script = """
import json, resource, sys
from tessera.frontend.chat_template import render_chat_template, TemplateBudgetError
def peak_rss_mib():
    # VmHWM, this process image's own peak: getrusage's ru_maxrss keeps the peak of the process that
    # forked it across exec (on Linux), here the test run's.
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
steps = None
try:
    render_chat_template(sys.argv[1], [{"role": "user", "content": "Hi"}])
    outcome = "rendered"
except TemplateBudgetError as error:
    outcome, steps = "TemplateBudgetError: " + str(error), error.steps
print(json.dumps({"outcome": outcome, "steps": steps, "rss_mib": peak_rss_mib()}))
"""
    def limit_memory():  # a regression that tries 'a' * 10**9 stops at 2 GiB of address space
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))

    result = subprocess.run([sys.executable, "-c", script, case["template"]], capture_output=True, text=True,
                            timeout=240, preexec_fn=limit_memory)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["outcome"].startswith("TemplateBudgetError: "), report
    assert case["python"] in report["outcome"], report
    # Stopped at the first step past the budget, or by a size check long before the steps ran out (these
    # templates reach their sizes within a few hundred: a doubling 40 times, a loop's 50th output, a recursion).
    steps = DEFAULT_BUDGET.steps + DEFAULT_BUDGET.steps_per_message
    if "ran past its budget" in report["outcome"]:
        assert report["steps"] == steps + 1, report
    else:
        assert 0 <= report["steps"] < steps / 100, report
    assert report["rss_mib"] < 300, report


def test_errors_are_tessera_errors_in_one_line():
    with pytest.raises(ChatTemplateError, match="the chat template does not parse: .*'endfor'"):
        render_chat_template("{% for m in messages %}", MESSAGES)
    with pytest.raises(ChatTemplateError, match="the chat template failed: UndefinedError: 'x' is undefined"):
        render_chat_template("{{ x.y }}", MESSAGES)
    with pytest.raises(TemplateRaised, match="refuses this conversation: System role not supported"):
        render_chat_template("{{ raise_exception('System role not supported') }}", MESSAGES)
    with pytest.raises(TemplateBudgetError, match="recursed too deeply"):
        render_chat_template("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", MESSAGES)
    for error in (ChatTemplateError, TemplateRaised, TemplateBudgetError):
        assert issubclass(error, TesseraError)  # the command line prints them as one line


def test_the_budget_grows_with_the_conversation():
    """A long conversation renders though it is longer than the budget's own characters and steps;
    the same template adding that much of its own is refused."""
    small = TemplateBudget(steps=50, chars=1000, work=20_000)
    long = [{"role": "user", "content": "x" * 5000}, {"role": "assistant", "content": "y" * 5000}] * 100
    template = TEMPLATES["chatml"][0]
    assert render_chat_template(template, long, budget=small) == reference_render(template, long)
    with pytest.raises(TemplateBudgetError, match="would make a str repeated 5,000 times of 5,000 characters or "
                                                  "items, past its budget of 1,018"):
        render_chat_template("{{ 'x' * 5000 }}", [{"role": "user", "content": "hello"}], budget=small)
    with pytest.raises(TemplateBudgetError, match="ran past its budget of 114 steps") as refused:
        render_chat_template("{% for i in range(1000) %}{% endfor %}", [{"role": "user", "content": "hi"}],
                             budget=small)
    assert refused.value.steps == 115
