// The demo chat page in Debian's Chromium (WebGPU on SwiftShader), driven by Playwright:
// a bundle made by `tessera bundle`, served by `tessera serve`, against the Python VM's replies.
// SwiftShader is a software adapter, so the page runs the WASM build unless asked for WebGPU
// (?backend=webgpu): the tests of the WebGPU path ask.
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { chromium } from "playwright-core";

import { ARTIFACTS, bundle, pythonGreedyReply, serve, tinyGGUF, zooGGUF } from "./bundle.mjs";
import { CHROMIUM_FLAGS } from "./chromium.mjs";

const PROMPT = "Hello there";
const TINY_TOKENS = 12;
let browser;

before(async () => {
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium", args: CHROMIUM_FLAGS });
  mkdirSync(ARTIFACTS, { recursive: true });
});
after(async () => browser && browser.close());

/** Record what the page shows while it loads and replies: progress lines and reply lengths (the init script
 * registered before the caller navigates, or the first page may load without it). */
async function recordPage(page) {
  const log = { requests: [], errors: [] };
  page.on("request", (request) => log.requests.push(request.url()));
  page.on("pageerror", (error) => log.errors.push(error.message));
  await page.addInitScript(() => {
    window.__seen = { progress: [], replyLengths: [] };
    new MutationObserver(() => {
      const progress = document.getElementById("progress-text")?.textContent;
      if (progress && window.__seen.progress.at(-1) !== progress) window.__seen.progress.push(progress);
      const reply = document.querySelector(".message.assistant");
      if (reply && window.__seen.replyLengths.at(-1) !== reply.textContent.length) {
        window.__seen.replyLengths.push(reply.textContent.length);
      }
    }).observe(document, { subtree: true, childList: true, characterData: true });
  });
  return log;
}

async function waitForState(page, states, timeout = 180_000) {
  await page.waitForFunction((wanted) => wanted.includes(document.body.dataset.state), states, { timeout });
  return page.evaluate(() => document.body.dataset.state);
}

async function chatTurn(page, prompt, timeout) {
  await page.fill("#input", prompt);
  await page.click("#send");
  await page.waitForSelector(".message.assistant[data-done=true]", { timeout });
  return page.textContent(".message.assistant");
}

