// The chat engine: an OpenAI-style API over a compiled model, as WebLLM users know it.
//
//   const engine = await createEngine(bundleUrl, { initProgressCallback });
//   const reply = await engine.chat.completions.create({ messages, temperature: 0 });
//   for await (const chunk of await engine.chat.completions.create({ messages, stream: true })) ...
//
// A conversation keeps its KV cache on the device: a new turn computes only the tokens after
// the longest prefix the cache already holds. Tokens are chosen on the device (the functions of the
// sample and sample_greedy roles), so each step reads back one id. The functions called are those
// chat-config.json's program section names (llm-program.js). A conversation that no longer
// fits the context loses its oldest turns (conversation.js): the last chunk's usage.extra says how
// many (dropped_messages) and what to tell the user (notice).

import { renderChatTemplate } from "./chat-template.js";
import { ChatError, contextMisfit, fitConversation } from "./conversation.js";
import { Tokenizer } from "./vendor/tokenizers.js";
import { DeviceError, requestAdapter, softwareRenderer } from "./device.js";
import { WASM_MEMORY_LIMIT, wasmMisfit, webgpuMisfit } from "./fit.js";
import { runsOn } from "./format.js";
import { readProgram, ROLES, samplerParams } from "./llm-program.js";
import { insideUrl, loadBuild, loadBundleJson, loadChatFiles, loadExecutable } from "./loader.js";
import { DEVICE_OPENERS, KIND_LABELS, openDevice } from "./devices/index.js";
import { HostTensor, VirtualMachine } from "./vm.js";

export { ChatError };

