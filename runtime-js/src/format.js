// Checks that the files of a bundle are what they claim to be (docs/format.md, docs/web.md)
// before anything is built from them, so that a wrong or stale file is a sentence, not a crash.

export class FormatError extends Error {
  name = "FormatError";
}

const EXECUTABLE_VERSION = 1;
const TENSOR_CACHE_VERSION = 1;
const BUNDLE_VERSION = 1;

/** @param {boolean} ok @param {string} what @param {string} problem */
function expect(ok, what, problem) {
  if (!ok) throw new FormatError(`${what}: ${problem}`);
}

/** @param {any} doc @param {string} what */
export function validateExecutable(doc, what = "executable.json") {
  expect(doc && typeof doc === "object", what, "not a JSON object");
  expect(doc.format === "tessera-executable", what, `not a Tessera executable (format ${JSON.stringify(doc.format)})`);
  expect(doc.version === EXECUTABLE_VERSION, what,
    `format version ${doc.version}; this runtime reads version ${EXECUTABLE_VERSION}: rebuild the bundle with this Tessera`);
  expect(Array.isArray(doc.kernels) && typeof doc.functions === "object", what, "kernels or functions are missing");
  const kind = doc.target?.kind;
  expect(kind === "webgpu" || kind === "wasm", what, `built for ${kind}, not webgpu or wasm`);
  if (kind === "wasm") {
    expect(typeof doc.wasm?.path === "string" && /^[0-9a-f]{64}$/.test(doc.wasm?.sha256), what, "the wasm module record is missing");
  }
  const fields = kind === "webgpu" ? ["name", "wgsl", "entry_point", "bindings", "scalars", "grid"]
    : ["name", "entry_point", "scalars", "grid"];
  for (const [index, kernel] of doc.kernels.entries()) {
    for (const key of fields) {
      expect(kernel[key] !== undefined, what, `kernel ${index} has no ${key}`);
    }
  }
  for (const [name, fn] of Object.entries(doc.functions)) {
    for (const key of ["params", "code", "tensors", "locations", "memory", "symbols"]) {
      expect(/** @type {any} */ (fn)[key] !== undefined, what, `function ${name} has no ${key}`);
    }
  }
  return doc;
}

/** @param {any} doc @param {string} what */
export function validateTensorCache(doc, what = "tensor-cache.json") {
  expect(doc && typeof doc === "object", what, "not a JSON object");
  expect(doc.format === "tessera-tensor-cache", what, `not a Tessera tensor cache (format ${JSON.stringify(doc.format)})`);
  expect(doc.version === TENSOR_CACHE_VERSION, what, `version ${doc.version}; this runtime reads version ${TENSOR_CACHE_VERSION}`);
  expect(Array.isArray(doc.records), what, "records are missing");
  for (const shard of doc.records) {
    expect(typeof shard.dataPath === "string" && !shard.dataPath.includes(".."), what, `bad shard path ${JSON.stringify(shard.dataPath)}`);
    expect(Number.isInteger(shard.nbytes) && /^[0-9a-f]{64}$/.test(shard.sha256), what, `shard ${shard.dataPath} lacks nbytes or sha256`);
    for (const record of shard.records) {
      const end = record.byteOffset + record.nbytes;
      expect(Number.isInteger(record.byteOffset) && end <= shard.nbytes, what,
        `tensor ${record.name} (bytes ${record.byteOffset}..${end}) lies outside shard ${shard.dataPath} of ${shard.nbytes} bytes`);
    }
  }
  return doc;
}

/** @param {any} doc @param {string} what */
export function validateBundle(doc, what = "bundle.json") {
  expect(doc && typeof doc === "object", what, "not a JSON object");
  expect(doc.format === "tessera-bundle", what, `not a Tessera bundle (format ${JSON.stringify(doc.format)})`);
  expect(doc.version === BUNDLE_VERSION, what, `version ${doc.version}; this runtime reads version ${BUNDLE_VERSION}`);
  expect(Array.isArray(doc.builds) && doc.builds.length > 0, what, "lists no builds");
  for (const build of doc.builds) {
    expect(typeof build.path === "string" && typeof build.kind === "string", what, "a build lacks its path or kind");
  }
  expect(typeof doc.tokenizer === "string" && typeof doc.chat_config === "string", what, "tokenizer or chat_config is missing");
  return doc;
}

/** @param {any} doc @param {string} what */
export function validateChatConfig(doc, what = "chat-config.json") {
  expect(doc && typeof doc === "object", what, "not a JSON object");
  expect(Number.isInteger(doc.context_length) && doc.context_length > 0, what, "context_length is missing");
  expect(Array.isArray(doc.stop_token_ids), what, "stop_token_ids is missing");
  return doc;
}