describe("a tiny random-weight model", () => {
  let site, server, expected;

  before(async () => {
    site = bundle("tiny-site", tinyGGUF());
    expected = pythonGreedyReply(join(site, "models", "tiny", "webgpu"), PROMPT, TINY_TOKENS);
    server = await serve(site);
  });
  after(() => server && server.stop());

  test("the page loads with progress, streams the Python VM's greedy reply, and reloads from the cache", async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    const log = await recordPage(page);
    await page.goto(`${server.url}?temperature=0&max_tokens=${TINY_TOKENS}&backend=webgpu`);
    assert.equal(await waitForState(page, ["ready", "error"]), "ready", await page.textContent("#error-text"));
    const seen = await page.evaluate(() => window.__seen);
    assert.ok(seen.progress.some((line) => /MB of .* MB \(\d+%\)/.test(line)), `progress lines: ${seen.progress}`);
    assert.match(await page.textContent("#device"), /Running on WebGPU: .+ · 6\.\d MB of weights downloaded/);
    assert.match(await page.textContent("#device-reason"), /^WebGPU build: the page asked for WebGPU .*software renderer \(SwiftShader\)/);
    assert.ok(log.requests.some((url) => url.includes("params_shard_")), "the first load downloads the shards");

    const reply = await chatTurn(page, PROMPT, 120_000);
    assert.equal(reply, expected);
    const lengths = (await page.evaluate(() => window.__seen.replyLengths)).filter((n) => n > 0);
    assert.ok(lengths.length >= 3, `the reply should stream in pieces, saw lengths ${lengths}`);
    assert.match(await page.textContent("#stats"), /decode \d+(\.\d+)? tok\/s/);
    await page.screenshot({ path: join(ARTIFACTS, "chat-tiny.png"), fullPage: true });

    log.requests.length = 0;
    await page.reload();
    assert.equal(await waitForState(page, ["ready", "error"]), "ready");
    assert.deepEqual(log.requests.filter((url) => url.includes("params_shard_")), [], "a reload downloads no shard");
    assert.match(await page.textContent("#device"), /of weights from the browser cache/);
    assert.ok((await page.evaluate(() => window.__seen.progress)).some((line) => /from the cache/.test(line)));
    assert.deepEqual(log.errors, []);
    await context.close();
  });

  test("on the page's own thread (?worker=0) the reply is the same", async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(`${server.url}?temperature=0&max_tokens=${TINY_TOKENS}&worker=0&backend=webgpu`);
    assert.equal(await waitForState(page, ["ready", "error"]), "ready", await page.textContent("#error-text"));
    assert.equal(await chatTurn(page, PROMPT, 120_000), expected);
    await context.close();
  });

  test("by default on SwiftShader the page runs the WASM build, says why, and replies the same", async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    const log = await recordPage(page);
    await page.goto(`${server.url}?temperature=0&max_tokens=${TINY_TOKENS}`);
    assert.equal(await waitForState(page, ["ready", "error"]), "ready", await page.textContent("#error-text"));
    const why = "WASM build: the WebGPU adapter is a software renderer (SwiftShader), slower than WebAssembly on this CPU";
    const seen = await page.evaluate(() => window.__seen);
    assert.ok(seen.progress.includes(why), `progress lines: ${seen.progress}`);
    assert.match(await page.textContent("#device"), /^Running on WASM: WebAssembly SIMD on the CPU · /);
    assert.equal(await page.textContent("#device-reason"), why);
    assert.ok(log.requests.some((url) => url.endsWith("/wasm/kernels.wasm")));
    const webgpuBuild = log.requests.filter((url) => /\/webgpu\/(executable\.json|params_shard_|kernels)/.test(url));
    assert.deepEqual(webgpuBuild, [], "neither the WebGPU build's kernels nor its weights are fetched");
    assert.equal(await chatTurn(page, PROMPT, 120_000), expected);
    assert.deepEqual(log.errors, []);
    await context.close();
  });

  test("Stop ends a reply early and the chat goes on", async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(`${server.url}?temperature=0&max_tokens=200`);
    assert.equal(await waitForState(page, ["ready", "error"]), "ready");
    await page.fill("#input", PROMPT);
    await page.click("#send");
    await page.waitForFunction(() => (document.querySelector(".message.assistant")?.textContent.length ?? 0) > 0);
    await page.click("#stop");
    await page.waitForSelector(".message.assistant[data-done=true]", { timeout: 60_000 });
    assert.match(await page.textContent("#stats"), /^\d+ tokens/);
    const tokens = Number((await page.textContent("#stats")).split(" ")[0]);
    assert.ok(tokens < 200, `stopped after ${tokens} tokens`);
    assert.equal(await page.evaluate(() => document.body.dataset.state), "ready");
    await context.close();
  });

  test("without the Cache API the shards are kept in IndexedDB", async () => {
    const context = await browser.newContext();
    await context.addInitScript(() => { delete window.caches; });
    const page = await context.newPage();
    const log = await recordPage(page);
    for (const load of ["first", "reload"]) {
      log.requests.length = 0;
      await page.goto(`${server.url}?worker=0`);  // init scripts reach the page, not workers
      assert.equal(await waitForState(page, ["ready", "error"]), "ready", await page.textContent("#error-text"));
      const shards = log.requests.filter((url) => url.includes("params_shard_"));
      assert.equal(shards.length === 0, load === "reload", `${load} load fetched ${shards.length} shards`);
    }
    assert.equal(await page.evaluate(() => typeof window.caches), "undefined");
    assert.match(await page.textContent("#device"), /from the browser cache/);
    await context.close();
  });

  test("a phone-sized viewport fits the page", async () => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2 });
    const page = await context.newPage();
    await page.goto(`${server.url}?temperature=0&max_tokens=4`);
    assert.equal(await waitForState(page, ["ready", "error"]), "ready");
    await chatTurn(page, "Hi", 120_000);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page is ${overflow}px wider than the phone`);
    await page.screenshot({ path: join(ARTIFACTS, "chat-phone.png") });
    await context.close();
  });

  test("a corrupted shard is a clear error in the page", async () => {
    const context = await browser.newContext();
    await context.route("**/params_shard_0.bin", async (route) => {
      const response = await route.fetch();
      const body = Buffer.from(await response.body());
      body[body.length >> 1] ^= 0xff;  // one flipped byte, the size unchanged
      await route.fulfill({ response, body });
    });
    const page = await context.newPage();
    await page.goto(server.url);
    assert.equal(await waitForState(page, ["ready", "error"]), "error");
    assert.match(await page.textContent("#error-text"), /shard params_shard_0\.bin is corrupted: its SHA-256 is/);
    assert.ok(await page.isVisible("#error"));
    await context.close();
  });

  test("a missing file is a clear error in the page", async () => {
    const context = await browser.newContext();
    await context.route("**/tokenizer.json", (route) => route.fulfill({ status: 404, body: "not found" }));
    const page = await context.newPage();
    await page.goto(server.url);
    assert.equal(await waitForState(page, ["ready", "error"]), "error");
    assert.match(await page.textContent("#error-text"), /missing file .*tokenizer\.json \(HTTP 404\)/);
    await context.close();
  });

  test("without WebGPU the page runs the WASM build, says so, and replies the same", async () => {
    // Chromium without --enable-unsafe-webgpu on Linux: navigator.gpu is there, an adapter is not.
    const noWebGPU = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium",
      args: CHROMIUM_FLAGS.filter((flag) => flag !== "--enable-unsafe-webgpu") });
    const context = await noWebGPU.newContext();
    const page = await context.newPage();
    const log = await recordPage(page);
    await page.goto(`${server.url}?temperature=0&max_tokens=${TINY_TOKENS}`);
    assert.equal(await waitForState(page, ["ready", "error"]), "ready", await page.textContent("#error-text"));
    assert.match(await page.textContent("#device"), /^Running on WASM: WebAssembly SIMD on the CPU · /);
    assert.match(await page.textContent("#device-reason"), /^WASM build: no usable WebGPU: .*no adapter/);
    assert.ok(log.requests.some((url) => url.endsWith("/wasm/kernels.wasm")));
    assert.equal(await chatTurn(page, PROMPT, 120_000), expected);
    await page.screenshot({ path: join(ARTIFACTS, "chat-tiny-wasm.png"), fullPage: true });
    await noWebGPU.close();
  });
});

// Issue 17, item 5: a conversation past the context goes on; the page says the oldest messages were
// left out, greys them, and keeps answering.
describe("a conversation past the context", () => {
  let server;

  before(async () => {
    server = await serve(bundle("tiny-site-context-64", tinyGGUF(), 64, "wasm"));
  });
  after(() => server && server.stop());

  test("goes on, and the page tells which messages were left out", async () => {
    const context = await browser.newContext({ viewport: { width: 1000, height: 900 } });  // all of it in the screenshot
    const page = await context.newPage();
    const log = await recordPage(page);
    await page.goto(`${server.url}?temperature=0&max_tokens=8`);
    assert.equal(await waitForState(page, ["ready", "error"]), "ready", await page.textContent("#error-text"));
    assert.equal(await page.isVisible("#notice"), false);
    const questions = ["Hello there", "What is the capital of France?", "And of Italy?", "Tell me more about it",
      "Why is that?", "One more question, please"];
    for (const [turn, question] of questions.entries()) {
      await page.fill("#input", question);
      await page.click("#send");
      await page.waitForFunction((n) => document.querySelectorAll(".message.assistant[data-done=true]").length === n,
        turn + 1, { timeout: 120_000 });
      await waitForState(page, ["ready"]);
      assert.doesNotMatch(await page.textContent("#stats"), /^error/, `turn ${turn + 1}`);
    }
    const replies = await page.$$eval(".message.assistant", (elements) => elements.map((e) => e.textContent));
    assert.equal(replies.length, questions.length);
    assert.ok(replies.every((reply) => reply.length > 0), JSON.stringify(replies));
    assert.ok(await page.isVisible("#notice"));
    assert.match(await page.textContent("#notice"),
      /^Note: the conversation no longer fits the model's context of 64 tokens: the \d+ oldest messages were left out\.$/);
    const dropped = await page.$$eval(".message.dropped", (elements) => elements.map((e) => e.className));
    assert.ok(dropped.length >= 2 && dropped.length < 2 * questions.length, JSON.stringify(dropped));
    assert.equal(await page.$eval(".message", (first) => first.classList.contains("dropped")), true, "the oldest goes first");
    await page.screenshot({ path: join(ARTIFACTS, "chat-past-the-context.png"), fullPage: true });
    assert.deepEqual(log.errors, []);
    await context.close();
  });
});

describe("SmolLM2-135M-Instruct", () => {
  let server, expected;
  const question = "What is the capital of France?";

  before(async () => {
    const site = bundle("smollm2-site", undefined, 256);
    expected = pythonGreedyReply(join(site, "models", "SmolLM2-135M-Instruct.Q4_1", "webgpu"), question, 10);
    server = await serve(site);
  });
  after(() => server && server.stop());

  test("answers in the browser as the Python VM does", async () => {
    assert.equal(expected, "The capital of France is Paris.");
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(`${server.url}?temperature=0&max_tokens=10&backend=webgpu`);
    assert.equal(await waitForState(page, ["ready", "error"]), "ready", await page.textContent("#error-text"));
    assert.equal(await chatTurn(page, question, 300_000), expected);
    await page.screenshot({ path: join(ARTIFACTS, "chat-smollm2.png"), fullPage: true });
    await context.close();
  });
});

// More of the GGUF zoo (issue 16, item 11): Qwen2 (a 151,936-token vocabulary, ChatML) and a Llama
// 2-style SentencePiece model ([INST] with <s>), on the page's WebGPU build as in the Python VM's.
for (const family of ["qwen2", "llama-spm"]) {
  describe(`the GGUF zoo: ${family}`, () => {
    let server, expected, id;
    const question = "What is the capital of France?";

    before(async () => {
      const site = bundle(`zoo-${family}-site`, zooGGUF(family), 64);
      id = `zoo-${family}`;
      expected = pythonGreedyReply(join(site, "models", id, "webgpu"), question, TINY_TOKENS);
      server = await serve(site);
    });
    after(() => server && server.stop());

    test("answers in the browser's WebGPU build as the Python VM does", async () => {
      const context = await browser.newContext();
      const page = await context.newPage();
      await page.goto(`${server.url}?temperature=0&max_tokens=${TINY_TOKENS}&backend=webgpu`);
      assert.equal(await waitForState(page, ["ready", "error"]), "ready", await page.textContent("#error-text"));
      assert.match(await page.textContent("#device"), /^Running on WebGPU/);
      assert.equal(await chatTurn(page, question, 300_000), expected);
      await page.screenshot({ path: join(ARTIFACTS, `chat-zoo-${family}.png`), fullPage: true });
      await context.close();
    });
  });
}
