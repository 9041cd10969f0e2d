// The page `tessera bundle model.onnx` writes: it runs the model with runtime-js's InferenceSession on a
// picture the user drops or chooses, resized to the model's input in a canvas, and shows the top classes
// and the time taken. model/model.json (written by the bundle) says which builds there are, the input's
// name and layout, the normalization and the labels. body[data-state]: loading, ready, running or error.
import { InferenceSession, Tensor } from "./runtime/tessera.js";

const $ = (/** @type {string} */ id) => /** @type {any} */ (document.getElementById(id));
const body = document.body;
let session = null;
let model = null;

function fail(error) {
  body.dataset.state = "error";
  $("error").hidden = false;
  $("error-text").textContent = error?.message ?? String(error);
}

/** The input's layout: [channels, height, width] and whether channels come last (NHWC). */
function layoutOf(shape) {
  const dims = shape.slice(-3);
  if (shape.length !== 4 && shape.length !== 3) throw new Error(`the input has shape [${shape}]; this page feeds images (N, C, H, W) or (N, H, W, C)`);
  if (dims.some((d) => typeof d !== "number")) throw new Error(`the input's size [${shape}] is not fixed: bundle with --input NAME=1,3,224,224`);
  // NCHW unless the first of the three is no channel count and the last is (NHWC, as TensorFlow exports)
  const channelsLast = !(dims[0] === 1 || dims[0] === 3) && (dims[2] === 1 || dims[2] === 3);
  const [channels, height, width] = channelsLast ? [dims[2], dims[0], dims[1]] : dims;
  return { channels, height, width, channelsLast };
}

/** The picture as the model's input: drawn into a canvas of the input's size, scaled to [0, 1], normalized. */
function pixelsOf(image) {
  const { channels, height, width, channelsLast } = layoutOf(model.input.shape);
  const canvas = $("preview");
  canvas.width = width;
  canvas.height = height;
  const context = canvas.getContext("2d", { willReadFrequently: true });
  context.drawImage(image, 0, 0, width, height);
  const rgba = context.getImageData(0, 0, width, height).data;
  const data = new Float32Array(channels * height * width);
  const mean = model.mean ?? [0.485, 0.456, 0.406], std = model.std ?? [0.229, 0.224, 0.225];
  for (let p = 0; p < height * width; p++) {
    for (let c = 0; c < channels; c++) {
      const value = channels === 1 ? (rgba[4 * p] + rgba[4 * p + 1] + rgba[4 * p + 2]) / 765 : rgba[4 * p + c] / 255;
      const normalized = (value - mean[c % mean.length]) / std[c % std.length];
      data[channelsLast ? p * channels + c : c * height * width + p] = normalized;
    }
  }
  const dims = model.input.shape.length === 4 ? [1, ...model.input.shape.slice(1)] : [...model.input.shape];
  return new Tensor("float32", data, dims);
}

/** Probabilities from the output: as they are when they already are some, else a softmax of the logits. */
function probabilities(values) {
  const sum = values.reduce((a, b) => a + b, 0);
  if (values.every((v) => v >= 0 && v <= 1) && Math.abs(sum - 1) < 1e-3) return values;
  const top = Math.max(...values);
  const exps = values.map((v) => Math.exp(v - top));
  const total = exps.reduce((a, b) => a + b, 0);
  return exps.map((e) => e / total);
}

async function classify(file) {
  if (!session || body.dataset.state === "running") return;
  body.dataset.state = "running";
  try {
    const image = await createImageBitmap(file);
    const input = pixelsOf(image);
    const started = performance.now();
    const outputs = await session.run({ [model.input.name]: input });
    const ms = performance.now() - started;
    const output = outputs[model.output] ?? Object.values(outputs)[0];
    const probs = probabilities(Array.from(output.data, Number));
    const ranked = probs.map((p, i) => [p, i]).sort((a, b) => b[0] - a[0]).slice(0, 5);
    $("top").replaceChildren(...ranked.map(([p, i]) => {
      const item = document.createElement("li");
      const label = model.labels?.[i] ?? `class ${i}`;
      item.textContent = `${label}: ${(100 * p).toFixed(1)}%`;
      item.dataset.index = String(i);
      const bar = document.createElement("span");
      bar.className = "bar";
      bar.style.width = `${Math.max(1, 100 * p)}%`;
      item.append(bar);
      return item;
    }));
    $("time").textContent = `${ms.toFixed(1)} ms on ${session.device.name}`;
    /** For tests and curious users: what went in and came out. */
    window.lastInference = { input: Array.from(input.data), dims: [...input.dims], probabilities: probs,
      output: Array.from(output.data, Number), top: ranked.map(([, i]) => i), ms };
    body.dataset.state = "ready";
  } catch (error) {
    fail(error);
  }
}

async function start() {
  try {
    model = await (await fetch("model/model.json")).json();
    $("title").textContent = `Classify a picture with ${model.name}`;
    const query = new URLSearchParams(location.search);
    const device = query.get("device") ?? "auto";
    // In a Web Worker, so that the page stays responsive while the model runs; ?worker=0 runs it here.
    const worker = query.get("worker") !== "0";
    session = await InferenceSession.create(model.builds.map((b) => new URL(`model/${b}`, location.href).href), { device, worker });
    $("device").textContent = `Running on ${session.device.name} (${session.device.kind})` +
      (session.passedOver.length ? `: ${session.passedOver.join("; ")}` : "");
    $("file").disabled = false;
    body.dataset.state = "ready";
  } catch (error) {
    fail(error);
  }
}

const drop = $("drop");
$("file").addEventListener("change", () => $("file").files[0] && classify($("file").files[0]));
drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  drop.classList.remove("over");
  const file = event.dataTransfer?.files?.[0];
  if (file) classify(file);
});
start();
