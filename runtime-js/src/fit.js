// Will it fit, before the download: bundle.json records for each build the memory it needs
// (docs/web.md), and these checks compare them with what this device allows, so that a build that
// cannot run is passed over, or the model refused, before any of its files is fetched. Each reason
// names the figure, the limit and both numbers.

import { SPEC_DEFAULTS } from "./device.js";

/** The most a WebAssembly (wasm32) memory can hold: 65,536 pages of 64 KiB. Browsers may allow less. */
export const WASM_MEMORY_LIMIT = 65536 * 65536;

/** ``1.5 MiB (1572864 bytes)``. @param {number} bytes */
export function formatBytes(bytes) {
  const [value, unit] = bytes >= 2 ** 30 ? [bytes / 2 ** 30, "GiB"] : [bytes / 2 ** 20, "MiB"];
  return `${value.toFixed(value < 10 ? 2 : 1)} ${unit} (${bytes} bytes)`;
}

/**
 * Why a WebGPU build cannot run on ``adapter`` (a missing feature, a buffer or binding larger than its
 * limits), or null when it fits. The VM gives each weight and each KV cache tensor a buffer of its own,
 * bound whole, and an arena the buffers of its plan: the largest of them must fit maxBufferSize, and
 * the largest thing bound at once maxStorageBufferBindingSize.
 * @param {any} build a build of bundle.json @param {any} adapter a GPUAdapter
 * @returns {string | null}
 */
export function webgpuMisfit(build, adapter) {
  for (const feature of build.features) {
    if (!adapter.features?.has(feature)) return `build ${build.name} needs the WebGPU feature '${feature}', which this device lacks`;
  }
  const limit = (/** @type {string} */ name) => /** @type {number} */ (adapter.limits?.[name] ?? SPEC_DEFAULTS[name]);
  const { largest_buffer_bytes: buffer, largest_binding_bytes: binding } = build.memory;
  if (buffer > limit("maxBufferSize")) {
    return `build ${build.name} needs a buffer of ${formatBytes(buffer)} (its largest weight, KV cache tensor or arena ` +
      `buffer); this device's maxBufferSize is ${formatBytes(limit("maxBufferSize"))}`;
  }
  if (binding > limit("maxStorageBufferBindingSize")) {
    return `build ${build.name} binds ${formatBytes(binding)} at once; this device's maxStorageBufferBindingSize is ` +
      `${formatBytes(limit("maxStorageBufferBindingSize"))}`;
  }
  return null;
}

/**
 * Why a WASM build cannot run in a WebAssembly memory of at most ``limit`` bytes, or null when it fits:
 * the weights, every function's arena and the KV cache all live in that one memory.
 * @param {any} build @param {number} limit
 * @returns {string | null}
 */
export function wasmMisfit(build, limit = WASM_MEMORY_LIMIT) {
  const memory = build.memory;
  if (memory.total_bytes <= limit) return null;
  return `build ${build.name} needs ${formatBytes(memory.total_bytes)} of WebAssembly memory (weights ` +
    `${formatBytes(memory.weights_bytes)}, arenas ${formatBytes(memory.arena_bytes)}, KV cache ` +
    `${formatBytes(memory.kv_cache_bytes)}); WebAssembly allows ${formatBytes(limit)}`;
}