/** A small seeded generator (mulberry32): a seed repeats a sampled reply. @param {number} seed */
export function seededRandom(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The most positions one prefill call of this build takes: the bound its prefill function was planned
 * for (the symbol n; the bundle's chat-config.json may come from another build), else chat-config.json's
 * prefill_chunk, else the whole context.
 * @param {any} executable @param {any} chatConfig @returns {number} */
export function prefillChunk(executable, chatConfig) {
  const prefill = chatConfig.program?.functions?.[ROLES.prefill];
  const bound = prefill === undefined ? undefined : executable?.functions?.[prefill]?.symbols?.n?.upper_bound;
  if (Number.isInteger(bound) && bound > 0) return Math.min(bound, chatConfig.context_length);
  return chatConfig.prefill_chunk ?? chatConfig.context_length;
}

/** Resolve on a fresh task of the event loop (awaiting a resolved promise would not let events in). */
export function nextTask() {
  return new Promise((resolve) => {
    const channel = new MessageChannel();
    channel.port1.onmessage = () => {
      channel.port1.close();
      resolve(undefined);
    };
    channel.port2.postMessage(null);
  });
}

/**
 * Text decoded so far, minus a trailing partial UTF-8 character (shown once it completes).
 * @param {string} text
 */
export function stableText(text) {
  return text.endsWith("\uFFFD") ? text.replace(/\uFFFD+$/, "") : text;
}

export class Engine {
  /**
   * @param {{vm: any, chatConfig: any, tokenizer: import("./vendor/tokenizers.js").Tokenizer, modelId?: string,
   *          device?: {kind: string, name: string, build: string, reason: string, threads?: number, threading?: string},
   *          load?: any,
   *          prefillChunk?: number, program?: {functions: Record<string, string>}}} parts  program: readProgram's,
   *   by default read from chatConfig when a function is first called
   */
  constructor(parts) {
    this.vm = parts.vm;  // a VirtualMachine
    this.chatConfig = parts.chatConfig;
    this.tokenizer = parts.tokenizer;
    this.modelId = parts.modelId;
    /** The most positions one prefill call takes (see ``prefillChunk``). */
    this.prefillChunk = parts.prefillChunk ?? prefillChunk(null, parts.chatConfig ?? {});
    this.device = parts.device;
    this.program = parts.program ?? null;
    this.load = parts.load;
    /** @type {number[]} */ this.cached = [];  // the token ids the KV cache holds
    this.interrupted = false;
    this.busy = false;
    this.chat = { completions: { create: (/** @type {any} */ request) => this.create(request) } };
  }

  /** The name of the function of ``role`` (ROLES) in the executable. @param {string} role */
  functionOf(role) {
    this.program ??= readProgram(this.chatConfig);
    return this.program.functions[role];
  }

  /** Stop the running generation after its current step. */
  interruptGenerate() {
    this.interrupted = true;
  }

  /** Forget the conversation: the next turn starts from an empty KV cache. */
  async resetChat() {
    this.vm.resetState();
    this.cached = [];
  }

  /** @param {{role: string, content: string}[]} messages */
  encodeChat(messages) {
    if (!Array.isArray(messages) || messages.length === 0) throw new ChatError("messages must be a non-empty array");
    const template = this.chatConfig.chat_template;
    const text = template
      ? renderChatTemplate(template, { messages, add_generation_prompt: true, bos_token: this.chatConfig.bos_token ?? "",
        eos_token: this.chatConfig.eos_token ?? "" })
      : messages.map((m) => m.content).join("");
    return this.tokenizer.encode(text).ids;
  }

  /** @param {any} request */
  async create(request) {
    const stream = this.generate(request);
    if (request.stream) return stream;
    let content = "";
    /** @type {any} */
    let last = null;
    for await (const chunk of stream) {
      content += chunk.choices[0]?.delta?.content ?? "";
      last = chunk;
    }
    return {
      id: last.id, object: "chat.completion", created: last.created, model: this.modelId,
      choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: last.choices[0].finish_reason }],
      usage: last.usage,
    };
  }

  /** The stream of chunks of one reply. @param {any} request */
  async *generate(request) {
    if (this.busy) throw new ChatError("a reply is already being generated; interrupt it or wait");
    this.busy = true;
    this.interrupted = false;
    try {
      yield* this.reply(request);
    } finally {
      this.busy = false;
    }
  }

  /** @param {any} request */
  /** Prefills prompt[common:] in chunks of at most the build's prefill chunk (older builds: the whole
   * context), each call after the last; the last chunk's logits are the prompt's.
   * @param {number[]} prompt @param {number} common */
  async prefill(prompt, common) {
    const chunk = this.prefillChunk;
    let logits;
    for (let begin = common; begin < prompt.length; begin += chunk) {
      const end = Math.min(begin + chunk, prompt.length);
      logits = await this.vm.runOnDevice(this.functionOf(ROLES.prefill), new HostTensor(Int32Array.from(prompt.slice(begin, end)), [end - begin]), end);
    }
    return logits;
  }

  async *reply(request) {
    const {
      messages, temperature = 0.7, top_p: topP = 0.95, top_k: topK = 0, repetition_penalty: penalty = 1.0, seed,
    } = request;
    const maxTokens = request.max_tokens ?? 256;
    const context = this.chatConfig.context_length;
    const fitted = fitConversation(messages, (kept) => this.encodeChat(kept), context, maxTokens);
    const prompt = fitted.promptIds;
    let common = 0;
    while (common < Math.min(this.cached.length, prompt.length) && this.cached[common] === prompt[common]) common += 1;
    common = Math.min(common, prompt.length - 1);  // at least one token to compute logits from
    const fresh = prompt.slice(common);
    const random = seededRandom(seed ?? Math.floor(Math.random() * 2 ** 32));
    const id = `chatcmpl-${Date.now().toString(36)}`;
    const created = Math.floor(Date.now() / 1000);
    const stops = new Set(this.chatConfig.stop_token_ids);
    const start = performance.now();
    this.cached = [];  // until the prefill has run, the cache holds nothing we can rely on
    let logits = await this.prefill(prompt, common);
    this.cached = [...prompt];
    const knobs = { temperature, topK, topP, penalty };
    let token = await this.nextToken(logits, knobs, random);
    const prefillSeconds = (performance.now() - start) / 1000;
    const decodeStart = performance.now();
    /** @type {number[]} */
    const generated = [];
    let shown = "";
    let finish = "stop";
    const chunk = (/** @type {string} */ content, /** @type {string|null} */ finishReason, /** @type {any} */ usage) => ({
      id, object: "chat.completion.chunk", created, model: this.modelId,
      choices: [{ index: 0, delta: content ? { role: "assistant", content } : {}, finish_reason: finishReason }],
      ...(usage ? { usage } : {}),
    });
    while (!stops.has(token)) {
      generated.push(token);
      const text = stableText(this.tokenizer.decode(generated, { skip_special_tokens: true }));
      if (text.length > shown.length && text.startsWith(shown)) {
        yield chunk(text.slice(shown.length), null, null);
        shown = text;
      }
      if (this.interrupted) { finish = "abort"; break; }
      if (generated.length >= maxTokens || this.cached.length + 1 >= context) { finish = "length"; break; }
      this.cached.push(token);
      await nextTask();  // let the page paint the new text, and an interrupt arrive, between tokens
      logits = await this.vm.runOnDevice(this.functionOf(ROLES.decode), new HostTensor(Int32Array.of(token), [1]), this.cached.length);
      token = await this.nextToken(logits, knobs, random);
    }
    const decodeSeconds = (performance.now() - decodeStart) / 1000;
    const final = this.tokenizer.decode(generated, { skip_special_tokens: true });
    const usage = {
      prompt_tokens: prompt.length, completion_tokens: generated.length, total_tokens: prompt.length + generated.length,
      extra: {
        dropped_messages: fitted.dropped,  // the oldest, left out: the conversation no longer fit the context
        notice: fitted.notice,
        prefill_tokens: fresh.length,
        prefill_tokens_per_s: prefillSeconds ? fresh.length / prefillSeconds : 0,
        decode_tokens_per_s: decodeSeconds && generated.length > 1 ? (generated.length - 1) / decodeSeconds : 0,
      },
    };
    yield chunk(final.length > shown.length ? final.slice(shown.length) : "", finish, usage);
  }

  /**
   * The next id, chosen on the device from logits that never left it.
   * @param {any} logits @param {{temperature: number, topK: number, topP: number, penalty: number}} knobs
   * @param {() => number} random
   */
  async nextToken(logits, knobs, random) {
    const greedy = knobs.temperature <= 0;
    const params = samplerParams({ temperature: knobs.temperature, top_k: knobs.topK, top_p: knobs.topP,
      repetition_penalty: knobs.penalty, random: greedy ? 0 : random() });
    const history = Int32Array.from(this.cached.slice(-this.chatConfig.context_length));
    const result = await this.vm.run(this.functionOf(greedy ? ROLES.sampleGreedy : ROLES.sample), logits,
      new HostTensor(history, [history.length]), new HostTensor(params, [params.length]));
    return result.data[0];
  }
}

