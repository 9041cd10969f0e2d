// The page `tessera bundle model.onnx` writes (web/infer), in Chromium: an ONNX classifier with labels in
// its metadata (tests/js/inference-session-fixtures.py --onnx) is bundled and served by `tessera serve`; a
// picture drawn in the page is dropped on it; the page shows the five top classes by name and the time
// taken, and what it computed on WebGPU (SwiftShader) and on WASM is onnxruntime's
// output for the very input the page fed; so for transformers' MobileNetV2 at its real size on WASM.
// Screenshots: build/artifacts/inference-page-*.png.
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";

import { ARTIFACTS, FIXTURES, ROOT, serve, tessera } from "./bundle.mjs";
import { CHROMIUM_FLAGS } from "./chromium.mjs";

const MODEL = join(FIXTURES, "classifier.onnx");
const SITE = join(FIXTURES, "inference-site");
const LABELS = ["cat", "dog", "fish", "bird", "frog"];
let server, browser;

/** In the page: a picture (gradients and a disc) as a PNG file, dropped on the drop zone as a user drops one. */
async function dropPicture() {
  const canvas = document.createElement("canvas");
  canvas.width = 64;
  canvas.height = 48;
  const context = canvas.getContext("2d");
  const gradient = context.createLinearGradient(0, 0, 64, 48);
  gradient.addColorStop(0, "#1e88e5");
  gradient.addColorStop(1, "#ffca28");
  context.fillStyle = gradient;
  context.fillRect(0, 0, 64, 48);
  context.fillStyle = "#d81b60";
  context.beginPath();
  context.arc(40, 20, 12, 0, 2 * Math.PI);
  context.fill();
  const blob = await new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
  const transfer = new DataTransfer();
  transfer.items.add(new File([blob], "picture.png", { type: "image/png" }));
  document.getElementById("drop").dispatchEvent(new DragEvent("drop", { dataTransfer: transfer, bubbles: true, cancelable: true }));
}

/** onnxruntime's output of ``model`` for ``input`` (flat) of ``dims``. */
function referenceOutput(model, input, dims) {
  const file = join(FIXTURES, "inference-page-input.json");
  writeFileSync(file, JSON.stringify({ input, dims }));
  const script = [
    "import json, sys, numpy as np", "import onnxruntime",
    "d = json.load(open(sys.argv[2]))", "x = np.array(d['input'], np.float32).reshape(d['dims'])",
    "print(json.dumps(onnxruntime.InferenceSession(sys.argv[1]).run(None, {'pixel_values': x})[0].reshape(-1).tolist()))",
  ].join("\n");
  return JSON.parse(tessera(["-c", script, model, file], "python"));
}

/** Open the page of the site ``url`` asking for ``device``, drop the picture on it, and wait for the result. */
async function classifyOnPage(url, device, query = "") {
  const page = await browser.newPage({ viewport: { width: 480, height: 720 } });
  const errors = [];
  page.on("pageerror", (error) => errors.push(error.message));
  await page.goto(`${url}?device=${device}${query}`);
  await page.waitForSelector("body[data-state=ready], body[data-state=error]");
  assert.equal(await page.getAttribute("body", "data-state"), "ready", await page.textContent("#error-text"));
  assert.match(await page.textContent("#device"), new RegExp(`\\(${device}\\)`));
  await page.evaluate(dropPicture);
  await page.waitForFunction(() => window.lastInference && document.body.dataset.state !== "running", null, { timeout: 240_000 });
  assert.equal(await page.getAttribute("body", "data-state"), "ready", await page.textContent("#error-text"));
  return { page, errors, result: await page.evaluate(() => window.lastInference) };
}

before(async () => {
  mkdirSync(FIXTURES, { recursive: true });
  tessera([join(ROOT, "tests", "js", "inference-session-fixtures.py"), "--onnx", MODEL], "python");
  tessera(["bundle", MODEL, "-o", SITE]);
  server = await serve(SITE);
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium", args: CHROMIUM_FLAGS });
});

after(async () => {
  await browser?.close();
  server?.stop();
});

for (const [device, query] of [["webgpu", ""], ["wasm", ""], ["wasm", "&worker=0"]]) {
  test(`the page classifies a dropped picture on ${device}${query ? " on the page's thread" : " in a Worker"}`, { timeout: 120_000 }, async () => {
    const { page, errors, result } = await classifyOnPage(server.url, device, query);
    assert.deepEqual(result.dims, [1, 3, 8, 8]);
    const expected = referenceOutput(MODEL, result.input, result.dims);
    result.output.forEach((v, i) => assert.ok(Math.abs(v - expected[i]) <= 1e-5 + 1e-4 * Math.abs(expected[i]), `${i}: ${v} vs ${expected[i]}`));
    const ranked = expected.map((p, i) => [p, i]).sort((a, b) => b[0] - a[0]).map(([, i]) => i);
    const items = await page.$$eval("#top li", (lis) => lis.map((li) => li.textContent));
    assert.equal(items.length, 5);
    items.forEach((text, k) => assert.match(text, new RegExp(`^${LABELS[ranked[k]]}: \\d+\\.\\d%$`)));
    assert.match(await page.textContent("#time"), /^\d+\.\d ms on /);
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, `inference-page-${device}${query ? "-main-thread" : ""}.png`), fullPage: true });
    assert.deepEqual(errors, []);
    await page.close();
  });
}

test("MobileNetV2 at its real size on the page (WASM): a 224 x 224 picture, class indices without labels", { timeout: 300_000 }, async () => {
  const folder = join(ROOT, "build", "inference-session-mobilenet");
  tessera([join(ROOT, "tests", "js", "inference-session-fixtures.py"), "--mobilenet", folder], "python");
  const site = join(FIXTURES, "inference-site-mobilenet");
  tessera(["bundle", join(folder, "model.onnx"), "-o", site, "--targets", "wasm"]);
  const mobilenet = await serve(site);
  try {
    const { page, errors, result } = await classifyOnPage(mobilenet.url, "wasm");
    assert.deepEqual(result.dims, [1, 3, 224, 224]);
    const expected = referenceOutput(join(folder, "model.onnx"), result.input, result.dims);
    result.output.forEach((v, i) => assert.ok(Math.abs(v - expected[i]) <= 1e-3 + 1e-3 * Math.abs(expected[i]), `${i}: ${v} vs ${expected[i]}`));
    const ranked = expected.map((p, i) => [p, i]).sort((a, b) => b[0] - a[0]).map(([, i]) => i);
    const items = await page.$$eval("#top li", (lis) => lis.map((li) => li.textContent));
    items.forEach((text, k) => assert.match(text, new RegExp(`^class ${ranked[k]}: \\d+\\.\\d%$`)));
    await page.screenshot({ path: join(ARTIFACTS, "inference-page-mobilenet-wasm.png"), fullPage: true });
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    mobilenet.stop();
  }
});
