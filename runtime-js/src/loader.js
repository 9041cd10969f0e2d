// Loading a model bundle: the JSON files, then the weight shards with progress, each checked
// against the SHA-256 in tensor-cache.json and kept in the browser's Cache API (IndexedDB when
// that is missing), so that a reload downloads nothing.

import { checkLibraries } from "./builtins.js";
import { validateBundle, validateExecutable, validateTensorCache } from "./format.js";

export class LoadError extends Error {
  name = "LoadError";
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

/** @param {string} url @param {(url: string) => Promise<Response>} fetchFn */
export async function fetchJson(url, fetchFn = fetch) {
  const response = await fetchOk(url, fetchFn);
  try {
    return await response.json();
  } catch {
    throw new LoadError(`${url} is not valid JSON`);
  }
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
 * Fetch a response body, reporting bytes as they arrive.
 * @param {Response} response @param {(bytes: number) => void} onBytes
 */
async function readWithProgress(response, onBytes) {
  if (!response.body) {
    const data = await response.arrayBuffer();
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
    chunks.push(value);
    size += value.byteLength;
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
  const executable = validateExecutable(await fetchJson(buildUrl + "executable.json", fetchFn), buildUrl + "executable.json");
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
  const cacheUrl = tensorCacheUrl ?? buildUrl + "tensor-cache.json";
  const tensorCache = validateTensorCache(await fetchJson(cacheUrl, fetchFn), cacheUrl);
  const store = cache ?? await openShardCache();
  const total = tensorCache.records.reduce((/** @type {number} */ sum, /** @type {any} */ s) => sum + s.nbytes, 0);
  let loaded = 0;
  let fromCache = 0;
  const report = (/** @type {string} */ text) => onProgress({ loaded, total, progress: total ? loaded / total : 1, text });
  /** @type {Map<string, ArrayBufferView>} */
  const weights = new Map();
  for (const [index, shard] of tensorCache.records.entries()) {
    const url = new URL(shard.dataPath, new URL(cacheUrl, globalThis.location?.href ?? "http://localhost/")).href;
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
      });
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
      weights.set(record.name, new Uint8Array(data, record.byteOffset, record.nbytes));
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
    const url = buildUrl + module.path;
    const data = await (await fetchOk(url, fetchFn)).arrayBuffer();
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
  return { base, index: validateBundle(await fetchJson(base + "bundle.json", fetchFn), base + "bundle.json") };
}

/**
 * The bundle's index (bundle.json), tokenizer and chat configuration.
 * @param {string} bundleUrl @param {(url: string) => Promise<Response>} fetchFn
 */
export async function loadBundleIndex(bundleUrl, fetchFn = fetch) {
  const { base, index } = await loadBundleJson(bundleUrl, fetchFn);
  const [tokenizer, chatConfig] = await Promise.all([
    fetchJson(base + index.tokenizer, fetchFn), fetchJson(base + index.chat_config, fetchFn)]);
  return { base, index, tokenizer, chatConfig };
}