/** A chat config that asks for more context than the build has fails here, at load, before any weight
 * is fetched (it would fail in the first decode past the build's context). @param {any} executable @param {any} chatConfig */
function refuseContextMisfit(executable, chatConfig) {
  const misfit = contextMisfit(executable, chatConfig);
  if (misfit) throw new ChatError(misfit);
}

/**
 * The bundle's builds in the order to try them, and why that order. The bundle lists its builds
 * best first for a GPU; on a software WebGPU adapter (SwiftShader, llvmpipe) the WASM build runs
 * the same CPU faster (SmolLM2 in Chromium: 14.6 tok/s against SwiftShader's 1.1), so it goes
 * first, unless the page asked for a backend.
 * @param {{name: string, kind: string}[]} builds bundle.json's, in its order of preference
 * @param {string} backend "auto", or the kind the page asked for
 * @param {string | null} software the WebGPU adapter's software renderer (softwareRenderer), null for a GPU or none
 * @returns {{builds: any[], reason: string}}
 */
export function orderBuilds(builds, backend, software) {
  if (backend !== "auto") {
    const asked = `the page asked for ${KIND_LABELS[backend] ?? backend} (backend: "${backend}")`;
    const despite = backend === "webgpu" && software ? `, although the adapter is a software renderer (${software})` : "";
    return { builds: builds.filter((b) => b.kind === backend), reason: asked + despite };
  }
  if (software && builds.some((b) => b.kind === "wasm") && builds.some((b) => b.kind === "webgpu")) {
    return {
      builds: [...builds.filter((b) => b.kind === "wasm"), ...builds.filter((b) => b.kind !== "wasm")],
      reason: `the WebGPU adapter is a software renderer (${software}), slower than WebAssembly on this CPU`,
    };
  }
  return { builds, reason: software ? `the bundle has no WASM build to run instead of the software WebGPU adapter (${software})`
    : "the bundle's first choice for this device" };
}

