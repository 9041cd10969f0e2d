// Launch Debian's Chromium with WebGPU on (SwiftShader on a machine without a GPU) and serve
// a blank page on 127.0.0.1, where WebGPU is available (a secure context). Never downloads a browser.
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { extname, join, normalize } from "node:path";
import { chromium } from "playwright-core";

export const CHROMIUM_FLAGS = [
  "--headless=new", "--no-sandbox", "--enable-unsafe-webgpu", "--disable-background-networking",
  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
];

const TYPES = { ".js": "text/javascript", ".mjs": "text/javascript", ".json": "application/json", ".wgsl": "text/plain" };

/** A handler for openWebGPUPage that serves the files below ``folders`` (absolute paths), each at its
 * path relative to ``root``; anything else, and a missing file, is a 404. */
export function serveFolders(root, folders) {
  const inside = folders.map((folder) => normalize(folder).replace(/\/+$/, "") + "/");
  return async (request, response) => {
    const path = normalize(join(root, decodeURIComponent(new URL(request.url, "http://127.0.0.1").pathname)));
    if (!inside.some((prefix) => path.startsWith(prefix))) {
      response.writeHead(404).end();
      return;
    }
    try {
      response.writeHead(200, { "content-type": TYPES[extname(path)] ?? "application/octet-stream" }).end(await readFile(path));
    } catch {
      response.writeHead(404).end();
    }
  };
}

/** ``handle(request, response)``, when given, answers every request but the page's own ("/"):
 * files a test serves from the same origin. */
export async function openWebGPUPage(handle) {
  const server = createServer((request, response) => {
    if (handle && new URL(request.url, "http://127.0.0.1").pathname !== "/") {
      handle(request, response);
      return;
    }
    response.writeHead(200, { "content-type": "text/html" });
    response.end("<!doctype html><title>tessera</title>");
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium",
    args: CHROMIUM_FLAGS,
  });
  const page = await browser.newPage();
  const url = `http://127.0.0.1:${server.address().port}/`;
  await page.goto(url);
  const close = async () => {
    await browser.close();
    server.close();
  };
  return { page, close, url };
}
