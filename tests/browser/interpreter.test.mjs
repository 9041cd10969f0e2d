// The frame interpreter on the WebGPU VM in Chromium (SwiftShader): the programs of
// tests/fixtures/js_programs.py pass the same checks as on the WASM VM in Node
// (tests/js/program-checks.mjs), each on a device made for its executable.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { CHECKS } from "../js/program-checks.mjs";
import { ROOT, tessera } from "./bundle.mjs";
import { openWebGPUPage, serveFolders } from "./chromium.mjs";

const FOLDER = join(ROOT, "build", "js-programs");
const SERVED = ["runtime-js/src/", "tests/js/", "build/js-programs/"].map((p) => join(ROOT, p));
let session;

/** In the page: load one program on a fresh device and run its check; the error text or null. */
async function runInPage(program) {
  const { CHECKS: checks, TEST_LIBRARIES } = await import("/tests/js/program-checks.mjs");
  const { loadBuild, requestDeviceFor, VirtualMachine, WebGPUDevice } = await import("/runtime-js/src/tessera.js");
  const none = { kind: "none", get: async () => undefined, put: async () => undefined };
  const { executable, weights, modules } = await loadBuild(`/build/js-programs/webgpu/${program}/`, { cache: none });
  const { device } = await requestDeviceFor(executable);
  const errors = [];
  device.addEventListener("uncapturederror", (event) => errors.push(event.error.message));
  try {
    const vm = await VirtualMachine.create(new WebGPUDevice(device), executable, weights, modules, { libraries: TEST_LIBRARIES });
    await checks[program](vm);
    await device.queue.onSubmittedWorkDone();
  } catch (error) {
    errors.push(error.message);
  } finally {
    device.destroy();
  }
  return errors.length ? errors.join("; ") : null;
}

before(async () => {
  tessera([join(ROOT, "tests", "fixtures", "js_programs.py"), FOLDER, "webgpu"], "python");
  session = await openWebGPUPage(serveFolders(ROOT, SERVED));
});

after(async () => {
  await session?.close();
});

for (const program of Object.keys(CHECKS)) {
  test(`program ${program} on WebGPU`, { timeout: 120_000 }, async () => {
    assert.equal(await session.page.evaluate(runInPage, program), null);
  });
}
