"""SmolLM2 in headless Chromium: Tessera on WebGPU (SwiftShader) and on WASM, next to @wllama/wllama
(llama.cpp compiled to WebAssembly, from npm) on the same GGUF, in the same browser and run.

For each engine: a cold run (fresh browser profile: weights downloaded and compiled) and a cached
run (a reload), each one greedy chat reply of up to 24 tokens to the same prompt. Reports time to
first token (load included) and decode tokens/s, and the ratios Tessera / wllama.

    .venv/bin/python bench/browser.py            (make bench runs it)
    BENCH_TOKENS=32 .venv/bin/python bench/browser.py tessera-wasm,wllama-wasm
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SITE = os.path.join(ROOT, "build", "bench-browser")


def build_site() -> str:
    from tessera.app.bundle import bundle_model, model_id
    from tessera.frontend import bundled_smollm2_path

    gguf = bundled_smollm2_path()
    folder = bundle_model(gguf, SITE, context_length=512)
    for page in ("tessera.html", "wllama.html"):
        shutil.copy(os.path.join(ROOT, "bench", "browser", page), os.path.join(SITE, page))
    wllama = os.path.join(ROOT, "node_modules", "@wllama", "wllama", "esm")
    if not os.path.exists(wllama):
        sys.exit("bench/browser.py needs @wllama/wllama: run `npm ci` (make setup)")
    if os.path.exists(os.path.join(SITE, "wllama")):
        shutil.rmtree(os.path.join(SITE, "wllama"))
    os.makedirs(os.path.join(SITE, "wllama", "wasm"))
    shutil.copy(os.path.join(wllama, "index.js"), os.path.join(SITE, "wllama", "index.js"))
    shutil.copy(os.path.join(wllama, "wasm", "wllama.wasm"), os.path.join(SITE, "wllama", "wasm", "wllama.wasm"))
    os.makedirs(os.path.join(SITE, "gguf"), exist_ok=True)
    shutil.copy(gguf, os.path.join(SITE, "gguf", "model.gguf"))
    return f"models/{model_id(gguf)}/" if folder else ""


def serve_in_background() -> str:
    from tessera.app.serve import serve

    ready = threading.Event()
    holder = {}

    def started(url):
        holder["url"] = url
        ready.set()

    threading.Thread(target=serve, args=(SITE, 0), kwargs={"ready": started}, daemon=True).start()
    ready.wait(30)
    return holder["url"]


def main() -> int:
    model = build_site()
    url = serve_in_background()
    command = ["node", os.path.join(ROOT, "bench", "browser", "run.mjs"), url, url + model, url + "gguf/model.gguf"]
    if len(sys.argv) > 1:
        command.append(sys.argv[1])
    output = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if output.returncode != 0:
        print(output.stderr, file=sys.stderr)
        return 1
    results = [json.loads(line) for line in output.stdout.splitlines() if line.startswith("{")]
    print(f"SmolLM2-135M-Instruct Q4_1, headless Chromium, greedy reply of up to "
          f"{os.environ.get('BENCH_TOKENS', 24)} tokens, {os.cpu_count()} cores")
    print(f"{'engine':16} {'run':7} {'load s':>7} {'TTFT s':>7} {'decode tok/s':>13}  tokens")
    for r in results:
        print(f"{r['engine']:16} {r['run']:7} {r['loadSeconds']:7.2f} {r['ttftSeconds']:7.2f} "
              f"{r['decodeTokensPerSecond']:13.2f}  {r['tokens']}")
    by = {(r["engine"], r["run"]): r for r in results}
    peer = by.get(("wllama-wasm", "cached"))
    if peer:
        for name in ("tessera-wasm", "tessera-webgpu"):
            ours = by.get((name, "cached"))
            if ours:
                decode = ours["decodeTokensPerSecond"] / peer["decodeTokensPerSecond"]
                print(f"{name} / wllama-wasm: decode {decode:.2f}x, "
                      f"cached TTFT {peer['ttftSeconds'] / ours['ttftSeconds']:.2f}x as fast")
    for r in results:
        if r["run"] == "cold":
            print(f"{r['engine']} reply: {r['text'][:80]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
