// Drive the benchmark pages in Debian's Chromium: for each engine, a cold run (fresh profile: the
// weights are downloaded) then a cached run (a reload), each one greedy reply. Prints JSON lines.
// Usage: node bench/browser/run.mjs SITE_URL TESSERA_MODEL_URL GGUF_URL [engines]
import { chromium } from "playwright-core";

import { CHROMIUM_FLAGS } from "../../tests/browser/chromium.mjs";

const [siteUrl, tesseraModel, ggufUrl, only] = process.argv.slice(2);
// bench/browser.py passes a long prompt (--prompt-tokens) and the context it sized both engines for.
const PROMPT = process.env.BENCH_PROMPT || "Write a short story about a cat who learns to swim.";
const CONTEXT = Number(process.env.BENCH_CONTEXT ?? 512);
const MAX_TOKENS = Number(process.env.BENCH_TOKENS ?? 24);
const engines = [
  { name: "tessera-webgpu", page: "tessera.html", args: { model: tesseraModel, backend: "webgpu" } },
  { name: "tessera-wasm", page: "tessera.html", args: { model: tesseraModel, backend: "wasm" } },
  { name: "wllama-wasm", page: "wllama.html", args: { model: ggufUrl } },
].filter((e) => !only || only.split(",").includes(e.name));

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium", args: CHROMIUM_FLAGS });
for (const engine of engines) {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(30 * 60 * 1000);  // a long prompt's prefill on one CPU thread takes minutes
  page.on("pageerror", (error) => console.error(`${engine.name}: ${error.message}`));
  for (const run of ["cold", "cached"]) {
    await page.goto(siteUrl + engine.page);
    await page.waitForFunction(() => window.benchReady === true);
    const result = await page.evaluate((args) => window.runBench(args), { ...engine.args, prompt: PROMPT, maxTokens: MAX_TOKENS, context: CONTEXT });
    console.log(JSON.stringify({ ...result, run }));
  }
  await context.close();
}
await browser.close();
