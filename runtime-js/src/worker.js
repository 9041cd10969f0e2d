// The engine inside a Web Worker: the page's thread never runs a kernel or a tokenizer, so it never
// freezes, whichever backend runs (WebGPU works in dedicated workers). worker-engine.js is the
// page's side; the messages are {type, id, ...} objects, answered with the same id.
import { createEngine } from "./engine.js";

/** @type {import("./engine.js").Engine | null} */
let engine = null;

/** @param {any} message */
const post = (message) => /** @type {any} */ (self).postMessage(message);
const errorOf = (/** @type {any} */ error) => ({ name: error?.name ?? "Error", message: error?.message ?? String(error) });

self.onmessage = async (/** @type {MessageEvent} */ event) => {
  const { type, id } = event.data;
  try {
    if (type === "load") {
      engine = await createEngine(event.data.bundleUrl, {
        ...event.data.options, initProgressCallback: (/** @type {any} */ progress) => post({ type: "progress", id, progress }),
      });
      post({ type: "loaded", id, device: engine.device, load: /** @type {any} */ (engine).load });
    } else if (type === "create") {
      if (!engine) throw new Error("the engine has not finished loading");
      for await (const chunk of engine.generate(event.data.request)) post({ type: "chunk", id, chunk });
      post({ type: "done", id });
    } else if (type === "interrupt") {
      engine?.interruptGenerate();
    } else if (type === "reset") {
      await engine?.resetChat();
      post({ type: "done", id });
    }
  } catch (error) {
    post({ type: "error", id, error: errorOf(error) });
  }
};