/** What engine.device says of a WASM device's threads, on its own or as the part of a split build: how
 * many, and why (a page that is not cross-origin isolated runs on one); nothing for a device without a
 * WASM part. @param {any} device */
export function threadsOf(device) {
  const wasm = device.kind === "split" ? device.parts.find((/** @type {any} */ part) => part.kind === "wasm") : device;
  return wasm?.kind === "wasm" ? { threads: wasm.threads, threading: wasm.threading } : {};
}

/**
 * Load a bundle's model and make an engine for it: the first build in orderBuilds' list that can
 * run here (WebGPU when the browser has it and the device meets the build's needs, else WASM).
 * A build whose figures in bundle.json (features, largest buffer and binding, WebAssembly memory)
 * this device cannot meet is passed over before any of its files is fetched; when none fits, the
 * error names the figures and the limits, and nothing but bundle.json was downloaded.
 * ``engine.device.reason`` says why that build, and a progress text ("WASM build: ...") says it too.
 * @param {string} bundleUrl the model's folder in a bundle (holding bundle.json)
 * @param {{initProgressCallback?: (p: {progress: number, loaded: number, total: number, text: string}) => void,
 *          fetchFn?: (url: string) => Promise<Response>, backend?: "auto" | "webgpu" | "wasm",
 *          libraries?: Record<string, Function>, wasmMemoryLimit?: number, wasmThreads?: number}} options  libraries: host
 *   functions the model's call_builtin calls; wasmMemoryLimit: the most WebAssembly memory this page may use (default
 *   4 GiB); wasmThreads: how many threads a WASM build runs on at most (default navigator.hardwareConcurrency; a page
 *   that is not cross-origin isolated runs on one, and ``engine.device.threading`` says so)
 */
