// Chat templates render within a budget in runtime-js too (runtime-js/src/chat-template.js, issue 17
// item 4): real templates render as @huggingface/jinja renders them unbounded (byte for byte), and the
// hostile templates of tests/fixtures/hostile_templates.json end in a clear error within the budget's
// steps, each in a worker thread with a memory limit that is ended after a generous timeout: a
// regression fails the test, it cannot hang it or take the machine's memory. Nothing here is timed: a
// busy machine changes times, not steps.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { pathToFileURL } from "node:url";
import { Worker } from "node:worker_threads";

import {
  ChatTemplateError, renderChatTemplate, TEMPLATE_BUDGET, TemplateBudgetError, TemplateRaised,
} from "../../runtime-js/src/chat-template.js";
import { Template } from "../../runtime-js/src/vendor/jinja.js";
import { ROOT } from "../browser/bundle.mjs";

const HOSTILE = JSON.parse(readFileSync(join(ROOT, "tests", "fixtures", "hostile_templates.json"), "utf8")).templates;
const MODULE = pathToFileURL(join(ROOT, "runtime-js", "src", "chat-template.js")).href;

/** The real templates of tests/frontend/test_chat_template.py (SmolLM2's from its GGUF, ChatML, the zoo's ...)
 * with random conversations from Python's generator. */
function realTemplates() {
  const script = `
import json, random, sys
sys.path.insert(0, "tests")
from frontend.test_chat_template import real_templates
from tessera.frontend.chat_format import random_conversations
out = {}
for name, (template, bos, eos) in sorted(real_templates().items()):
    conversations = list(random_conversations(random.Random(name), 60, system_first=True))
    conversations.append([{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " * 40} for i in range(301)])
    out[name] = {"template": template, "bos": bos, "eos": eos, "conversations": conversations}
print(json.dumps(out))`;
  return JSON.parse(execFileSync(join(ROOT, ".venv", "bin", "python"), ["-c", script], { cwd: ROOT, encoding: "utf8",
    maxBuffer: 64 << 20 }));
}

test("real templates render as the library renders them without a budget", () => {
  let rendered = 0;
  for (const [name, { template, bos, eos, conversations }] of Object.entries(realTemplates())) {
    for (const messages of conversations) {
      const variables = { messages, add_generation_prompt: true, bos_token: bos, eos_token: eos };
      let expected;
      try {
        expected = new Template(template).render(variables);
      } catch {  // the template refuses this order of roles
        assert.throws(() => renderChatTemplate(template, variables), TemplateRaised, name);
        continue;
      }
      assert.equal(renderChatTemplate(template, variables), expected, `${name}: ${JSON.stringify(messages)}`);
      rendered += 1;
    }
  }
  assert.ok(rendered > 400, `${rendered} renderings compared`);
});

/** Render ``template`` for one message in a worker with 256 MiB of heap, ended after ``seconds`` (a
 * guard against a hang: the budget's steps take well under a second). */
function renderInWorker(template, seconds = 120) {
  const code = `
const { parentPort, workerData } = require("node:worker_threads");
import(workerData.module).then(({ renderChatTemplate }) => {
  let outcome;
  try {
    outcome = { rendered: renderChatTemplate(workerData.template, { messages: [{ role: "user", content: "Hi" }],
      add_generation_prompt: true }).length };
  } catch (error) {
    outcome = { name: error.name, message: error.message, steps: error.steps };
  }
  parentPort.postMessage(outcome);
});`;
  return new Promise((resolve) => {
    const worker = new Worker(code, { eval: true, workerData: { module: MODULE, template },
      resourceLimits: { maxOldGenerationSizeMb: 256 } });
    const timer = setTimeout(() => { worker.terminate(); resolve({ timedOut: seconds }); }, seconds * 1000);
    worker.on("message", (message) => { clearTimeout(timer); worker.terminate(); resolve(message); });
    worker.on("error", (error) => { clearTimeout(timer); resolve({ crashed: String(error) }); });
  });
}

// The steps one message allows (renderInWorker's conversation).
const STEPS = TEMPLATE_BUDGET.steps + TEMPLATE_BUDGET.stepsPerMessage;

