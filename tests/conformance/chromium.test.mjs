// The conformance adapter of runtime-js's WebGPU VM in Chromium (SwiftShader on a machine without
// a GPU), driven by Playwright: every case folder of a target whose kernels are WGSL, served on
// 127.0.0.1 with the runtime's sources, loaded in the page by loadBuild and run by VirtualMachine
// on a device from requestDeviceFor. Targets of other backends (c-wasm) are the Node adapter's.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { dirname, extname, join, normalize } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import { openWebGPUPage } from "../browser/chromium.mjs";
import { casesFor, readIndex, reportLine } from "./runner.mjs";

const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
// What the page may read: the runtime, this folder's runner, and the cases.
const SERVED = ["runtime-js/src/", "tests/conformance/", "build/conformance/"].map((p) => join(REPO, p));
const TYPES = { ".js": "text/javascript", ".mjs": "text/javascript", ".json": "application/json", ".wasm": "application/wasm",
  ".wgsl": "text/plain" };
// Cases this runtime cannot run, by name, with the reason; printed on every run.
const UNSUPPORTED = {};

/** Answer a request with a file under SERVED, or 404. */
async function serveFile(request, response) {
  const path = normalize(join(REPO, decodeURIComponent(new URL(request.url, "http://127.0.0.1").pathname)));
  if (!SERVED.some((prefix) => path.startsWith(prefix))) {
    response.writeHead(404).end();
    return;
  }
  try {
    const body = await readFile(path);
    response.writeHead(200, { "content-type": TYPES[extname(path)] ?? "application/octet-stream" }).end(body);
  } catch {
    response.writeHead(404).end();
  }
}

/** In the page: open the folder's executable on a WebGPU device made for it, and run the case. */
async function runInPage(folderUrl) {
  const { checkCase, NO_CACHE, TEST_LIBRARIES } = await import("/tests/conformance/runner.mjs");
  const { loadBuild, requestDeviceFor, VirtualMachine, WebGPUDevice } = await import("/runtime-js/src/tessera.js");
  let device;
  const errors = [];
  const report = await checkCase(folderUrl, fetch, async (folder) => {
    const { executable, weights, modules } = await loadBuild(folder, { cache: NO_CACHE });
    ({ device } = await requestDeviceFor(executable));
    device.addEventListener("uncapturederror", (event) => errors.push(event.error.message));
    const vm = await VirtualMachine.create(new WebGPUDevice(device), executable, weights, modules, { libraries: TEST_LIBRARIES });
    return { run: (name, args) => vm.run(name, ...args) };
  });
  if (device) {
    await device.queue.onSubmittedWorkDone();
    device.destroy();
  }
  for (const message of errors) {
    report.passed = false;
    report.failures.push(`WebGPU error: ${message}`);
  }
  return report;
}

const index = await readIndex(pathToFileURL(join(REPO, "build", "conformance") + "/").href, async (url) => {
  try {
    return new Response(await readFile(fileURLToPath(url)));
  } catch {
    return new Response("not found", { status: 404 });
  }
}).catch((error) => {
  test("the conformance build is there", () => { throw error; });
  return null;
});

if (index) {
  const cases = casesFor(index, "wgsl");
  const reports = [];
  let session;
  before(async () => {
    session = await openWebGPUPage(serveFile);  // the page's origin serves the runtime and the cases
  });
  after(async () => {
    await session?.close();
    const passed = reports.filter((r) => r.passed).length;
    console.log(`conformance, runtime-js WebGPU in Chromium: ${passed} of ${reports.length} cases pass\n` +
      reports.map(reportLine).join("\n"));
  });

  test("the index has WGSL cases and the unsupported list names only cases it has", () => {
    assert.ok(cases.length > 0, "no target of build/conformance/index.json has WGSL kernels");
    for (const name of Object.keys(UNSUPPORTED)) assert.ok(name in index.cases, `UNSUPPORTED names ${name}, which is no case`);
  });
  for (const [name, reason] of Object.entries(UNSUPPORTED)) {
    console.log(`conformance, runtime-js WebGPU in Chromium: not run: ${name}: ${reason}`);
  }
  for (const [target, name] of cases) {
    if (name in UNSUPPORTED) continue;
    test(`${target}/${name}`, { timeout: 180_000 }, async () => {
      const report = await session.page.evaluate(runInPage, `${session.url}build/conformance/${target}/${name}/`);
      reports.push(report);
      assert.ok(report.passed, reportLine(report));
    });
  }
}