export async function createEngine(bundleUrl, { initProgressCallback = () => {}, fetchFn, backend = "auto", libraries,
  wasmMemoryLimit = WASM_MEMORY_LIMIT, wasmThreads } = {}) {
  const fetcher = fetchFn ?? ((/** @type {string} */ url) => fetch(url));
  initProgressCallback({ progress: 0, loaded: 0, total: 0, text: "Reading the bundle" });
  const { base, index } = await loadBundleJson(bundleUrl, fetcher);
  /** @type {string[]} */
  const reasons = [];  // why each build tried before the one that runs could not
  /** @type {any} */
  let adapter = null;
  const wantsWebGPU = index.builds.some((/** @type {any} */ b) => b.kind === "webgpu") && backend !== "wasm";
  if (wantsWebGPU) {
    try {
      adapter = await requestAdapter();
    } catch (error) {
      reasons.push(/** @type {Error} */ (error).message);
    }
  }
  const { builds: ordered, reason: order } = orderBuilds(index.builds, backend, adapter && softwareRenderer(adapter));
  if (!ordered.length) throw new DeviceError(`this bundle has no ${backend} build`);
  // Will it fit: bundle.json's figures against this device, before anything of a build is fetched.
  let misfits = 0;
  const builds = ordered.filter((/** @type {any} */ build) => {
    if (build.kind === "webgpu" && !adapter) return false;  // why is in reasons already
    const misfit = build.kind === "webgpu" ? webgpuMisfit(build, adapter)
      : build.kind === "wasm" ? wasmMisfit(build, wasmMemoryLimit) : null;
    if (misfit) { reasons.push(misfit); misfits += 1; }
    return !misfit;
  });
  if (!builds.length && misfits) {
    throw new DeviceError(`this model does not fit this device, so nothing of it was downloaded: ${reasons.join("; ")}`);
  }
  const { tokenizer: tokenizerJson, chatConfig } = await loadChatFiles(base, index, fetcher);
  readProgram(chatConfig);  // a model compiled before the program section is refused before any build is fetched
  const parts = { chatConfig, tokenizer: new Tokenizer(tokenizerJson, {}), modelId: index.model };
  /** Why ``build`` runs (the order's reason, or what ruled out those before it), told to the progress callback. */
  const chosen = (/** @type {any} */ build) => {
    const reason = !reasons.length ? order
      : build.kind === "wasm" ? `no usable WebGPU: ${reasons.join("; ")}` : reasons.join("; ");
    initProgressCallback({ progress: 0, loaded: 0, total: 0, text: `${KIND_LABELS[build.kind]} build: ${reason}` });
    return reason;
  };
  /** What engine.load says: bytes, shards from the cache, which cache. */
  const loadFigures = (/** @type {any} */ loaded) => ({ bytes: loaded.bytes, shardsFromCache: loaded.shardsFromCache, cache: loaded.cacheKind });
  const baseUrl = new URL(base, globalThis.location?.href ?? "http://localhost/");
  for (const build of builds) {
    const folder = insideUrl(build.path.replace(/\/$/, ""), baseUrl.href, `build ${build.name}'s folder`) + "/";
    const tensorCacheUrl = insideUrl(build.tensor_cache, baseUrl.href, `build ${build.name}'s tensor cache`);
    if (!Object.hasOwn(DEVICE_OPENERS, build.kind)) { reasons.push(`build ${build.name} is of an unknown kind ${build.kind}`); continue; }
    if (build.kind === "webgpu" && !adapter) continue;  // why is in reasons already
    const executable = await loadExecutable(folder, { fetchFn: fetcher, libraries: libraries ?? {} });
    refuseContextMisfit(executable, chatConfig);
    const program = readProgram(chatConfig, executable);
    const kind = executable.devices ? "split" : build.kind;
    if (kind !== "split" && !runsOn(executable, kind)) {
      reasons.push(`build ${build.name} holds kernels ${kind === "wasm" ? "WebAssembly" : KIND_LABELS[kind]} cannot run`);
      continue;
    }
    let device;
    try {
      device = await openDevice(executable, { kind, adapter, threads: wasmThreads, memoryLimit: wasmMemoryLimit });
    } catch (error) {
      if (!(error instanceof DeviceError)) throw error;
      reasons.push(kind === "split" ? `build ${build.name}: ${error.message}` : error.message);
      continue;
    }
    const reason = chosen(build);
    let loaded, vm;
    try {
      loaded = await loadBuild(folder, { onProgress: initProgressCallback, fetchFn: fetcher, executable, tensorCacheUrl });
      initProgressCallback({ progress: 1, loaded: loaded.bytes, total: loaded.bytes, text: "Compiling kernels" });
      vm = await VirtualMachine.create(device, loaded.executable, loaded.weights, loaded.modules, { libraries });
    } catch (error) {
      device.destroy();  // else a WASM device's workers and memory, or a GPUDevice, outlive the failed load
      throw error;
    }
    initProgressCallback({ progress: 1, loaded: loaded.bytes, total: loaded.bytes, text: "Ready" });
    return new Engine({ ...parts, vm, program, prefillChunk: prefillChunk(executable, chatConfig),
      device: { kind, name: device.name, build: build.name, reason, ...threadsOf(device) }, load: loadFigures(loaded) });
  }
  throw new DeviceError(`${reasons.join("; ")}${index.builds.some((/** @type {any} */ b) => b.kind === "wasm") ? "" :
    ", and this bundle has no WASM build to fall back to"}`);
}