for (const { name, template, js } of HOSTILE) {
  test(`a hostile template ends in a clear error within its steps: ${name}`, async () => {
    const outcome = await renderInWorker(template);
    if (js === null) {  // refused by the library itself (no such operator or filter, or no name found)
      assert.ok(outcome.name === "ChatTemplateError" || outcome.name === "TemplateBudgetError", JSON.stringify(outcome));
      if (outcome.name === "ChatTemplateError") return;
    } else {
      assert.equal(outcome.name, "TemplateBudgetError", JSON.stringify(outcome));
      assert.ok(outcome.message.includes(js), `${outcome.message} should include ${js}`);
    }
    // Stopped at the first step past the budget, or by a size check long before the steps ran out (these
    // templates reach their sizes within a few hundred: a doubling 40 times, a loop's 50th output, a recursion).
    if (outcome.message.includes("ran past its budget")) assert.equal(outcome.steps, STEPS + 1, JSON.stringify(outcome));
    else assert.ok(outcome.steps > 0 && outcome.steps < STEPS / 100, JSON.stringify(outcome));
  });
}

test("a loop and range render as the library's: loop's attributes, a filter, unpacking, break, continue, else", () => {
  const variables = {
    messages: [{ role: "system", content: "s" }, { role: "user", content: "u" }, { role: "assistant", content: "a" }],
    pairs: [[1, "a"], [2, "b"]], table: { x: 1, y: 2 }, empty: [],
  };
  const templates = [
    "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}" +
      "{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.content }}:{{ loop.length }}:{{ loop.last }}{% endfor %}",
    "{% for n, c in pairs %}{{ n }}{{ c }}{{ loop.index }}{% endfor %}",
    "{% for k in table %}{{ k }}{{ table[k] }}{% endfor %}",
    "{% for x in empty %}{{ x }}{% else %}none{% endfor %}",
    "{% for x in messages if false %}{{ x }}{% else %}filtered{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 6 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% for i in range(3) %}{% continue %}{% else %}after continue{% endfor %}",
    "{% for i in range(3) %}{% for j in range(i) %}{{ loop.length }}{{ j }}{% endfor %}/{{ loop.index }}{% endfor %}",
    "{% for i in range(3) %}{% set ns = namespace(l=loop) %}{{ ns.l.index }}{% endfor %}{{ loop is defined }}",
    "{% for i in range(-3, 3) %}{{ loop.index }}{{ i }}{% endfor %}{{ i is defined }}",
    "{% for m in messages %}{{ loop | tojson }}{% endfor %}",
    "{% for i in range(10, 0, -3) %}{{ i }},{% endfor %}{{ range(3) }}{{ range(2, -2, -1) }}{{ range(0.5, 3) }}" +
      "{{ range(-3) | length }}{{ range(5)[2] + 1 }}",
  ];
  for (const template of templates) {
    assert.equal(renderChatTemplate(template, variables), new Template(template).render(variables), template);
  }
  for (const [template, message] of [
    ["{% for a, b in [1, 2] %}{% endfor %}", "Cannot unpack non-iterable type: IntegerValue"],
    ["{% for a, b in [[1, 2], [1, 2, 3]] %}{{ a }}{% endfor %}", "Too many items to unpack"],
    ["{% for x in 5 %}{% endfor %}", "Expected iterable or object type in for loop: got IntegerValue"],
  ]) {
    assert.throws(() => new Template(template).render(variables), { message });
    assert.throws(() => renderChatTemplate(template, variables),
      (error) => error instanceof ChatTemplateError && error.message === `the chat template failed: Error: ${message}`);
  }
});

test("errors say what went wrong; the budget grows with the conversation", () => {
  const messages = [{ role: "user", content: "Hi" }];
  assert.throws(() => renderChatTemplate("{% for m in messages %}", { messages }), /^ChatTemplateError: the chat template does not parse: /);
  assert.throws(() => renderChatTemplate("{{ raise_exception('System role not supported') }}", { messages }),
    (error) => error instanceof TemplateRaised && error instanceof ChatTemplateError &&
      error.message === "the chat template refuses this conversation: System role not supported");
  assert.throws(() => renderChatTemplate("{{ x.y() }}", { messages }), /^ChatTemplateError: the chat template failed: /);
  const small = { ...TEMPLATE_BUDGET, steps: 50, chars: 1000, work: 20_000 };
  const chatml = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + " +
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  const long = Array.from({ length: 200 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: "x".repeat(5000) }));
  const variables = { messages: long, add_generation_prompt: true };
  assert.equal(renderChatTemplate(chatml, variables, small), new Template(chatml).render(variables));
  assert.throws(() => renderChatTemplate("{% for i in range(1000) %}{% endfor %}", { messages: [{ role: "user", content: "hi" }] }, small),
    (error) => error instanceof TemplateBudgetError && error.message.includes("ran past its budget of 114 steps") &&
      error.steps === 115);
});
