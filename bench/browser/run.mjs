// Drive the benchmark pages in Debian's Chromium: for each engine, a cold run (fresh profile: the
// weights are downloaded) then a cached run (a reload), each one greedy reply. Prints JSON lines.
// Usage: node bench/browser/run.mjs SITE_URL TESSERA_MODEL_URL GGUF_URL [engines]
//
// Each engine gets a browser of its own, so that its memory is its own: the proportional set size
// (PSS: resident memory, shared pages divided among their sharers, so that the sum counts each
// page once) of every process of that browser (browser, GPU, renderers), summed, is sampled every
// 100 ms; a run reports the peak of that sum, and the sum with a blank page open before it (idle).

import { chromium } from "playwright-core";

import { CHROMIUM_FLAGS } from "../../tests/browser/chromium.mjs";
import { browserResidentBytes, samplePeak } from "./pss.mjs";

const [siteUrl, tesseraModel, ggufUrl, only] = process.argv.slice(2);
// bench/browser.py passes a long prompt (--prompt-tokens) and the context it sized both engines for.
const PROMPT = process.env.BENCH_PROMPT || "Write a short story about a cat who learns to swim.";
const CONTEXT = Number(process.env.BENCH_CONTEXT ?? 512);
const MAX_TOKENS = Number(process.env.BENCH_TOKENS ?? 24);
// The "-threads" engines run on BENCH_THREADS threads (the site is cross-origin isolated: `tessera serve`);
// the others on one.
const THREADS = Number(process.env.BENCH_THREADS ?? 2);
const engines = [
  { name: "tessera-webgpu", page: "tessera.html", args: { model: tesseraModel, backend: "webgpu" } },
  { name: "tessera-wasm", page: "tessera.html", args: { model: tesseraModel, backend: "wasm", threads: 1 } },
  { name: "tessera-wasm-threads", page: "tessera.html", args: { model: tesseraModel, backend: "wasm", threads: THREADS } },
  { name: "wllama-wasm", page: "wllama.html", args: { model: ggufUrl, threads: 1 } },
  { name: "wllama-wasm-threads", page: "wllama.html", args: { model: ggufUrl, threads: THREADS } },
].filter((e) => (only ? only.split(",").includes(e.name) : !e.name.endsWith("-threads")));

const MIB = 1024 * 1024;
for (const engine of engines) {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium", args: CHROMIUM_FLAGS });
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(30 * 60 * 1000);  // a long prompt's prefill on one CPU thread takes minutes
  page.on("pageerror", (error) => console.error(`${engine.name}: ${error.message}`));
  // BENCH_ROUNDS cached runs after the cold one: bench/browser.py reports their median (a busy machine).
  for (const run of ["cold", ...Array(Number(process.env.BENCH_ROUNDS ?? 1)).fill("cached")]) {
    await page.goto("about:blank");
    const idle = browserResidentBytes();
    const stop = samplePeak();
    await page.goto(siteUrl + engine.page);
    await page.waitForFunction(() => window.benchReady === true);
    const result = await page.evaluate((args) => window.runBench(args), { ...engine.args, prompt: PROMPT, maxTokens: MAX_TOKENS, context: CONTEXT });
    const peak = await stop();
    console.log(JSON.stringify({ ...result, engine: engine.name, run, peakMiB: peak / MIB, idleMiB: idle / MIB }));
  }
  await browser.close();
}
