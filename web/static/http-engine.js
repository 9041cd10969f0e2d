// The chat page's engine when `tessera serve` serves it with a model: the same surface as the browser
// runtime's engine (chat.completions.create({messages, stream: true}), interruptGenerate(), device, load),
// over the server's OpenAI API. The reply streams as server-sent events; Stop aborts the request, which
// stops the generation on the server.

/** Parse a fetch Response's server-sent events into the JSON of each `data:` line, until `data: [DONE]`.
 * @param {ReadableStream<Uint8Array>} body */
export async function* serverSentEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        const parsed = JSON.parse(data);
        if (parsed.error) throw new Error(parsed.error.message);
        yield parsed;
      }
    }
  }
}

/** An engine over the OpenAI API at `apiUrl` (relative to the page). `askKey()` is called for a key when
 * the server answers 401 (a server started with --api-key). @param {string} apiUrl @param {{askKey?: () => string|null}} options */
export async function createHttpEngine(apiUrl, { askKey = () => null } = {}) {
  const base = new URL(apiUrl, location.href);
  /** @type {string|null} */
  let key = null;
  /** @type {AbortController|null} */
  let controller = null;

  /** @param {string} path @param {RequestInit} init */
  async function call(path, init = {}) {
    for (;;) {
      const headers = { "content-type": "application/json", ...(key ? { authorization: `Bearer ${key}` } : {}) };
      const response = await fetch(new URL(path, base), { ...init, headers });
      if (response.status === 401 && (key = askKey())) continue;
      if (!response.ok) {
        const body = await response.json().catch(() => null);
        throw new Error(body?.error?.message ?? `${response.status} ${response.statusText}`);
      }
      return response;
    }
  }

  const models = await (await call("models")).json();
  const model = models.data[0].id;
  return {
    device: { kind: "server", name: model, reason: `the server at ${base.origin} runs ${model} (tessera serve)` },
    load: { bytes: 0, shardsFromCache: false },
    interruptGenerate() { controller?.abort(); },
    chat: {
      completions: {
        /** @param {any} request */
        async create(request) {
          controller = new AbortController();
          const body = { model, ...request, ...(request.stream ? { stream_options: { include_usage: true } } : {}) };
          const response = await call("chat/completions", { method: "POST", body: JSON.stringify(body),
            signal: controller.signal });
          if (!request.stream) return response.json();
          const signal = controller.signal;
          return (async function* () {
            try {
              yield* serverSentEvents(/** @type {ReadableStream<Uint8Array>} */ (response.body));
            } catch (error) {
              if (!signal.aborted) throw error;  // Stop: the reply ends where it was
            }
          })();
        },
      },
    },
  };
}
