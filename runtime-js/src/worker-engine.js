// The page's side of an engine running in a Web Worker (worker.js): the same API as createEngine.
//
//   const engine = await createWorkerEngine(bundleUrl, { initProgressCallback });
//   for await (const chunk of await engine.chat.completions.create({ messages, stream: true })) ...

let nextId = 0;

/**
 * @param {string} bundleUrl
 * @param {{initProgressCallback?: (p: any) => void, backend?: string, worker?: Worker, wasmMemoryLimit?: number}} options
 */
export async function createWorkerEngine(bundleUrl, { initProgressCallback = () => {}, worker, ...options } = {}) {
  const thread = worker ?? new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
  /** @type {Map<number, (message: any) => void>} */
  const listeners = new Map();
  thread.onmessage = (event) => listeners.get(event.data.id)?.(event.data);
  thread.onerror = (event) => {
    for (const listener of listeners.values()) listener({ type: "error", error: { name: "Error", message: event.message } });
  };
  const failure = (/** @type {any} */ error) => Object.assign(new Error(error.message), { name: error.name });

  const loaded = await new Promise((resolve, reject) => {
    const id = nextId++;
    listeners.set(id, (message) => {
      if (message.type === "progress") initProgressCallback(message.progress);
      else if (message.type === "loaded") { listeners.delete(id); resolve(message); }
      else if (message.type === "error") { listeners.delete(id); reject(failure(message.error)); }
    });
    thread.postMessage({ type: "load", id, bundleUrl: new URL(bundleUrl, globalThis.location?.href).href, options });
  });

  /** Chunks of one reply, as an async iterator fed by the worker's messages. @param {any} request */
  async function* stream(request) {
    const id = nextId++;
    /** @type {any[]} */
    const queue = [];
    /** @type {(() => void) | null} */
    let wake = null;
    listeners.set(id, (message) => {
      queue.push(message);
      wake?.();
    });
    thread.postMessage({ type: "create", id, request: { ...request, stream: true } });
    try {
      for (;;) {
        if (!queue.length) await new Promise((resolve) => { wake = () => resolve(undefined); });
        wake = null;
        const message = queue.shift();
        if (message.type === "chunk") yield message.chunk;
        else if (message.type === "done") return;
        else if (message.type === "error") throw failure(message.error);
      }
    } finally {
      listeners.delete(id);
    }
  }

  const engine = {
    device: loaded.device,
    load: loaded.load,
    worker: thread,
    chat: {
      completions: {
        /** @param {any} request */
        create: async (request) => {
          if (request.stream) return stream(request);
          let content = "";
          /** @type {any} */
          let last = null;
          for await (const chunk of stream(request)) {
            content += chunk.choices[0]?.delta?.content ?? "";
            last = chunk;
          }
          return { id: last.id, object: "chat.completion", created: last.created, model: last.model,
            choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: last.choices[0].finish_reason }],
            usage: last.usage };
        },
      },
    },
    interruptGenerate: () => thread.postMessage({ type: "interrupt" }),
    resetChat: () => new Promise((resolve, reject) => {
      const id = nextId++;
      listeners.set(id, (message) => {
        listeners.delete(id);
        if (message.type === "error") reject(failure(message.error)); else resolve(undefined);
      });
      thread.postMessage({ type: "reset", id });
    }),
    terminate: () => thread.terminate(),
  };
  return engine;
}
