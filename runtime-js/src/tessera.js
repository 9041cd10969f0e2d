// Tessera's browser runtime. A page needs one import:
//
//   import { createEngine } from "<bundle>/runtime/tessera.js";
//   const engine = await createEngine("<bundle>/models/<model>/", { initProgressCallback });
//
// See docs/web.md for the bundle layout and the API.

export { ChatError, createEngine, Engine, orderBuilds, seededRandom, stableText } from "./engine.js";
export { createWorkerEngine } from "./worker-engine.js";
export { ChatTemplateError, renderChatTemplate, TEMPLATE_BUDGET, TemplateBudgetError, TemplateRaised } from "./chat-template.js";
export { checkMaxTokens, checkMessages, contextMisfit, droppedNotice, fitConversation } from "./conversation.js";
export { adapterName, DeviceError, requestAdapter, requestDeviceFor, softwareRenderer, webgpuUnavailableReason } from "./device.js";
export { formatBytes, WASM_MEMORY_LIMIT, wasmMisfit, webgpuMisfit } from "./fit.js";
export { FormatError, validateBundle, validateChatConfig, validateExecutable, validateTensorCache } from "./format.js";
export { LoadError, loadBuild, loadBundleIndex, loadBundleJson, loadExecutable, openShardCache, sha256Hex } from "./loader.js";
export { PROGRAM_VERSION, readProgram, ROLES, SAMPLER_LAYOUT } from "./llm-program.js";
export { evalShape, parseShapeExpr } from "./shape.js";
export { BUILTINS } from "./builtins.js";
export { FunctionValue, RuntimeCheckError, ShapeValue } from "./checks.js";
export { HostTensor } from "./host.js";
export { DeviceTensor, VirtualMachine } from "./vm.js";
export { InferenceSession, InferenceSessionError, Tensor } from "./inference-session.js";
export { DEVICE_OPENERS, deviceKind, deviceName, openDevice, SplitDevice, WasmDevice, WebGPUDevice } from "./devices/index.js";
