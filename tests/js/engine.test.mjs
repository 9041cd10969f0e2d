// The engine's text side without a GPU: the chat template and tokenizer give the ids Python gives,
// decoding holds back partial characters, and a seed repeats the uniform numbers.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { before, test } from "node:test";

import { Engine, seededRandom, stableText } from "../../runtime-js/src/engine.js";
import { Tokenizer } from "../../runtime-js/src/vendor/tokenizers.js";
import { ROOT, tessera, tinyGGUF } from "../browser/bundle.mjs";

let folder;
const CONVERSATIONS = [
  [{ role: "user", content: "What is the capital of France?" }],
  [{ role: "system", content: "Be brief." }, { role: "user", content: "Héllo wörld! 12345 — ünicode 😀" },
    { role: "assistant", content: "Hi." }, { role: "user", content: "  tabs\tand\n\nnewlines " }],
];

before(() => {
  folder = join(ROOT, "build", "browser-fixtures", "tiny-compiled");
  tessera(["compile", tinyGGUF(), "-o", folder, "--context", "64"]);
});

test("chat template and tokenizer give the same ids as Python", () => {
  const engine = new Engine({
    tokenizer: new Tokenizer(JSON.parse(readFileSync(join(folder, "tokenizer.json"), "utf8")), {}),
    chatConfig: JSON.parse(readFileSync(join(folder, "chat-config.json"), "utf8")),
  });
  const script = `
import json, sys
from tessera.app.chat import ChatSession
session = ChatSession.__new__(ChatSession)
from tokenizers import Tokenizer
session.tokenizer = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
session.config = json.load(open(sys.argv[1] + "/chat-config.json"))
print(json.dumps([session.encode_chat(m) for m in json.loads(sys.argv[2])]))`;
  const python = JSON.parse(execFileSync(join(ROOT, ".venv", "bin", "python"), ["-c", script, folder,
    JSON.stringify(CONVERSATIONS)], { encoding: "utf8" }));
  assert.deepEqual(CONVERSATIONS.map((m) => engine.encodeChat(m)), python);
  const ids = python[1];
  assert.equal(engine.tokenizer.decode(engine.tokenizer.encode("Héllo wörld! 😀").ids), "Héllo wörld! 😀");
  assert.ok(ids.length > 20);
});

test("incremental text waits for a whole character; seeds repeat", () => {
  assert.equal(stableText("caf\uFFFD"), "caf");
  assert.equal(stableText("café"), "café");
  const a = seededRandom(7), b = seededRandom(7), c = seededRandom(8);
  const first = [a(), a(), a()];
  assert.deepEqual(first, [b(), b(), b()]);
  assert.notDeepEqual(first, [c(), c(), c()]);
  assert.ok(first.every((u) => u >= 0 && u < 1));
});

test("an empty conversation is refused", () => {
  const engine = new Engine({ tokenizer: null, chatConfig: {} });
  assert.throws(() => engine.encodeChat([]), /messages must be a non-empty array/);
});
