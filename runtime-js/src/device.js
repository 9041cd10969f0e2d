// WebGPU adapter and device negotiation: ask for exactly what the executable records it needs,
// and when the adapter cannot give it, say which feature or limit is missing.

import { WEBGPU_DEFAULT_LIMITS } from "./facts.js";

export class DeviceError extends Error {
  name = "DeviceError";
}

/** What every WebGPU adapter grants (docs/kernels.md, section 6; compiler/facts.json). */
export const SPEC_DEFAULTS = WEBGPU_DEFAULT_LIMITS;

/** Why WebGPU cannot be used here, or null when it can be tried. */
export function webgpuUnavailableReason() {
  if (typeof navigator === "undefined" || !("gpu" in navigator)) {
    return "this browser has no WebGPU (navigator.gpu is missing; it needs a secure context such as https or 127.0.0.1)";
  }
  return null;
}

/** The adapter WebGPU offers this page, or a DeviceError saying why there is none. */
export async function requestAdapter() {
  const reason = webgpuUnavailableReason();
  if (reason) throw new DeviceError(reason);
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: "high-performance" });
  if (!adapter) throw new DeviceError("WebGPU is present but no adapter is available (navigator.gpu.requestAdapter() returned null)");
  return adapter;
}

// Names in an adapter's info that mean a CPU renders: Chromium's SwiftShader, Mesa's llvmpipe and
// lavapipe, Windows' WARP ("Microsoft Basic Render Driver").
const SOFTWARE_RENDERERS = [["swiftshader", "SwiftShader"], ["llvmpipe", "llvmpipe"], ["lavapipe", "lavapipe"],
  ["basic render driver", "WARP"], ["warp", "WARP"]];

/**
 * The software renderer behind ``adapter`` ("SwiftShader", "llvmpipe" ...), or null for a GPU.
 * Browsers that expose it say so in isFallbackAdapter (on the adapter in the spec's first version,
 * on adapter.info since Chrome 136); the adapter info's names are the other clue.
 * @param {any} adapter
 * @returns {string | null}
 */
export function softwareRenderer(adapter) {
  const info = adapter?.info ?? {};
  const text = [info.vendor, info.architecture, info.device, info.description].filter(Boolean).join(" ").toLowerCase();
  for (const [needle, name] of SOFTWARE_RENDERERS) if (text.includes(needle)) return name;
  if (/\b(software|cpu)\b/.test(text)) return adapterName(adapter);
  if (adapter?.isFallbackAdapter || info.isFallbackAdapter) return "a fallback adapter";
  return null;
}

/** How people know the adapter: ``google / swiftshader``. @param {any} adapter */
export function adapterName(adapter) {
  const info = adapter?.info ?? {};
  return [info.description, info.vendor, info.architecture].filter(Boolean).join(" / ") || "WebGPU adapter";
}

/**
 * A device for ``executable`` (its required_features and required_limits, docs/format.md), from
 * ``adapter`` when the caller already has one.
 * @param {any} executable
 * @param {any} [adapter]
 * @returns {Promise<{device: GPUDevice, adapterName: string}>}
 */
export async function requestDeviceFor(executable, adapter) {
  adapter ??= await requestAdapter();
  for (const feature of executable.required_features ?? []) {
    if (!adapter.features.has(feature)) {
      throw new DeviceError(`this device lacks the WebGPU feature '${feature}' that the model's kernels use`);
    }
  }
  /** @type {Record<string, number>} */
  const requiredLimits = {};
  for (const [name, need] of Object.entries(executable.required_limits ?? {})) {
    const have = /** @type {any} */ (adapter.limits)[name];
    if (have === undefined) continue;
    if (need > have) throw new DeviceError(`the model needs the WebGPU limit ${name} = ${need}; this device allows ${have}`);
    if (need > (SPEC_DEFAULTS[name] ?? 0)) requiredLimits[name] = need;  // the defaults come without asking
  }
  const device = await adapter.requestDevice({ requiredFeatures: executable.required_features ?? [], requiredLimits });
  return { device, adapterName: adapterName(adapter) };
}
