// An InferenceSession inside a Web Worker (inference-session.js): the page's thread never runs a kernel.
// inference-worker-session.js is the page's side; messages are {type, id, ...} objects answered with the
// same id. Tensors travel as {type, data, dims}, their buffers transferred, not copied.
import { InferenceSession, Tensor } from "./inference-session.js";

/** @type {InferenceSession | null} */
let session = null;

/** @param {any} message @param {Transferable[]} [transfer] */
const post = (message, transfer = []) => /** @type {any} */ (self).postMessage(message, transfer);
const errorOf = (/** @type {any} */ error) => ({ name: error?.name ?? "Error", message: error?.message ?? String(error), input: error?.input });

self.onmessage = async (/** @type {MessageEvent} */ event) => {
  const { type, id } = event.data;
  try {
    if (type === "create") {
      session = await InferenceSession.create(event.data.url, {
        ...event.data.options, onProgress: (/** @type {any} */ progress) => post({ type: "progress", id, progress }),
      });
      post({ type: "created", id, description: { inputs: session.inputMetadata, outputs: session.outputMetadata,
        bounds: session.symbolBounds, device: session.device, function: session.function, url: session.url, passedOver: session.passedOver } });
    } else if (type === "run") {
      if (!session) throw new Error("the session has not finished loading");
      /** @type {Record<string, any>} */
      const feeds = {};
      for (const [name, value] of Object.entries(event.data.feeds)) {
        feeds[name] = value && typeof value === "object" && "dims" in value ? new Tensor(value.type, value.data, value.dims) : value;
      }
      const outputs = await session.run(feeds, event.data.fetches);
      /** @type {Record<string, any>} */
      const plain = {};
      for (const [name, tensor] of Object.entries(outputs)) plain[name] = { type: tensor.type, data: tensor.data, dims: tensor.dims };
      post({ type: "outputs", id, outputs: plain }, [...new Set(Object.values(outputs).map((t) => t.data.buffer))]);
    } else if (type === "release") {
      await session?.release();
      post({ type: "released", id });
    }
  } catch (error) {
    post({ type: "error", id, error: errorOf(error) });
  }
};
