// The chat page's WASM build on threads in Debian's Chromium: served by `tessera serve` (COOP/COEP, so
// the page is cross-origin isolated) it runs on a pool of Web Workers over one shared memory, from the
// engine's own worker and from the page's thread, and replies with the Python VM's tokens (the
// single-threaded kernels.wasm under wasmtime); the same site served without the headers runs on one
// thread, says why, and replies the same.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { extname, join, normalize } from "node:path";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";

import { bundle, pythonGreedyReply, serve, tinyGGUF } from "./bundle.mjs";
import { CHROMIUM_FLAGS } from "./chromium.mjs";

const PROMPT = "Hello there";
const TOKENS = 16;
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".json": "application/json", ".wasm": "application/wasm",
  ".css": "text/css" };
let browser, site, server, plain, expected;

before(async () => {
  site = bundle("tiny-site-wasm-threads", tinyGGUF(), 256, "wasm");
  expected = pythonGreedyReply(join(site, "models", "tiny", "wasm"), PROMPT, TOKENS);
  server = await serve(site);
  plain = await servePlain(site);
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium", args: CHROMIUM_FLAGS });
});
after(async () => {
  await browser?.close();
  server?.stop();
  plain?.close();
});

/** The site's files with their content types and nothing else: no COOP/COEP, as a plain static host serves them. */
async function servePlain(root) {
  const http = createServer(async (request, response) => {
    let path = normalize(join(root, decodeURIComponent(new URL(request.url, "http://127.0.0.1").pathname)));
    if (path.endsWith("/")) path += "index.html";
    if (!path.startsWith(root)) return response.writeHead(404).end();
    try {
      response.writeHead(200, { "content-type": TYPES[extname(path)] ?? "application/octet-stream" }).end(await readFile(path));
    } catch {
      response.writeHead(404).end();
    }
  });
  await new Promise((resolve) => http.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${http.address().port}/`, close: () => http.close() };
}

/** One greedy turn on the page at ``url``: the reply, what #device says, whether the page is isolated. */
async function reply(url) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (error) => errors.push(error.message));
  await page.goto(url);
  await page.waitForFunction(() => ["ready", "error"].includes(document.body.dataset.state), null, { timeout: 180_000 });
  assert.equal(await page.evaluate(() => document.body.dataset.state), "ready", await page.textContent("#error-text"));
  await page.fill("#input", PROMPT);
  await page.click("#send");
  await page.waitForSelector(".message.assistant[data-done=true]", { timeout: 180_000 });
  const result = { text: await page.textContent(".message.assistant"), device: await page.textContent("#device"),
    isolated: await page.evaluate(() => globalThis.crossOriginIsolated) };
  assert.deepEqual(errors, []);
  await context.close();
  return result;
}

test("served by tessera serve, the page runs the WASM build on 2 and 3 threads with the one-thread tokens", async () => {
  const query = `?temperature=0&max_tokens=${TOKENS}&backend=wasm`;
  for (const [extra, threads] of [["&threads=2", 2], ["&threads=3&worker=0", 3], ["&threads=1", 1]]) {
    const got = await reply(`${server.url}${query}${extra}`);
    assert.equal(got.isolated, true);
    assert.equal(got.text, expected, extra);
    if (threads > 1) assert.match(got.device, new RegExp(`^Running on WASM: WebAssembly SIMD on the CPU · .* · ${threads} threads \\(Web Workers over one shared memory\\)$`));
    else assert.match(got.device, / · one thread was asked for$/);
  }
});

test("served without COOP/COEP, the page runs on one thread, says why, and replies the same", async () => {
  const got = await reply(`${plain.url}?temperature=0&max_tokens=${TOKENS}&backend=wasm&threads=4`);
  assert.equal(got.isolated, false);
  assert.match(got.device, / · the page is not cross-origin isolated \(it is served without the headers Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp; docs\/web\.md\), so WebAssembly runs on one thread$/);
  assert.equal(got.text, expected);
});
