"""SmolLM2 in headless Chromium: Tessera on WebGPU (SwiftShader) and on WASM, next to @wllama/wllama
(llama.cpp compiled to WebAssembly, from npm) on the same GGUF, in the same browser and run.

For each engine: a cold run (fresh browser profile: weights downloaded and compiled) and a cached
run (a reload), each one greedy chat reply of up to 24 tokens to the same prompt. Reports time to
first token (load included), decode tokens/s and peak memory (the proportional set size of all
the browser's processes, summed, sampled every 100 ms; each engine runs in a browser of its own, and
"idle" is that sum with a blank page), and the ratios Tessera / wllama.

    .venv/bin/python bench/browser.py            (make bench runs it)
    BENCH_TOKENS=32 .venv/bin/python bench/browser.py tessera-wasm,wllama-wasm
    .venv/bin/python bench/browser.py tessera-wasm,wllama-wasm --prompt-tokens 3000
    BENCH_THREADS=2 .venv/bin/python bench/browser.py tessera-wasm,tessera-wasm-threads,wllama-wasm-threads

BENCH_ROUNDS=N repeats each engine's cached run N times and reports the median of their decode speeds
and times to first token (the ratios too), which steadies the figures on a busy machine.

The site is served by `tessera serve`, so the pages are cross-origin isolated: ``tessera-wasm`` and
``wllama-wasm`` run on one thread, ``tessera-wasm-threads`` and ``wllama-wasm-threads`` on BENCH_THREADS
(default 2; asked for by name only). Each run's line says the threads it ran on.

``--prompt-tokens N`` replaces the short prompt with a text of N tokens (a paragraph repeated, cut
by SmolLM2's tokenizer; the chat template adds a few), and sizes both engines' context for it and
the reply (Tessera's bundle and wllama's n_ctx alike), so that decode runs at a long context.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SITE = os.path.join(ROOT, "build", "bench-browser")


LONG_TEXT = ("The history of the printing press begins in the fifteenth century, when movable type made books "
             "cheaper to produce and ideas faster to spread across Europe. ")


def build_site(context: int, targets: tuple[str, ...]) -> str:
    from tessera.app.bundle import bundle_model, model_id
    from tessera.frontend import bundled_smollm2_path

    gguf = bundled_smollm2_path()
    folder = bundle_model(gguf, SITE, context_length=context, targets=targets)
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

    threading.Thread(target=serve, args=(SITE,), kwargs={"port": 0, "ready": started}, daemon=True).start()
    ready.wait(30)
    return holder["url"]


def long_prompt(tokens: int) -> str:
    """A text of ``tokens`` tokens of SmolLM2's vocabulary (the bundled model's tokenizer)."""
    from tessera.frontend import bundled_smollm2_path, load_gguf
    from tessera.frontend.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(load_gguf(bundled_smollm2_path()).tokenizer)
    ids: list[int] = []
    while len(ids) < tokens:
        ids += tokenizer.encode(LONG_TEXT, add_special_tokens=False).ids
    return tokenizer.decode(ids[:tokens])


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engines", nargs="?", help="comma separated (default: all three)")
    parser.add_argument("--prompt-tokens", type=int, help="a long prompt of this many tokens (default: a short one)")
    args = parser.parse_args()
    replies = int(os.environ.get("BENCH_TOKENS", 24))
    context = 512
    while args.prompt_tokens and context < args.prompt_tokens + replies + 64:  # the template and the reply
        context *= 2
    engines = (args.engines or "tessera-webgpu,tessera-wasm,wllama-wasm").split(",")
    targets = ("webgpu-f16", "webgpu", "wasm") if "tessera-webgpu" in engines else ("wasm",)
    if any(e.endswith("-threads") for e in engines):
        print(f"threads: {os.environ.get('BENCH_THREADS', 2)} for the -threads engines, on {os.cpu_count()} cores")
    model = build_site(context, targets)
    url = serve_in_background()
    command = ["node", os.path.join(ROOT, "bench", "browser", "run.mjs"), url, url + model, url + "gguf/model.gguf"]
    if args.engines:
        command.append(args.engines)
    env = {**os.environ, "BENCH_CONTEXT": str(context)}
    if args.prompt_tokens:
        env["BENCH_PROMPT"] = long_prompt(args.prompt_tokens)
    output = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)
    if output.returncode != 0:
        print(output.stderr, file=sys.stderr)
        return 1
    results = [json.loads(line) for line in output.stdout.splitlines() if line.startswith("{")]
    prompt = f"a prompt of {args.prompt_tokens} tokens, " if args.prompt_tokens else ""
    print(f"SmolLM2-135M-Instruct Q4_1, headless Chromium, greedy reply of up to {replies} tokens, {prompt}"
          f"context {context}, {os.cpu_count()} cores")
    print(f"{'engine':20} {'run':7} {'threads':>7} {'load s':>7} {'TTFT s':>7} {'decode tok/s':>13}  tokens"
          "  prompt tokens  peak MiB  idle MiB")
    for r in results:
        print(f"{r['engine']:20} {r['run']:7} {r.get('threads') or '-':>7} {r['loadSeconds']:7.2f} "
              f"{r['ttftSeconds']:7.2f} {r['decodeTokensPerSecond']:13.2f}  {r['tokens']:6}  "
              f"{r.get('promptTokens', '?'):>13}  {r['peakMiB']:8.0f}  {r['idleMiB']:8.0f}")
    by = {(r["engine"], r["run"]): r for r in results if r["run"] == "cold"}
    for engine in dict.fromkeys(r["engine"] for r in results):
        cached = [r for r in results if r["engine"] == engine and r["run"] == "cached"]
        if cached:
            middle = {key: statistics.median(r[key] for r in cached)
                      for key in ("decodeTokensPerSecond", "ttftSeconds")}
            by[(engine, "cached")] = {**cached[0], **middle}
            if len(cached) > 1:
                print(f"{engine}: median of {len(cached)} cached runs: decode {middle['decodeTokensPerSecond']:.2f} "
                      f"tok/s, TTFT {middle['ttftSeconds']:.2f} s")
    pairs = [("tessera-wasm", "wllama-wasm"), ("tessera-webgpu", "wllama-wasm"),
             ("tessera-wasm-threads", "wllama-wasm-threads"), ("tessera-wasm-threads", "tessera-wasm"),
             ("wllama-wasm-threads", "wllama-wasm")]
    for name, other in pairs:
        ours, peer = by.get((name, "cached")), by.get((other, "cached"))
        if ours and peer:
            decode = ours["decodeTokensPerSecond"] / peer["decodeTokensPerSecond"]
            print(f"{name} / {other}: decode {decode:.2f}x, "
                  f"cached TTFT {peer['ttftSeconds'] / ours['ttftSeconds']:.2f}x as fast")
    for name in ("tessera-wasm", "tessera-webgpu"):
        ours, peer = by.get((name, "cold")), by.get(("wllama-wasm", "cold"))
        if ours and peer:  # a cold run's browser held nothing before it: its peak above idle is the engine's
            mine, theirs = ours["peakMiB"] - ours["idleMiB"], peer["peakMiB"] - peer["idleMiB"]
            print(f"{name} / wllama-wasm: memory above an idle browser (cold run) {mine:.0f} vs {theirs:.0f} MiB, "
                  f"{mine / theirs:.2f}x")
    for r in results:
        if r["run"] == "cold":
            print(f"{r['engine']} reply: {r['text'][:80]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
