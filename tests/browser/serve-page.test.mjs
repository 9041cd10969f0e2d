// The chat page as `tessera serve MODEL.gguf` serves it (docs/serve.md): in Debian's Chromium, the page talks to
// the server's OpenAI API (web/static/http-engine.js) and shows the server's own greedy reply; it downloads no
// runtime and no weights.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";

import { serve, tinyGGUF } from "./bundle.mjs";
import { CHROMIUM_FLAGS } from "./chromium.mjs";

const PROMPT = "Hello there";
const TOKENS = 12;
let browser, server;

before(async () => {
  server = await serve(tinyGGUF(), ["--device", "wasm", "--context", "64"]);
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium", args: CHROMIUM_FLAGS });
});
after(async () => {
  await browser?.close();
  server?.stop();
});

test("the page served with a model streams the server's greedy reply over the API", async () => {
  const response = await fetch(new URL("v1/chat/completions", server.url), {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: PROMPT }], temperature: 0, max_tokens: TOKENS }),
  });
  const expected = (await response.json()).choices[0].message.content;
  assert.ok(expected.length > 0);

  const page = await browser.newPage();
  const requests = [];
  const errors = [];
  page.on("request", (request) => requests.push(new URL(request.url()).pathname));
  page.on("pageerror", (error) => errors.push(error.message));
  await page.goto(`${server.url}?temperature=0&max_tokens=${TOKENS}`);
  await page.waitForFunction(() => ["ready", "error"].includes(document.body.dataset.state));
  assert.equal(await page.evaluate(() => document.body.dataset.state), "ready", await page.textContent("#error-text"));
  assert.equal(await page.textContent("#device"), "Running on the server: tiny");
  await page.fill("#input", PROMPT);
  await page.click("#send");
  await page.waitForSelector(".message.assistant[data-done=true]", { timeout: 60_000 });
  assert.equal(await page.textContent(".message.assistant"), expected);
  assert.match(await page.textContent("#stats"), /12 tokens · prefill .* tok\/s · decode .* tok\/s/);
  assert.deepEqual([...new Set(requests)].sort(),
    ["/", "/chat.css", "/chat.js", "/http-engine.js", "/v1/chat/completions", "/v1/models"]);
  assert.deepEqual(errors, []);
});
