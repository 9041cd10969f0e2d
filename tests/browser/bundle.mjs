// Fixtures for the chat-page tests: a bundle made by `tessera bundle`, served by `tessera serve`,
// and the Python VM's greedy reply for the same executable (`tessera chat DIR --json`).
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const VENV_BIN = join(ROOT, ".venv", "bin");
export const FIXTURES = join(ROOT, "build", "browser-fixtures");
export const ARTIFACTS = join(ROOT, "build", "artifacts");
/** No shard cache: a Node test loads every file afresh. */
export const NO_CACHE = { kind: "none", get: async () => undefined, put: async () => undefined };

/** fetch() over file: URLs, for runtime-js's loader in Node; a missing file is a 404. */
export async function fileFetch(url) {
  try {
    return new Response(await readFile(new URL(url)));
  } catch {
    return new Response("not found", { status: 404 });
  }
}

/** Run a Tessera command line (or the venv's python) and return its stdout. */
export function tessera(args, program = "tessera") {
  return execFileSync(join(VENV_BIN, program), args, { cwd: ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"],
    timeout: 900_000 });
}

/** The tiny random-weight model as a GGUF file (tests/fixtures/tiny_gguf.py), made once. */
export function tinyGGUF() {
  const path = join(FIXTURES, "tiny.gguf");
  if (!existsSync(path)) {
    mkdirSync(FIXTURES, { recursive: true });
    tessera([join(ROOT, "tests", "fixtures", "tiny_gguf.py"), path], "python");
  }
  return path;
}

/** A tiny random-weight GGUF of the zoo (tests/fixtures/zoo_gguf.py: "qwen2", "llama-spm"), written
 * afresh (a few seconds) so that an edit to the fixture is never hidden by an older file. */
export function zooGGUF(family) {
  const path = join(FIXTURES, `zoo-${family}.gguf`);
  mkdirSync(FIXTURES, { recursive: true });
  tessera([join(ROOT, "tests", "fixtures", "zoo_gguf.py"), family, path], "python");
  return path;
}

/** Bundle ``model`` (a .gguf path, or undefined for the bundled SmolLM2) into build/browser-fixtures/NAME. */
export function bundle(name, model, context = 256, targets = "webgpu,wasm") {
  const output = join(FIXTURES, name);
  tessera(["bundle", ...(model ? [model] : []), "-o", output, "--context", String(context), "--targets", targets]);
  return output;
}

/** The reply of the Python VM (wgpu-py) to one greedy turn, for a compiled model folder. */
export function pythonGreedyReply(modelFolder, prompt, maxTokens) {
  const out = tessera(["chat", modelFolder, "--prompt", prompt, "--temperature", "0", "--max-tokens", String(maxTokens),
    "--json"]);
  return JSON.parse(out).reply;
}

/** The origin a bundle folder is fetched from in Node (folderFetch). */
export const ORIGIN = "http://bundle.test/";

/** fetch() over a bundle folder on disk, recording the URLs asked for. */
export function folderFetch(root, requests = []) {
  return async (url) => {
    requests.push(url);
    try {
      return new Response(await readFile(join(root, new URL(url).pathname)));
    } catch {
      return new Response("not found", { status: 404 });
    }
  };
}

/** `tessera serve SOURCE --port 0 [ARGS]` (a bundle's site, or a model served with its API); resolves with its URL
 * and a stop function. */
export function serve(source, args = []) {
  const child = spawn(join(VENV_BIN, "tessera"), ["serve", source, "--port", "0", ...args], { cwd: ROOT });
  return new Promise((resolvePromise, reject) => {
    let output = "";
    child.stdout.on("data", (data) => {
      output += data;
      const match = output.match(/at (http:\/\/127\.0\.0\.1:\d+\/)/);
      if (match) resolvePromise({ url: match[1], stop: () => child.kill() });
    });
    child.stderr.on("data", (data) => { output += data; });
    child.on("exit", (code) => reject(new Error(`tessera serve exited (${code}): ${output}`)));
  });
}
