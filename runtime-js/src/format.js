// Checks that the files of a bundle are what they claim to be (docs/format.md, docs/web.md)
// before anything is built from them, so that a wrong or stale file is a sentence, not a crash:
// the format and version first (with what to do about an old one), then the format's JSON Schema
// (schema.js), then what the schema cannot say (format-checks.js). The Python loader checks the same.

import { checkExecutable, checkTensorCache } from "./format-checks.js";
import { isInsidePath, pathProblem } from "./paths.js";
import { FormatError, schemaProblem } from "./schema.js";

export { FormatError, isInsidePath };

/** Executable versions this runtime reads: 3, and 4 for a build split across devices (devices/split.js). */
const EXECUTABLE_VERSIONS = [3, 4];
const TENSOR_CACHE_VERSION = 1;
const BUNDLE_VERSION = 2;

/** @param {boolean} ok @param {string} what @param {string} problem */
function expect(ok, what, problem) {
  if (!ok) throw new FormatError(`${what}: ${problem}`);
}

/** The document's first violation of its format's JSON Schema (docs/*.schema.json), as a FormatError.
 * @param {any} doc @param {string} format @param {string} what */
function expectSchema(doc, format, what) {
  const problem = schemaProblem(doc, format);
  if (problem) throw new FormatError(`${what} is malformed: ${problem}`);
}

/** The backends this runtime's devices run, by build kind. */
const BACKENDS = { webgpu: "wgsl", wasm: "c-wasm" };

/** @param {any} doc @param {string} what */
export function validateExecutable(doc, what = "executable.json") {
  expect(doc && typeof doc === "object" && !Array.isArray(doc), what, "not a JSON object");
  expect(doc.format === "tessera-executable", what, `not a Tessera executable (format ${JSON.stringify(doc.format)})`);
  expect(EXECUTABLE_VERSIONS.includes(doc.version), what,
    `format version ${doc.version}; this runtime reads versions ${EXECUTABLE_VERSIONS.join(" and ")}: rebuild the bundle with this Tessera`);
  expectSchema(doc, "executable", what);
  checkExecutable(doc, what);
  const known = Object.values(BACKENDS);
  for (const kernel of doc.kernels) {
    expect(known.includes(kernel.backend), what, `kernel ${kernel.name} is for the ${kernel.backend} backend; this runtime runs ${known.join(", ")}`);
  }
  if (doc.devices) expectDevicesRunHere(doc, what);
  return doc;
}

/**
 * A split build (version 4) runs here when each of its devices is one this runtime has (WebGPU, WASM),
 * at most one of each kind (a page has one WebGPU adapter and one WebAssembly memory), and each kernel
 * is for the backend of its device.
 * @param {any} doc @param {string} what
 */
function expectDevicesRunHere(doc, what) {
  /** @type {Set<string>} */
  const kinds = new Set();
  for (const device of doc.devices) {
    const name = device.vdevices[0] ?? `${device.kind}:${device.id}`;
    expect(Object.hasOwn(BACKENDS, device.kind), what,
      `device ${name} is a ${device.kind} device; this runtime runs ${Object.keys(BACKENDS).join(" and ")} devices`);
    expect(!kinds.has(device.kind), what, `the build is split across two ${device.kind} devices; this runtime runs one of each kind`);
    kinds.add(device.kind);
  }
  for (const kernel of doc.kernels) {
    const device = doc.devices[kernel.device ?? 0];
    const backend = /** @type {Record<string, string>} */ (BACKENDS)[device.kind];
    expect(kernel.backend === backend, what,
      `kernel ${kernel.name} is for the ${kernel.backend} backend but placed on ${device.vdevices[0]}, a ${device.kind} device (${backend})`);
  }
}

/** Whether every kernel of ``doc`` is for the backend a device of ``kind`` runs (false for a split build, which
 * runs on its devices together: devices/split.js). @param {any} doc @param {string} kind */
export function runsOn(doc, kind) {
  if (doc.devices) return false;
  const backend = /** @type {Record<string, string>} */ (BACKENDS)[kind];
  return doc.kernels.every((/** @type {any} */ k) => k.backend === backend);
}

/** @param {any} doc @param {string} what */
export function validateTensorCache(doc, what = "tensor-cache.json") {
  expect(doc && typeof doc === "object" && !Array.isArray(doc), what, "not a JSON object");
  expect(doc.format === "tessera-tensor-cache", what, `not a Tessera tensor cache (format ${JSON.stringify(doc.format)})`);
  expect(doc.version === TENSOR_CACHE_VERSION, what, `version ${doc.version}; this runtime reads version ${TENSOR_CACHE_VERSION}`);
  expectSchema(doc, "tensor-cache", what);
  checkTensorCache(doc, what);
  return doc;
}

