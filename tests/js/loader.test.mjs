// The loader against an in-memory server: progress, checksums, the shard cache, clear errors.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";

import { loadBuild } from "../../runtime-js/src/loader.js";

const BASE = "http://bundle.test/models/m/webgpu/";

function makeBuild() {
  const shards = [new Uint8Array(3000).map((_, i) => i % 251), new Uint8Array(1000).map((_, i) => (7 * i) % 256)];
  const files = new Map();
  const records = shards.map((data, index) => {
    files.set(`${BASE}params_shard_${index}.bin`, data);
    return { dataPath: `params_shard_${index}.bin`, format: "raw-shard", nbytes: data.byteLength,
      sha256: createHash("sha256").update(data).digest("hex"),
      records: [{ name: `w${index}`, shape: [data.byteLength / 4], dtype: "float32", format: "raw", nbytes: data.byteLength, byteOffset: 0 }] };
  });
  files.set(`${BASE}tensor-cache.json`, JSON.stringify({ format: "tessera-tensor-cache", version: 1, records }));
  files.set(`${BASE}executable.json`, JSON.stringify({
    format: "tessera-executable", version: 3, target: { kind: "webgpu", name: "webgpu", backend: "wgsl", features: [] },
    required_features: [], required_limits: {}, constants: ["w0", "w1"], kernels: [], modules: [], functions: {},
    libraries: [] }));
  const requests = [];
  const fetchFn = async (url) => {
    requests.push(url);
    const body = files.get(url);
    return body === undefined ? new Response("not found", { status: 404 }) : new Response(body);
  };
  return { files, requests, fetchFn, shards };
}

function memoryCache() {
  const entries = new Map();
  return { kind: "memory", get: async (key) => entries.get(key), put: async (key, data) => { entries.set(key, data); } };
}

test("shards arrive with progress, are checked, and come from the cache the second time", async () => {
  const { requests, fetchFn, shards } = makeBuild();
  const cache = memoryCache();
  const seen = [];
  const first = await loadBuild(BASE, { fetchFn, cache, onProgress: (p) => seen.push(p) });
  assert.deepEqual([...first.weights.get("w0")], [...shards[0]]);
  assert.deepEqual([...first.weights.get("w1")], [...shards[1]]);
  assert.equal(first.bytes, 4000);
  assert.equal(seen.at(-1).loaded, 4000);
  assert.equal(seen.at(-1).progress, 1);
  assert.ok(seen.every((p, i) => i === 0 || p.loaded >= seen[i - 1].loaded), "progress never goes back");
  assert.equal(first.shardsFromCache, 0);

  requests.length = 0;
  const second = await loadBuild(BASE, { fetchFn, cache });
  assert.equal(second.shardsFromCache, 2);
  assert.deepEqual(requests.filter((url) => url.endsWith(".bin")), []);
  assert.deepEqual([...second.weights.get("w1")], [...shards[1]]);
});

test("a corrupted, truncated or missing shard is an error that names it", async () => {
  const build = makeBuild();
  const corrupted = new Uint8Array(build.shards[1]);
  corrupted[10] ^= 1;
  build.files.set(`${BASE}params_shard_1.bin`, corrupted);
  await assert.rejects(loadBuild(BASE, { fetchFn: build.fetchFn, cache: memoryCache() }),
    /shard params_shard_1.bin is corrupted: its SHA-256 is [0-9a-f]{12}\.\.\., tensor-cache.json says/);
  build.files.set(`${BASE}params_shard_1.bin`, build.shards[1].slice(0, 500));
  await assert.rejects(loadBuild(BASE, { fetchFn: build.fetchFn, cache: memoryCache() }),
    /shard params_shard_1.bin has 500 bytes, tensor-cache.json says 1000 \(truncated\?\)/);
  build.files.delete(`${BASE}params_shard_1.bin`);
  await assert.rejects(loadBuild(BASE, { fetchFn: build.fetchFn, cache: memoryCache() }),
    /missing file http:\/\/bundle.test\/models\/m\/webgpu\/params_shard_1.bin \(HTTP 404\)/);
});

test("a stale cached shard is downloaded again rather than used", async () => {
  const { fetchFn, requests, shards } = makeBuild();
  // A cache holding zeros under the shards' keys: the loader must notice by the digest.
  const damaged = memoryCache();
  for (const index of [0, 1]) {
    const url = `${BASE}params_shard_${index}.bin`;
    const digest = createHash("sha256").update(shards[index]).digest("hex");
    await damaged.put(`${url}#${digest}`, new Uint8Array(shards[index].byteLength).buffer);
  }
  const result = await loadBuild(BASE, { fetchFn, cache: damaged });
  assert.equal(result.shardsFromCache, 0);
  assert.equal(requests.filter((url) => url.endsWith(".bin")).length, 2);
});

test("a build of a bundle reads its tensor cache from the shared weights folder, and a shard it shares is cached once", async () => {
  const { files, fetchFn, requests, shards } = makeBuild();
  // The bundle's layout: the tensor cache and shards in models/m/weights/, named for the build.
  const WEIGHTS = "http://bundle.test/models/m/weights/";
  for (const name of [...files.keys()]) {
    if (!name.endsWith(".bin") && !name.endsWith("tensor-cache.json")) continue;
    files.set(name.endsWith(".bin") ? WEIGHTS + name.slice(BASE.length) : `${WEIGHTS}webgpu.json`, files.get(name));
    files.delete(name);
  }
  const cache = memoryCache();
  const first = await loadBuild(BASE, { fetchFn, cache, tensorCacheUrl: `${WEIGHTS}webgpu.json` });
  assert.deepEqual([...first.weights.get("w1")], [...shards[1]]);
  assert.deepEqual(requests.filter((url) => url.endsWith(".bin")), [`${WEIGHTS}params_shard_0.bin`, `${WEIGHTS}params_shard_1.bin`]);
  // Another build's tensor cache over the same shards (other names): nothing is downloaded again.
  const other = JSON.parse(files.get(`${WEIGHTS}webgpu.json`));
  other.records[1].records[0].name = "head";
  files.set(`${WEIGHTS}wasm.json`, JSON.stringify(other));
  requests.length = 0;
  const second = await loadBuild(BASE, { fetchFn, cache, tensorCacheUrl: `${WEIGHTS}wasm.json` });
  assert.equal(second.shardsFromCache, 2);
  assert.deepEqual([...second.weights.get("head")], [...shards[1]]);
  assert.deepEqual(requests.filter((url) => url.endsWith(".bin")), []);
});
