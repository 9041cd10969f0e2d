// The frame interpreter on the WASM VM in Node: every program of tests/fixtures/js_programs.py
// (kernels compiled by Tessera, functions written in the version-3 instruction set) passes its
// check in program-checks.mjs; a missing library fails the load, naming it.
import assert from "node:assert/strict";
import { join } from "node:path";
import { before, test } from "node:test";
import { pathToFileURL } from "node:url";

import { loadBuild, VirtualMachine, WasmDevice } from "../../runtime-js/src/tessera.js";
import { fileFetch, NO_CACHE, ROOT, tessera } from "../browser/bundle.mjs";
import { CHECKS, TEST_LIBRARIES } from "./program-checks.mjs";

const FOLDER = join(ROOT, "build", "js-programs");

/** @param {string} program @param {Record<string, Function>} [libraries] */
async function open(program, libraries = TEST_LIBRARIES) {
  const url = pathToFileURL(join(FOLDER, "wasm", program)).href + "/";
  const { executable, weights, modules } = await loadBuild(url, { fetchFn: fileFetch, cache: NO_CACHE });
  return VirtualMachine.create(new WasmDevice(), executable, weights, modules, { libraries });
}

before(() => {
  tessera([join(ROOT, "tests", "fixtures", "js_programs.py"), FOLDER, "wasm"], "python");
});

for (const [program, check] of Object.entries(CHECKS)) {
  test(`program ${program}`, async () => {
    await check(await open(program));
  });
}

test("a library the executable lists must be registered, and builtins cannot be replaced", async () => {
  await assert.rejects(open("library", { "tessera.test.double": TEST_LIBRARIES["tessera.test.double"] }),
    /the executable calls the library function 'tessera.test.iota', which is not registered/);
  await assert.rejects(open("unique", { "tessera.builtin.unique": () => 0 }), /is a builtin of the runtime and cannot be replaced/);
  const url = pathToFileURL(join(FOLDER, "wasm", "library")).href + "/";
  await assert.rejects(loadBuild(url, { fetchFn: fileFetch, cache: NO_CACHE, libraries: {} }), /'tessera.test.double', which is not registered/);
});

test("a library's failure names the function and the library", async () => {
  const vm = await open("library", { ...TEST_LIBRARIES, "tessera.test.iota": () => { throw new Error("out of ideas"); } });
  await assert.rejects(vm.run("main", new (await import("../../runtime-js/src/tessera.js")).HostTensor(Float32Array.of(1), [1])),
    /main: the library function tessera.test.iota failed: out of ideas/);
});
