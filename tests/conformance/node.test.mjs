// The conformance adapter of runtime-js's WebAssembly VM in Node: every case folder of a target
// whose kernels are c-wasm, loaded by loadBuild and run by the VM on a WasmDevice (no browser, no GPU).
// Targets of other backends (WGSL) are the Chromium adapter's.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import { loadBuild, VirtualMachine, WasmDevice } from "../../runtime-js/src/tessera.js";
import { casesFor, checkCase, NO_CACHE, readIndex, reportLine, TEST_LIBRARIES } from "./runner.mjs";

const ROOT = pathToFileURL(join(dirname(fileURLToPath(import.meta.url)), "..", "..", "build", "conformance") + "/").href;
// Cases this runtime cannot run, by name, with the reason; printed on every run.
const UNSUPPORTED = {};

/** fetch() over files: Node's own fetch has no file: URLs. */
async function fileFetch(url) {
  try {
    return new Response(await readFile(fileURLToPath(url)));
  } catch {
    return new Response("not found", { status: 404 });
  }
}

async function openRuntime(folderUrl) {
  const { executable, weights, modules } = await loadBuild(folderUrl, { fetchFn: fileFetch, cache: NO_CACHE });
  const vm = await VirtualMachine.create(new WasmDevice(), executable, weights, modules, { libraries: TEST_LIBRARIES });
  return { run: (name, args) => vm.run(name, ...args) };
}

let index;
try {
  index = await readIndex(ROOT, fileFetch);
} catch (error) {
  test("the conformance build is there", () => { throw error; });
}

if (index) {
  const cases = casesFor(index, "c-wasm");
  const reports = [];
  test("the index has c-wasm cases and the unsupported list names only cases it has", () => {
    assert.ok(cases.length > 0, `no target of ${ROOT}index.json has c-wasm kernels`);
    for (const name of Object.keys(UNSUPPORTED)) assert.ok(name in index.cases, `UNSUPPORTED names ${name}, which is no case`);
  });
  for (const [name, reason] of Object.entries(UNSUPPORTED)) console.log(`conformance, runtime-js WASM in Node: not run: ${name}: ${reason}`);
  for (const [target, name] of cases) {
    if (name in UNSUPPORTED) continue;
    test(`${target}/${name}`, { timeout: 120_000 }, async () => {
      const report = await checkCase(`${ROOT}${target}/${name}/`, fileFetch, openRuntime);
      reports.push(report);
      assert.ok(report.passed, reportLine(report));
    });
  }
  after(() => {
    const passed = reports.filter((r) => r.passed).length;
    console.log(`conformance, runtime-js WASM in Node: ${passed} of ${reports.length} cases pass\n` +
      reports.map(reportLine).join("\n"));
  });
}
