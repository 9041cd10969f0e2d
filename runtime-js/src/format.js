// Checks that the files of a bundle are what they claim to be (docs/format.md, docs/web.md)
// before anything is built from them, so that a wrong or stale file is a sentence, not a crash.

export class FormatError extends Error {
  name = "FormatError";
}

const EXECUTABLE_VERSION = 3;
const TENSOR_CACHE_VERSION = 1;
const BUNDLE_VERSION = 2;

/** @param {boolean} ok @param {string} what @param {string} problem */
function expect(ok, what, problem) {
  if (!ok) throw new FormatError(`${what}: ${problem}`);
}

/**
 * Whether ``path`` names a file inside the folder: relative, no "..", no scheme, no percent-escapes
 * (so that no URL resolution can take it outside).
 * @param {any} path
 */
export function isInsidePath(path) {
  // Control characters too: the URL parser deletes tabs and newlines, so "..\t" would become "..".
  if (typeof path !== "string" || !path || path.startsWith("/") || /[\x00-\x1f\x7f\\%?#:]/.test(path)) return false;
  return path.split("/").every((part) => part !== "" && part !== "." && part !== "..");
}

/** The backends this runtime's devices run, by build kind. */
const BACKENDS = { webgpu: "wgsl", wasm: "c-wasm" };

/** @param {any} doc @param {string} what */
export function validateExecutable(doc, what = "executable.json") {
  expect(doc && typeof doc === "object", what, "not a JSON object");
  expect(doc.format === "tessera-executable", what, `not a Tessera executable (format ${JSON.stringify(doc.format)})`);
  expect(doc.version === EXECUTABLE_VERSION, what,
    `format version ${doc.version}; this runtime reads version ${EXECUTABLE_VERSION}: rebuild the bundle with this Tessera`);
  expect(Array.isArray(doc.kernels) && typeof doc.functions === "object" && Array.isArray(doc.modules), what,
    "kernels, modules or functions are missing");
  const modules = new Set();
  for (const module of doc.modules) {
    expect(isInsidePath(module.path), what, `the module path ${JSON.stringify(module.path)} is not a relative path inside the build`);
    expect(Number.isInteger(module.nbytes) && /^[0-9a-f]{64}$/.test(module.sha256), what, `module ${module.path} lacks nbytes or sha256`);
    modules.add(module.path);
  }
  const known = Object.values(BACKENDS);
  for (const [index, kernel] of doc.kernels.entries()) {
    for (const key of ["name", "backend", "module", "entry_point", "workgroup_size", "abi", "grid"]) {
      expect(kernel[key] !== undefined, what, `kernel ${index} has no ${key}`);
    }
    expect(known.includes(kernel.backend), what, `kernel ${kernel.name} is for the ${kernel.backend} backend; this runtime runs ${known.join(", ")}`);
    expect(modules.has(kernel.module), what, `kernel ${kernel.name} names the module ${kernel.module}, which the executable does not list`);
  }
  for (const [name, fn] of Object.entries(doc.functions)) {
    for (const key of ["params", "code", "tensors", "locations", "memory", "symbols"]) {
      expect(/** @type {any} */ (fn)[key] !== undefined, what, `function ${name} has no ${key}`);
    }
    for (const op of /** @type {any} */ (fn).code) {
      const callee = op.op === "call" ? op.func : op.op === "func" ? op.name : undefined;
      expect(callee === undefined || callee === null || callee in doc.functions, what,
        `function ${name} calls ${callee}, which the executable does not have`);
    }
  }
  expect(doc.libraries === undefined || (Array.isArray(doc.libraries) && doc.libraries.every((/** @type {any} */ l) => typeof l === "string")),
    what, "libraries is not a list of names");
  return doc;
}

/** Whether every kernel of ``doc`` is for the backend a device of ``kind`` runs. @param {any} doc @param {string} kind */
export function runsOn(doc, kind) {
  const backend = /** @type {Record<string, string>} */ (BACKENDS)[kind];
  return doc.kernels.every((/** @type {any} */ k) => k.backend === backend);
}

/** @param {any} doc @param {string} what */
export function validateTensorCache(doc, what = "tensor-cache.json") {
  expect(doc && typeof doc === "object", what, "not a JSON object");
  expect(doc.format === "tessera-tensor-cache", what, `not a Tessera tensor cache (format ${JSON.stringify(doc.format)})`);
  expect(doc.version === TENSOR_CACHE_VERSION, what, `version ${doc.version}; this runtime reads version ${TENSOR_CACHE_VERSION}`);
  expect(Array.isArray(doc.records), what, "records are missing");
  for (const shard of doc.records) {
    expect(isInsidePath(shard.dataPath), what, `bad shard path ${JSON.stringify(shard.dataPath)}`);
    expect(Number.isInteger(shard.nbytes) && /^[0-9a-f]{64}$/.test(shard.sha256), what, `shard ${shard.dataPath} lacks nbytes or sha256`);
    for (const record of shard.records) {
      const end = record.byteOffset + record.nbytes;
      expect(Number.isInteger(record.byteOffset) && end <= shard.nbytes, what,
        `tensor ${record.name} (bytes ${record.byteOffset}..${end}) lies outside shard ${shard.dataPath} of ${shard.nbytes} bytes`);
    }
  }
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
      expect(isInsidePath(typeof build[key] === "string" ? build[key].replace(/\/$/, "") : build[key]), what,
        `build ${name}'s ${key} ${JSON.stringify(build[key])} is not a relative path inside the model's folder`);
    }
    expect(Array.isArray(build.features) && build.features.every((/** @type {any} */ f) => typeof f === "string"), what,
      `build ${name}'s features are not a list of names`);
    expectFigure(build.download_bytes, what, `build ${name}'s download_bytes`);
    expect(build.memory && typeof build.memory === "object", what, `build ${name} has no memory figures`);
    for (const key of MEMORY_FIGURES) expectFigure(build.memory[key], what, `build ${name}'s memory.${key}`);
  }
  expect(isInsidePath(doc.tokenizer) && isInsidePath(doc.chat_config), what, "tokenizer or chat_config is missing");
  return doc;
}

/** @param {any} doc @param {string} what */
export function validateChatConfig(doc, what = "chat-config.json") {
  expect(doc && typeof doc === "object", what, "not a JSON object");
  expect(Number.isInteger(doc.context_length) && doc.context_length > 0, what, "context_length is missing");
  expect(doc.prefill_chunk === undefined || (Number.isInteger(doc.prefill_chunk) && doc.prefill_chunk > 0), what,
    `prefill_chunk must be a positive integer, got ${JSON.stringify(doc.prefill_chunk)}`);
  expect(Array.isArray(doc.stop_token_ids), what, "stop_token_ids is missing");
  return doc;
}
