// Chat templates render within a budget in runtime-js too (runtime-js/src/chat-template.js, issue 17
// item 4): real templates render as @huggingface/jinja renders them unbounded (byte for byte), and the
// hostile templates of tests/fixtures/hostile_templates.json end in a clear error, each in a worker
// thread with a memory limit that is ended after a timeout: a regression fails the test, it cannot
// hang it or take the machine's memory.
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

/** Render ``template`` in a worker with 256 MiB of heap, ended after ``seconds``. */
function renderInWorker(template, seconds = 20) {
  const code = `
const { parentPort, workerData } = require("node:worker_threads");
import(workerData.module).then(({ renderChatTemplate }) => {
  const start = performance.now();
  let outcome;
  try {
    outcome = { rendered: renderChatTemplate(workerData.template, { messages: [{ role: "user", content: "Hi" }],
      add_generation_prompt: true }).length };
  } catch (error) {
    outcome = { name: error.name, message: error.message };
  }
  parentPort.postMessage({ ...outcome, seconds: (performance.now() - start) / 1000 });
});`;
  return new Promise((resolve) => {
    const worker = new Worker(code, { eval: true, workerData: { module: MODULE, template },
      resourceLimits: { maxOldGenerationSizeMb: 256 } });
    const timer = setTimeout(() => { worker.terminate(); resolve({ timedOut: seconds }); }, seconds * 1000);
    worker.on("message", (message) => { clearTimeout(timer); worker.terminate(); resolve(message); });
    worker.on("error", (error) => { clearTimeout(timer); resolve({ crashed: String(error) }); });
  });
}

for (const { name, template, js } of HOSTILE) {
  test(`a hostile template ends in a clear error: ${name}`, async () => {
    const outcome = await renderInWorker(template);
    if (js === null) {  // refused by the library itself (no such operator or filter, or no name found)
      assert.ok(outcome.name === "ChatTemplateError" || outcome.name === "TemplateBudgetError", JSON.stringify(outcome));
    } else {
      assert.equal(outcome.name, "TemplateBudgetError", JSON.stringify(outcome));
      assert.ok(outcome.message.includes(js), `${outcome.message} should include ${js}`);
    }
    assert.ok(outcome.seconds < 10, JSON.stringify(outcome));
  });
}

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
    (error) => error instanceof TemplateBudgetError && error.message.includes("ran past its budget of 114 steps"));
});
