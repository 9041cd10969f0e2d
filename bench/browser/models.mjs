// One engine on one model in headless Chromium, for bench/models.py: Tessera's WASM build through
// runtime-js's InferenceSession, or onnxruntime-web's WASM backend on the ONNX file. Prints one JSON line.
// Usage: node bench/browser/models.mjs CONFIG_JSON, where the config (written by bench/models.py) names:
//   engine ("browser-tessera" | "browser-ort"), threads, seconds, minCalls, and, as paths below the
//   repository root: build (Tessera's wasm build folder), onnx (the model file), inputs and outputs
//   ([{name, type, dims, file}]: raw little-endian files; outputs are onnxruntime's, float32), with rtol.
//
// The page is served here, from the repository root (only the folders the run needs), with COOP/COEP
// headers: cross-origin isolated, so SharedArrayBuffer exists and onnxruntime-web can run 2 threads
// (unless config.isolated is false).
// The first call's outputs are checked against onnxruntime's in the page (|got - want| <= atol + rtol
// |want|, atol as the model tests: 1e-4 or 1e-5 of the largest output) before any call is timed. The
// browser's memory is the peak of its processes' summed PSS (pss.mjs), sampled every 100 ms.
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { dirname, extname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

import { CHROMIUM_FLAGS } from "../../tests/browser/chromium.mjs";
import { samplePeak } from "./pss.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const config = JSON.parse(process.argv[2]);
const TYPES = { ".js": "text/javascript", ".mjs": "text/javascript", ".json": "application/json", ".wasm": "application/wasm",
  ".html": "text/html" };
// config.isolated false: no isolation, so no SharedArrayBuffer (Tessera's 1-thread row).
const ISOLATION = config.isolated === false ? {} : { "cross-origin-opener-policy": "same-origin",
  "cross-origin-embedder-policy": "require-corp", "cross-origin-resource-policy": "same-origin" };

const served = [join(ROOT, "bench", "browser"), join(ROOT, "runtime-js", "src"), join(ROOT, "node_modules", "onnxruntime-web", "dist"),
  join(ROOT, dirname(config.onnx)), join(ROOT, config.build), join(ROOT, dirname(config.inputs[0].file))]
  .map((folder) => normalize(folder) + "/");

const server = createServer(async (request, response) => {
  const path = normalize(join(ROOT, decodeURIComponent(new URL(request.url, "http://127.0.0.1").pathname)));
  if (!served.some((prefix) => path.startsWith(prefix))) {
    response.writeHead(404, ISOLATION).end();
    return;
  }
  try {
    const body = await readFile(path);
    response.writeHead(200, { ...ISOLATION, "content-type": TYPES[extname(path)] ?? "application/octet-stream" }).end(body);
  } catch {
    response.writeHead(404, ISOLATION).end();
  }
});
await new Promise((done) => server.listen(0, "127.0.0.1", done));
const origin = `http://127.0.0.1:${server.address().port}`;

/** In the page: load the engine, check its first call against onnxruntime's outputs, time calls. */
async function inPage(config) {
  const ARRAYS = { float32: Float32Array, int64: BigInt64Array, int32: Int32Array };
  const fetchArray = async (entry) => new ARRAYS[entry.type](await (await fetch("/" + entry.file)).arrayBuffer());
  const inputs = await Promise.all(config.inputs.map(fetchArray));
  const started = performance.now();
  let run, threads = config.threads;
  if (config.engine === "browser-ort") {
    const ort = await import("/node_modules/onnxruntime-web/dist/ort.wasm.min.mjs");
    ort.env.wasm.numThreads = config.threads;
    ort.env.wasm.wasmPaths = "/node_modules/onnxruntime-web/dist/";
    const session = await ort.InferenceSession.create("/" + config.onnx, { executionProviders: ["wasm"] });
    const feeds = Object.fromEntries(config.inputs.map((e, i) => [e.name, new ort.Tensor(e.type, inputs[i], e.dims)]));
    run = async () => {
      const out = await session.run(feeds);
      return session.outputNames.map((name) => out[name].data);
    };
  } else {
    const { InferenceSession, Tensor } = await import("/runtime-js/src/tessera.js");
    const session = await InferenceSession.create("/" + config.build + "/", { device: "wasm" });
    threads = session.vm.device.threads ?? 1;  // a threaded WASM device says how many it runs
    const feeds = Object.fromEntries(config.inputs.map((e, i) => [e.name, new Tensor(e.type, inputs[i], e.dims)]));
    run = async () => {
      const out = await session.run(feeds);
      return session.outputNames.map((name) => out[name].data);
    };
  }
  const loadSeconds = (performance.now() - started) / 1e3;
  const got = await run();
  let worst = 0;
  for (const [index, entry] of config.outputs.entries()) {
    const want = await fetchArray(entry);
    if (got[index].length !== want.length) throw new Error(`output ${index} has ${got[index].length} values, onnxruntime's ${want.length}`);
    let largest = 0;
    for (const w of want) largest = Math.max(largest, Math.abs(w));
    const atol = Math.max(1e-4, 1e-5 * largest);
    for (let k = 0; k < want.length; k++) {
      const ratio = Math.abs(Number(got[index][k]) - want[k]) / (atol + config.rtol * Math.abs(want[k]));
      if (!(ratio <= worst)) worst = Number.isNaN(ratio) ? Infinity : ratio;
    }
  }
  if (!(worst <= 1)) throw new Error(`outputs differ from onnxruntime's: ${worst.toFixed(2)} times the tolerance`);
  const times = [];
  while (times.length < config.minCalls || times.reduce((a, b) => a + b, 0) < config.seconds) {
    const start = performance.now();
    await run();
    times.push((performance.now() - start) / 1e3);
  }
  times.sort((a, b) => a - b);
  const median = times.length % 2 ? times[(times.length - 1) / 2] : (times[times.length / 2 - 1] + times[times.length / 2]) / 2;
  return { s: median, calls: times.length, worst, loadSeconds, threads, isolated: self.crossOriginIsolated,
    agent: navigator.userAgent.match(/Chrome\/[\d.]+/)?.[0] };
}

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium", args: CHROMIUM_FLAGS });
let result;
try {
  const page = await (await browser.newContext()).newPage();
  page.setDefaultTimeout(60 * 60 * 1000);
  page.on("pageerror", (error) => console.error(`page: ${error.message}`));
  await page.goto(`${origin}/bench/browser/models.html`);
  const stop = samplePeak();
  const measured = await page.evaluate(inPage, config);
  const peak = await stop();
  result = { ...measured, peakMiB: peak / (1024 * 1024) };
} catch (error) {
  result = { error: String(error.message ?? error).split("\n")[0] };
} finally {
  await browser.close();
  server.close();
}
console.log("RESULT " + JSON.stringify(result));
