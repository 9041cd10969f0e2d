// More of the GGUF zoo in the browser runtime (issue 16, item 11): a Qwen2 (a 151,936-token byte-level
// vocabulary with the qwen2 pre-tokenizer, ChatML, Q/K/V biases, an untied head) and a Llama 2-style
// model (a 32,000-piece SentencePiece vocabulary with byte fallback, the [INST] template), tiny
// random-weight files from tests/fixtures/zoo_gguf.py. runtime-js's tokenizer gives the ids and the
// text Python's gives, and its WASM build chats as the Python VM (wasmtime) does with that build
// (tests/models/test_gguf_zoo.py checks the Python VM's f32 build against transformers).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { before, test } from "node:test";

import { Engine } from "../../runtime-js/src/engine.js";
import { createEngine } from "../../runtime-js/src/tessera.js";
import { Tokenizer } from "../../runtime-js/src/vendor/tokenizers.js";
import { bundle, folderFetch, ORIGIN, pythonGreedyReply, ROOT, zooGGUF } from "../browser/bundle.mjs";

const FAMILIES = ["qwen2", "llama-spm"];
// Bytes fallback, whitespace of every kind, case in contractions, digits, code, special tokens.
const TEXTS = [
  "Hello world", " Hello world", "  two leading spaces", "trailing space ", "tabs\tand\ttabs", "\n", " ",
  "line one\nline two\r\nline three\n\n\n", "   \t  \n  mixed   whitespace   ", "The capital of France is Paris.",
  "Héllo wörld! café naïve Zürich", "emoji 😀🦙 and ünicode — dashes", "中文 日本語 한국어", "It's DON'T we'll It'S I'M",
  "12345 3.14159 2026-11-24", "ﬁ ſ K Ω", "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1)",
  "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "<s>[INST] What? [/INST] Paris.</s>",
  "[PAD151700] and [PAD2000]", "\u0000\u0001 control \u007f chars", "a".repeat(200),
];
const CONVERSATIONS = [
  [{ role: "user", content: "What is the capital of France?" }],
  [{ role: "system", content: "Be brief." }, { role: "user", content: "Héllo wörld! 12345 😀" },
    { role: "assistant", content: "Hi." }, { role: "user", content: "  tabs\tand\n\nnewlines " }],
];
/** family -> {site: the bundle folder, id: the model's id in it} */
const sites = {};

before(() => {
  for (const family of FAMILIES) {
    const site = bundle(`zoo-${family}-site`, zooGGUF(family), 64);
    sites[family] = { site, id: readdirSync(join(site, "models"))[0] };
  }
});

/** What Python's side makes of TEXTS and CONVERSATIONS with a bundled model's tokenizer and chat config. */
function pythonTokens(folder) {
  const script = `
import json, sys
from tessera.app.chat import ChatSession
from tokenizers import Tokenizer
session = ChatSession.__new__(ChatSession)
session.tokenizer = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
session.config = json.load(open(sys.argv[1] + "/chat-config.json"))
texts, conversations = json.loads(sys.argv[2]), json.loads(sys.argv[3])
ids = [session.tokenizer.encode(t).ids for t in texts]
print(json.dumps({"ids": ids, "text": [session.tokenizer.decode(i, skip_special_tokens=False) for i in ids],
                  "chats": [session.encode_chat(c) for c in conversations]}))`;
  return JSON.parse(execFileSync(join(ROOT, ".venv", "bin", "python"), ["-c", script, folder, JSON.stringify(TEXTS),
    JSON.stringify(CONVERSATIONS)], { encoding: "utf8" }));
}

for (const family of FAMILIES) {
  test(`${family}: runtime-js tokenizes and renders chats as Python does`, () => {
    const folder = join(sites[family].site, "models", sites[family].id);  // the builds share tokenizer and chat config
    const tokenizer = new Tokenizer(JSON.parse(readFileSync(join(folder, "tokenizer.json"), "utf8")), {});
    const engine = new Engine({ tokenizer, chatConfig: JSON.parse(readFileSync(join(folder, "chat-config.json"), "utf8")) });
    const python = pythonTokens(folder);
    const ids = TEXTS.map((text) => tokenizer.encode(text).ids);
    TEXTS.forEach((text, i) => assert.deepEqual(ids[i], python.ids[i], JSON.stringify(text)));
    TEXTS.forEach((text, i) => assert.equal(tokenizer.decode(ids[i], { skip_special_tokens: false }), python.text[i]));
    assert.deepEqual(CONVERSATIONS.map((m) => engine.encodeChat(m)), python.chats);
    if (family === "qwen2") {
      assert.ok(Math.max(...ids.flat()) > 65_535);  // the vocabulary's ids past 16 bits
      assert.equal(python.chats[0][0], 151644);  // <|im_start|>
    } else {
      assert.equal(python.chats[0][0], 1);  // <s>, written by Llama 2's template
      assert.ok(tokenizer.encode("😀").ids.slice(-4).every((i) => i >= 3 && i < 259));  // its bytes, <0xF0>..<0x80>
    }
  });

  // The same executable in both: the WASM build's decode rounds activations to 8 bits (docs/kernels.md),
  // so its replies may part from the f32 WebGPU build's at a near tie, as this Llama 2-style one does.
  test(`${family}: the WASM build chats as the Python VM does`, async () => {
    const { site, id } = sites[family];
    const prompt = "What is the capital of France?";
    const expected = pythonGreedyReply(join(site, "models", id, "wasm"), prompt, 12);
    const engine = await createEngine(`${ORIGIN}models/${id}/`, { fetchFn: folderFetch(site), backend: "auto" });
    assert.equal(engine.device.kind, "wasm");
    const reply = await engine.chat.completions.create({ messages: [{ role: "user", content: prompt }], temperature: 0,
      max_tokens: 12 });
    assert.equal(reply.choices[0].message.content, expected);
    assert.equal(reply.usage.completion_tokens, 12);
  });
}
