// Loading a model bundle: the JSON files, then the weight shards with progress, each checked
// against the SHA-256 in tensor-cache.json and kept in the browser's Cache API (IndexedDB when
// that is missing), so that a reload downloads nothing.
//
// Nothing fetched is trusted (docs/format.md, "Paths and files"): every file is checked against its
// format (format.js) before anything is built from it; every URL is a path the file gave, checked by
// the path rules and resolved inside the folder that holds the file (insideUrl); and no response is
// read past the size it may have (a shard's nbytes, a JSON file's limit), so a server that streams
// forever costs no more than that.

import { checkLibraries } from "./builtins.js";
import { MAX_JSON_BYTES, MAX_JSON_DEPTH } from "./facts.js";
import { tokenizerIds, validateBundle, validateChatConfig, validateExecutable, validateTensorCache } from "./format.js";
import { pathProblem } from "./paths.js";

export class LoadError extends Error {
  name = "LoadError";
}

/** The most bytes each JSON file may have (compiler/facts.json, which every runtime shares). */
export const JSON_LIMITS = MAX_JSON_BYTES;

/**
 * The URL of ``path`` (a relative path a file gave) in the folder ``folderUrl`` (ending in "/"): the path
 * rules first, then the resolved URL must still lie in that folder.
 * @param {string} path @param {string} folderUrl @param {string} what @returns {string}
 */
export function insideUrl(path, folderUrl, what) {
  const problem = pathProblem(path);
  if (problem) throw new LoadError(`the ${what} path ${JSON.stringify(path)} is not a relative path inside the folder: ${problem}`);
  const folder = new URL(folderUrl, globalThis.location?.href ?? "http://localhost/");
  const url = new URL(path, folder);
  if (url.origin !== folder.origin || !url.pathname.startsWith(folder.pathname) || url.search || url.hash) {
    throw new LoadError(`the ${what} ${path} resolves to ${url.href}, outside ${folder.href}`);
  }
  return url.href;
}

/**
 * @typedef {{loaded: number, total: number, progress: number, text: string}} LoadProgress
 * @typedef {(p: LoadProgress) => void} ProgressCallback
 */

/** @param {string} url @param {(url: string) => Promise<Response>} fetchFn */
async function fetchOk(url, fetchFn) {
  let response;
  try {
    response = await fetchFn(url);
  } catch (error) {
    throw new LoadError(`cannot fetch ${url}: ${/** @type {Error} */ (error).message}`);
  }
  if (!response.ok) throw new LoadError(`missing file ${url} (HTTP ${response.status})`);
  return response;
}

/**
 * How deep arrays and objects nest in the JSON text ``text`` (brackets inside strings do not count), counted
 * up to one past MAX_JSON_DEPTH, where it stops.
 * @param {string} text @returns {number}
 */
function jsonNesting(text) {
  let depth = 0, deepest = 0, inString = false;
  for (let i = 0; i < text.length && deepest <= MAX_JSON_DEPTH; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // a backslash: the character it escapes is no quote
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      deepest = Math.max(deepest, ++depth);
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return deepest;
}

/**
 * The JSON document at ``url``, read up to ``limit`` bytes (a larger one is an error, found before it is
 * all downloaded) and nested at most MAX_JSON_DEPTH deep (as every runtime reads JSON: compiler/facts.json).
 * @param {string} url @param {(url: string) => Promise<Response>} fetchFn @param {number} [limit]
 */
export async function fetchJson(url, fetchFn = fetch, limit = JSON_LIMITS.executable) {
  const response = await fetchOk(url, fetchFn);
  const data = await readWithProgress(response, () => {}, limit, url);
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(data);
  } catch {
    throw new LoadError(`${url} is not UTF-8 text`);
  }
  let doc;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new LoadError(`${url} is not valid JSON`);
  }
  if (jsonNesting(text) > MAX_JSON_DEPTH) throw new LoadError(`${url} is JSON nested deeper than ${MAX_JSON_DEPTH} levels`);
  return doc;
}