/** The device-memory figures of a build in bundle.json, in bytes (docs/web.md). */
export const MEMORY_FIGURES = ["weights_bytes", "arena_bytes", "kv_cache_bytes", "total_bytes", "largest_buffer_bytes",
  "largest_binding_bytes"];

/**
 * A figure of bundle.json: a whole number of bytes that a double holds exactly (0 to 2**53 - 1). The
 * engine decides from these whether a build fits before it downloads it, so a bad one is named here.
 * @param {any} value @param {string} what @param {string} name
 */
function expectFigure(value, what, name) {
  expect(value !== undefined && value !== null, what, `${name} is missing`);
  expect(typeof value === "number" && Number.isInteger(value), what, `${name} is ${typeof value === "number" ? value : JSON.stringify(value)}, not a whole number of bytes`);
  expect(Number.isSafeInteger(value) && value >= 0, what, `${name} is ${value}, outside 0 .. 2**53 - 1 bytes`);
}

/** @param {any} doc @param {string} what */
export function validateBundle(doc, what = "bundle.json") {
  expect(doc && typeof doc === "object", what, "not a JSON object");
  expect(doc.format === "tessera-bundle", what, `not a Tessera bundle (format ${JSON.stringify(doc.format)})`);
  expect(doc.version === BUNDLE_VERSION, what,
    `version ${doc.version}; this runtime reads version ${BUNDLE_VERSION}: bundle the model again with this Tessera`);
  expect(Array.isArray(doc.builds) && doc.builds.length > 0, what, "lists no builds");
  for (const build of doc.builds) {
    expect(build && typeof build.name === "string", what, "a build has no name");
    const name = build.name;
    expect(typeof build.kind === "string", what, `build ${name} has no kind`);
    for (const key of ["path", "tensor_cache"]) {
      const problem = pathProblem(key === "path" && typeof build[key] === "string" ? build[key].replace(/\/$/, "") : build[key]);
      expect(problem === null, what, `build ${name}'s ${key} ${JSON.stringify(build[key])} is not a relative path inside the model's folder: ${problem}`);
    }
    expect(Array.isArray(build.features) && build.features.every((/** @type {any} */ f) => typeof f === "string"), what,
      `build ${name}'s features are not a list of names`);
    expectFigure(build.download_bytes, what, `build ${name}'s download_bytes`);
    expect(build.memory && typeof build.memory === "object", what, `build ${name} has no memory figures`);
    for (const key of MEMORY_FIGURES) expectFigure(build.memory[key], what, `build ${name}'s memory.${key}`);
  }
  for (const key of ["tokenizer", "chat_config"]) {
    const problem = pathProblem(doc[key]);
    expect(problem === null, what, `${key} ${JSON.stringify(doc[key])} is not a relative path inside the model's folder: ${problem}`);
  }
  expectSchema(doc, "bundle", what);  // and everything else docs/bundle.schema.json says
  return doc;
}

/**
 * chat-config.json, checked against its schema; with ``tokenIds`` (the ids the tokenizer has), every
 * token id it names must be one of them.
 * @param {any} doc @param {string} what @param {Set<number>} [tokenIds]
 */
export function validateChatConfig(doc, what = "chat-config.json", tokenIds) {
  expect(doc && typeof doc === "object" && !Array.isArray(doc), what, "not a JSON object");
  expectSchema(doc, "chat-config", what);
  if (tokenIds) {
    const ids = [...doc.stop_token_ids.map((/** @type {number} */ id) => ["stop_token_ids", id]),
      ...(doc.bos_token_id !== undefined && doc.bos_token_id !== null ? [["bos_token_id", doc.bos_token_id]] : [])];
    for (const [key, id] of ids) {
      expect(tokenIds.has(/** @type {number} */ (id)), what, `${key} names token ${id}, which the tokenizer does not have`);
    }
  }
  return doc;
}

/** The ids a tokenizer.json (Hugging Face format) has: its model's vocabulary and its added tokens.
 * @param {any} tokenizerJson @returns {Set<number>} */
export function tokenizerIds(tokenizerJson) {
  const vocab = tokenizerJson?.model?.vocab;
  const ids = new Set(Array.isArray(vocab) ? vocab.map((_, i) => i) : Object.values(vocab ?? {}));
  for (const token of tokenizerJson?.added_tokens ?? []) ids.add(token.id);
  return ids;
}
