// The WGSL kernels the Python kernel tests generated and ran on llvmpipe (naga's checks, numbers
// against numpy), as tests/kernels/conftest.py leaves them in build/test-shaders.json, and how a
// WebGPU device compiles them. Two tests put them through Tint, the WGSL compiler of Chrome's WebGPU
// (Dawn), because neither place covers them all on a machine without a GPU:
// - webgpu-shaders.test.mjs: Chromium compiles every kernel its adapter can take, through Tint to
//   SPIR-V and SwiftShader's pipeline compiler. Its only adapter here is SwiftShader, which has no
//   shader-f16, so it compiles the f32 kernels and refuses every f16 kernel at `enable f16;`: the
//   webgpu-f16 build's kernels are not compiled to machine code in a browser here. Dawn rejects the
//   other Vulkan drivers this machine has (Mesa 22's lavapipe lacks shaderUniform*ArrayDynamicIndexing;
//   Chromium's bundled mock ICD reports limits below WebGPU's), and no Chromium flag adds the feature.
// - tint-shaders.test.mjs: Dawn's null backend (npm `webgpu`, dawn.node) offers every feature,
//   shader-f16 included, and runs Tint's WGSL reader, resolver and validator (what rejects a WGSL
//   error in Chrome) and Dawn's pipeline checks on every kernel, f16 included. It generates no code:
//   Tint's SPIR-V, HLSL and MSL writers never see an f16 kernel here.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";

export const SHADER_FILE = "build/test-shaders.json";

/** The file's shaders, its runnable example, and the shaders split by whether they need shader-f16. */
export function loadShaders() {
  assert.ok(existsSync(SHADER_FILE), `${SHADER_FILE} is missing: the Python kernel tests write it (make test)`);
  const file = JSON.parse(readFileSync(SHADER_FILE, "utf8"));
  const f16 = file.shaders.filter((shader) => shader.needs_f16);
  // The webgpu-f16 build is a bundle's first choice: a file without f16 kernels would leave the
  // checks of the f16 kernels vacuous.
  assert.ok(f16.length > 0, `${SHADER_FILE} holds no f16 kernel`);
  return { ...file, f16, f32: file.shaders.filter((shader) => !shader.needs_f16) };
}

/** Compiles each shader on ``device`` (the module, then a pipeline with layout "auto"): the count
 * compiled, and each failure with Tint's messages. Self-contained, so a page can run its source. */
export async function compileAll(device, shaders) {
  const failures = [];
  let compiled = 0;
  for (const shader of shaders) {
    const module = device.createShaderModule({ code: shader.source });
    const info = await module.getCompilationInfo();
    const errors = info.messages.filter((m) => m.type === "error");
    if (errors.length) {
      failures.push({ name: shader.name, errors: errors.map((m) => `${m.lineNum}:${m.linePos} ${m.message}`) });
      continue;
    }
    try {
      await device.createComputePipelineAsync({ layout: "auto", compute: { module, entryPoint: shader.entry_point } });
      compiled++;
    } catch (error) {
      failures.push({ name: shader.name, errors: [String(error)] });
    }
  }
  return { compiled, failures };
}
