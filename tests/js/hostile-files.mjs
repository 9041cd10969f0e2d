// Feeds runtime-js's loader the hostile files of tests/fixtures/hostile_files.py (driven by
// tests/js/test_hostile_files_js.py): each case is loaded as a page would load it, over a fetch that
// serves FOLDER_URL from a folder on disk with the case's documents in place of the real ones and
// records every URL asked for.
//
//   node tests/js/hostile-files.mjs CASES.json  ->  one result per case on stdout (JSON)
//
// A case: {label, kind: "build" | "bundle" | "chat-config", folder, files: {name: text}, ...}. A result:
// {label, refused, name, message, urls, outside} (``outside``: URLs asked for outside the case's folder).
// A build case may also ask for its plan to be checked against devices: ``fit`` ([storage alignment,
// workgroups] of a WebGPU device, checked without one) and ``wasm`` (the WASM VM made, and main run on
// ``input`` when it is): then ``fitRefused``/``fitMessage``, ``vmRefused``/``vmName``/``vmMessage`` and
// ``output`` (main's result, as a plain array).
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { validateChatConfig } from "../../runtime-js/src/format.js";
import { HostTensor } from "../../runtime-js/src/host.js";
import { loadBuild, loadBundleIndex } from "../../runtime-js/src/loader.js";
import { checkDeviceFit, webgpuFit } from "../../runtime-js/src/plan-checks.js";
import { WasmDevice } from "../../runtime-js/src/devices/index.js";
import { VirtualMachine } from "../../runtime-js/src/vm.js";

const ROOT = "http://bundle.test/models/m/";

/** @param {any} spec */
function server(spec) {
  const urls = /** @type {string[]} */ ([]);
  const fetchFn = async (/** @type {string} */ url) => {
    urls.push(url);
    if (!url.startsWith(ROOT)) return new Response("outside", { status: 404 });
    const name = decodeURIComponent(new URL(url).pathname.slice(new URL(ROOT).pathname.length));
    if (Object.hasOwn(spec.files, name)) return new Response(spec.files[name]);
    try {
      return new Response(readFileSync(join(spec.folder, name)));
    } catch {
      return new Response("not found", { status: 404 });
    }
  };
  return { urls, fetchFn };
}

const memoryCache = () => {
  const entries = new Map();
  return { kind: "memory", get: async (/** @type {string} */ k) => entries.get(k), put: async (/** @type {string} */ k, /** @type {any} */ v) => { entries.set(k, v); } };
};

/** @param {any} spec */
async function run(spec) {
  const { urls, fetchFn } = server(spec);
  let refused = false, name = null, message = null;
  /** @type {any} */
  const device = {};
  try {
    if (spec.kind === "build") {
      const loaded = await loadBuild(`${ROOT}${spec.build ?? ""}`, { fetchFn, cache: memoryCache() });
      if (spec.fit || spec.wasm) Object.assign(device, await onDevices(spec, loaded));
    } else if (spec.kind === "bundle") {
      await loadBundleIndex(ROOT, fetchFn);
    } else if (spec.kind === "chat-config") {
      validateChatConfig(spec.doc, "chat-config.json", new Set(spec.ids));
    }
  } catch (error) {
    refused = true;
    name = /** @type {Error} */ (error).name;
    message = /** @type {Error} */ (error).message;
  }
  const outside = urls.filter((url) => !url.startsWith(ROOT));
  return { label: spec.label, refused, name, message, urls, outside, ...device };
}

/** What the devices a build case asks for make of its plan. @param {any} spec @param {any} loaded */
async function onDevices(spec, loaded) {
  /** @type {any} */
  const out = { fitRefused: false, fitMessage: null, vmRefused: false, vmName: null, vmMessage: null, output: null };
  if (spec.fit) {
    const [storageAlignment, workgroups] = spec.fit;
    try {
      checkDeviceFit(loaded.executable, [webgpuFit({ minStorageBufferOffsetAlignment: storageAlignment, maxComputeWorkgroupsPerDimension: workgroups })],
        "executable.json", (message) => new Error(message));
    } catch (error) {
      [out.fitRefused, out.fitMessage] = [true, /** @type {Error} */ (error).message];
    }
  }
  if (spec.wasm) {
    let vm;
    try {
      vm = await VirtualMachine.create(new WasmDevice(), loaded.executable, loaded.weights, loaded.modules);
    } catch (error) {
      [out.vmRefused, out.vmName, out.vmMessage] = [true, /** @type {Error} */ (error).name, /** @type {Error} */ (error).message];
    }
    if (vm && spec.input) {
      const result = await vm.run("main", new HostTensor(Float32Array.from(spec.input.data), spec.input.shape));
      out.output = Array.from(/** @type {any} */ (result).data);
    }
  }
  return out;
}

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
const results = [];
for (const spec of cases) results.push(await run(spec));
process.stdout.write(JSON.stringify(results));