/** @param {ArrayBuffer} data */
export async function sha256Hex(data) {
  const digest = await crypto.subtle.digest("SHA-256", data);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** The shard store: the Cache API where there is one, else IndexedDB, else nothing. */
export async function openShardCache() {
  if (typeof caches !== "undefined") {
    try {
      const cache = await caches.open("tessera-shards");
      return {
        kind: "cache-api",
        /** @param {string} key */ get: async (key) => (await cache.match(key))?.arrayBuffer(),
        /** @param {string} key @param {ArrayBuffer} data */ put: (key, data) => cache.put(key, new Response(data)),
      };
    } catch { /* e.g. an opaque origin: fall through */ }
  }
  if (typeof indexedDB !== "undefined") {
    const db = await new Promise((resolve, reject) => {
      const request = indexedDB.open("tessera-shards", 1);
      request.onupgradeneeded = () => request.result.createObjectStore("shards");
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => reject(request.error);
    });
    const run = (/** @type {IDBTransactionMode} */ mode, /** @type {(s: IDBObjectStore) => IDBRequest} */ body) =>
      new Promise((resolve, reject) => {
        const request = body(db.transaction("shards", mode).objectStore("shards"));
        request.onsuccess = () => resolve(request.result);
        request.onerror = () => reject(request.error);
      });
    return {
      kind: "indexeddb",
      /** @param {string} key */ get: (key) => run("readonly", (s) => s.get(key)),
      /** @param {string} key @param {ArrayBuffer} data */ put: (key, data) => run("readwrite", (s) => s.put(data, key)),
    };
  }
  return { kind: "none", get: async () => undefined, put: async () => undefined };
}

/**
 * Fetch a response body, reporting bytes as they arrive; past ``limit`` bytes the download is cancelled
 * and that is an error (a declared Content-Length past it is one before anything is read).
 * @param {Response} response @param {(bytes: number) => void} onBytes @param {number} limit @param {string} url
 * @returns {Promise<ArrayBuffer>}
 */
async function readWithProgress(response, onBytes, limit, url) {
  const tooLong = (/** @type {number} */ size) => new LoadError(`${url} has ${size} bytes or more, more than the ${limit} it may have`);
  const declared = Number(response.headers?.get?.("content-length") ?? NaN);
  if (declared > limit) throw tooLong(declared);
  if (!response.body) {
    const data = await response.arrayBuffer();
    if (data.byteLength > limit) throw tooLong(data.byteLength);
    onBytes(data.byteLength);
    return data;
  }
  const reader = response.body.getReader();
  /** @type {Uint8Array[]} */
  const chunks = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel();
      throw tooLong(size);
    }
    chunks.push(value);
    onBytes(value.byteLength);
  }
  const data = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    data.set(chunk, at);
    at += chunk.byteLength;
  }
  return data.buffer;
}

/**
 * A build's executable.json, checked; with ``libraries``, also that every library function it calls is
 * there (the builtins or one of them), before any weight is downloaded.
 * @param {string} buildUrl
 * @param {((url: string) => Promise<Response>) | {fetchFn?: (url: string) => Promise<Response>,
 *          libraries?: Record<string, Function>}} [options] the options, or (as before) the fetch function
 */
export async function loadExecutable(buildUrl, options = {}) {
  const { fetchFn = fetch, libraries = undefined } = typeof options === "function" ? { fetchFn: options } : options;
  const url = insideUrl("executable.json", buildUrl, "executable");
  const executable = validateExecutable(await fetchJson(url, fetchFn, JSON_LIMITS.executable), url);
  if (libraries) checkLibraries(executable, libraries);
  return executable;
}

/**
 * Load one build of a bundle: executable, weights by constant name, and progress as it goes.
 * @param {string} buildUrl the build's folder, ending in "/"
 * @param {{onProgress?: ProgressCallback, fetchFn?: (url: string) => Promise<Response>, cache?: any,
 *          executable?: any, libraries?: Record<string, Function>, tensorCacheUrl?: string}} options
 *   tensorCacheUrl: the build's tensor cache, whose shards are named relative to it (a bundle's builds
 *   share weights/, bundle.json says where); by default the build folder's tensor-cache.json
 */
