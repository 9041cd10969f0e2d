// The demo chat page: loads the bundle's model with the Tessera runtime and chats with it.
// Query parameters set the sampling (?temperature=0&max_tokens=32&top_p=0.9&seed=1) and may pick
// the backend (?backend=wasm or ?backend=webgpu; the default tries the bundle's builds in order, WASM
// first when the WebGPU adapter is a software renderer such as SwiftShader); ?worker=0 runs the engine on
// the page's own thread instead of a Web Worker; ?threads=N runs a WASM build on at most N threads (by
// default one per core, when the page is cross-origin isolated: `tessera serve` sends the headers). Served by `tessera serve` with a model (the body has
// data-api-url), the page talks to the server's OpenAI API instead (http-engine.js). When the
// conversation no longer fits the model's context, the engine leaves its oldest turns out; the page
// says so, greys them and stops sending them.
const body = document.body;
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const number = (name, fallback) => (params.has(name) ? Number(params.get(name)) : fallback);
const settings = {
  temperature: number("temperature", 0.7), top_p: number("top_p", 0.95), top_k: number("top_k", 0),
  max_tokens: number("max_tokens", 256), ...(params.has("seed") ? { seed: number("seed", 0) } : {}),
};
const messages = [];
let engine = null;

function formatBytes(bytes) {
  return bytes >= 1 << 20 ? `${(bytes / (1 << 20)).toFixed(1)} MB` : `${(bytes / 1024).toFixed(0)} KB`;
}

function showError(error) {
  body.dataset.state = "error";
  $("loading").hidden = true;
  $("error").hidden = false;
  $("error-text").textContent = error?.message ?? String(error);
  $("input").disabled = $("send").disabled = $("stop").disabled = true;
  console.error(error);
}

function addMessage(role, text) {
  const element = document.createElement("div");
  element.className = `message ${role}`;
  element.textContent = text;
  $("messages").append(element);
  element.scrollIntoView({ block: "end" });
  return element;
}

/** The engine left the ``count`` oldest messages out (after a system prompt, which this page has not):
 * so does the page, greying them, and it says why. */
function dropOldest(count, notice) {
  messages.splice(0, count);
  const shown = [...$("messages").querySelectorAll(".message:not(.dropped)")];
  for (const element of shown.slice(0, count)) element.classList.add("dropped");
  $("notice").hidden = false;
  $("notice").textContent = `Note: ${notice}.`;
}

async function send(text) {
  messages.push({ role: "user", content: text });
  addMessage("user", text);
  const reply = addMessage("assistant", "");
  body.dataset.state = "generating";
  $("send").disabled = true;
  $("stop").disabled = false;
  let content = "";
  try {
    const stream = await engine.chat.completions.create({ messages, stream: true, ...settings });
    for await (const chunk of stream) {
      content += chunk.choices[0]?.delta?.content ?? "";
      reply.textContent = content;
      if (chunk.usage?.extra) {
        const { prefill_tokens_per_s: prefill, decode_tokens_per_s: decode } = chunk.usage.extra;
        $("stats").textContent = `${chunk.usage.completion_tokens} tokens · prefill ${prefill.toFixed(1)} tok/s · ` +
          `decode ${decode.toFixed(1)} tok/s`;
        if (chunk.usage.extra.dropped_messages) dropOldest(chunk.usage.extra.dropped_messages, chunk.usage.extra.notice);
      }
    }
    messages.push({ role: "assistant", content });
  } catch (error) {
    messages.pop();  // the conversation goes on without the failed turn
    reply.remove();
    $("stats").textContent = `error: ${error.message}`;
  } finally {
    reply.dataset.done = "true";
    body.dataset.state = "ready";
    $("send").disabled = false;
    $("stop").disabled = true;
  }
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("input").value.trim();
  if (!text || body.dataset.state !== "ready") return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => engine?.interruptGenerate());

/** The server's engine: the model runs there, the page only streams its replies. */
async function startServerEngine() {
  const { createHttpEngine } = await import("./http-engine.js");
  engine = await createHttpEngine(body.dataset.apiUrl, { askKey: () => window.prompt("This server needs an API key:") });
  $("device").textContent = `Running on the server: ${engine.device.name}`;
  $("device-reason").textContent = engine.device.reason;
}

/** The browser runtime's engine: the bundle's model downloaded and run on this device. */
async function startBrowserEngine() {
  const runtime = await import(new URL(body.dataset.runtimeUrl, location.href).href);
  // The engine runs in a Web Worker unless ?worker=0: the page never waits on a kernel.
  const create = params.get("worker") === "0" ? runtime.createEngine : runtime.createWorkerEngine;
  engine = await create(new URL(body.dataset.modelUrl, location.href).href, {
    backend: params.get("backend") ?? "auto",
    ...(params.has("threads") ? { wasmThreads: number("threads", 1) } : {}),
    initProgressCallback: ({ progress, loaded, total, text }) => {
      $("progress").value = progress;
      $("progress-text").textContent = total
        ? `${text} · ${formatBytes(loaded)} of ${formatBytes(total)} (${Math.round(progress * 100)}%)` : text;
    },
  });
  const weights = `${formatBytes(engine.load.bytes)} of weights ${engine.load.shardsFromCache ? "from the browser cache" : "downloaded"}`;
  // A build split by --gpu-layers runs on both (engine.device.kind "split").
  const runsOn = { webgpu: "WebGPU", split: "WebGPU + WASM" }[engine.device.kind] ?? "WASM";
  // How many threads a WASM build runs on, and why no more (a page that is not cross-origin isolated has one).
  const threading = engine.device.threading ? ` · ${engine.device.threading}` : "";
  $("device").textContent = `Running on ${runsOn}: ${engine.device.name} · ${weights}${threading}`;
  // Which build runs and why (a software WebGPU adapter runs the WASM build; ?backend=webgpu overrides).
  $("device-reason").textContent = `${runsOn} build: ${engine.device.reason}`;
}

try {
  await (body.dataset.apiUrl ? startServerEngine() : startBrowserEngine());
  $("loading").hidden = true;
  $("input").disabled = $("send").disabled = false;
  body.dataset.state = "ready";
  $("input").focus();
} catch (error) {
  showError(error);
}