export async function loadBuild(buildUrl, { onProgress = () => {}, fetchFn = fetch, cache, executable, libraries, tensorCacheUrl } = {}) {
  executable ??= await loadExecutable(buildUrl, { fetchFn, libraries });
  const cacheUrl = tensorCacheUrl ?? insideUrl("tensor-cache.json", buildUrl, "tensor cache");
  const tensorCache = validateTensorCache(await fetchJson(cacheUrl, fetchFn, JSON_LIMITS.tensorCache), cacheUrl);
  const cacheFolder = new URL(".", new URL(cacheUrl, globalThis.location?.href ?? "http://localhost/")).href;
  const store = cache ?? await openShardCache();
  const total = tensorCache.records.reduce((/** @type {number} */ sum, /** @type {any} */ s) => sum + s.nbytes, 0);
  let loaded = 0;
  let fromCache = 0;
  const report = (/** @type {string} */ text) => onProgress({ loaded, total, progress: total ? loaded / total : 1, text });
  /** @type {Map<string, ArrayBufferView>} */
  const weights = new Map();
  for (const [index, shard] of tensorCache.records.entries()) {
    const url = insideUrl(shard.dataPath, cacheFolder, "weight shard");
    const key = `${url}#${shard.sha256}`;
    let data = /** @type {ArrayBuffer|undefined} */ (await store.get(key));
    if (data && data.byteLength === shard.nbytes && await sha256Hex(data) === shard.sha256) {
      loaded += shard.nbytes;
      fromCache += 1;
      report(`Shard ${index + 1}/${tensorCache.records.length} from the cache`);
    } else {
      const response = await fetchOk(url, fetchFn);
      data = await readWithProgress(response, (bytes) => {
        loaded += bytes;
        report(`Downloading shard ${index + 1}/${tensorCache.records.length}`);
      }, shard.nbytes, url);
      if (data.byteLength !== shard.nbytes) {
        throw new LoadError(`shard ${shard.dataPath} has ${data.byteLength} bytes, tensor-cache.json says ${shard.nbytes} (truncated?)`);
      }
      const digest = await sha256Hex(data);
      if (digest !== shard.sha256) {
        throw new LoadError(`shard ${shard.dataPath} is corrupted: its SHA-256 is ${digest.slice(0, 12)}..., tensor-cache.json says ${shard.sha256.slice(0, 12)}...`);
      }
      await store.put(key, data);
    }
    for (const record of shard.records) {
      // its dtype travels with it: the VM widens bool, int8, uint8, int16 and uint16 to a device's words
      weights.set(record.name, Object.assign(new Uint8Array(data, record.byteOffset, record.nbytes), { dtype: record.dtype }));
    }
  }
  report(fromCache === tensorCache.records.length ? "Weights loaded from the cache" : "Weights loaded");
  const modules = await loadModules(buildUrl, executable, fetchFn);
  return { executable, tensorCache, weights, modules, bytes: total, shardsFromCache: fromCache, cacheKind: store.kind };
}

/**
 * The kernel module files of an executable (WGSL text, a WASM binary ...), each checked against
 * its size and SHA-256 in executable.json. @param {string} buildUrl @param {any} executable
 * @param {(url: string) => Promise<Response>} fetchFn
 * @returns {Promise<Map<string, ArrayBuffer>>}
 */
export async function loadModules(buildUrl, executable, fetchFn = fetch) {
  const entries = await Promise.all(executable.modules.map(async (/** @type {any} */ module) => {
    const url = insideUrl(module.path, buildUrl, "kernel module");
    const data = await readWithProgress(await fetchOk(url, fetchFn), () => {}, module.nbytes, url);
    if (data.byteLength !== module.nbytes || await sha256Hex(data) !== module.sha256) {
      throw new LoadError(`${url} does not match its size and checksum in executable.json (stale or corrupted)`);
    }
    return /** @type {[string, ArrayBuffer]} */ ([module.path, data]);
  }));
  return new Map(entries);
}

/**
 * The bundle's index (bundle.json), checked: what the engine decides from before it fetches anything else.
 * @param {string} bundleUrl @param {(url: string) => Promise<Response>} fetchFn
 */
export async function loadBundleJson(bundleUrl, fetchFn = fetch) {
  const base = bundleUrl.endsWith("/") ? bundleUrl : bundleUrl + "/";
  const url = insideUrl("bundle.json", base, "bundle index");
  return { base, index: validateBundle(await fetchJson(url, fetchFn, JSON_LIMITS.bundle), url) };
}

/**
 * The bundle's index (bundle.json), tokenizer and chat configuration (checked against its schema and the
 * tokenizer's ids).
 * @param {string} bundleUrl @param {(url: string) => Promise<Response>} fetchFn
 */
export async function loadBundleIndex(bundleUrl, fetchFn = fetch) {
  const { base, index } = await loadBundleJson(bundleUrl, fetchFn);
  const { tokenizer, chatConfig } = await loadChatFiles(base, index, fetchFn);
  return { base, index, tokenizer, chatConfig };
}

/**
 * A bundle's tokenizer.json and chat-config.json, where its bundle.json says, each checked.
 * @param {string} base the model's folder @param {any} index its bundle.json
 * @param {(url: string) => Promise<Response>} fetchFn
 */
export async function loadChatFiles(base, index, fetchFn = fetch) {
  const tokenizerUrl = insideUrl(index.tokenizer, base, "tokenizer");
  const chatConfigUrl = insideUrl(index.chat_config, base, "chat configuration");
  const [tokenizer, chatConfig] = await Promise.all([fetchJson(tokenizerUrl, fetchFn, JSON_LIMITS.tokenizer),
    fetchJson(chatConfigUrl, fetchFn, JSON_LIMITS.chatConfig)]);
  validateChatConfig(chatConfig, chatConfigUrl, tokenizerIds(tokenizer));
  return { tokenizer, chatConfig };
}
