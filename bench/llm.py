"""SmolLM2-135M-Instruct Q4_1 (the bundled demo model): prefill and decode tokens/s and peak memory
for Tessera on WebGPU-over-CPU (llvmpipe), llama.cpp on the CPU (llama-cpp-python) and
transformers on torch CPU, in one run.

    make bench        # or: .venv/bin/python bench/llm.py   (needs the bench extra for llama.cpp)
    .venv/bin/python bench/llm.py --prompt-tokens 256,3000 --decode-tokens 64

Every engine gets the same prompt (128 tokens unless ``--prompt-tokens`` says otherwise; each
length is a row of its own, so decode speed is seen at a short and a long context) and then
decodes greedily, ignoring stop tokens, so all do the same work. ``tessera`` is the float32
llvmpipe build, ``tessera-f16`` the ``webgpu-f16`` build (float16 activations and KV cache) on the
same adapter; both compile for the smallest power-of-two context (at least 1024) that holds the
prompt and the reply. Each engine runs in a subprocess of its own, so its peak resident
memory (ru_maxrss) is its own; the first run of each is a warm-up (kernel compilation, caches) and
the second is timed. An engine that is not installed is reported as missing, not skipped silently.
For Tessera the script also prints where one decode step's time goes: every kernel launch timed
alone, the largest kernels, and the rest of the step (dispatch, host work, readback).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

PROMPT_TOKENS = [128]
DECODE_TOKENS = 128
# Each engine warms up (kernel compilation, caches) on a short prompt and a few steps, so that a
# 3,000-token row does not prefill its prompt twice.
WARM_UP_PROMPT, WARM_UP_STEPS = 64, 4
THREADS = 2
SEED_TEXT = ("The history of the printing press begins in the fifteenth century, when movable type made books "
             "cheaper to produce and ideas faster to spread across Europe. ")


def prompt_ids(tokenizer_encode) -> list[int]:
    ids: list[int] = []
    while len(ids) < PROMPT_TOKENS[0]:
        ids += tokenizer_encode(SEED_TEXT)
    return ids[:PROMPT_TOKENS[0]]


def context_length() -> int:
    """The smallest power of two, at least 1024, that holds the prompt and the reply."""
    context = 1024
    while context < PROMPT_TOKENS[0] + DECODE_TOKENS + 1:
        context *= 2
    return context


def run_tessera(path: str, target: str = "llvmpipe") -> dict:
    import numpy as np
    from tessera.app import ChatSession, cached_compile

    session = ChatSession(cached_compile(path, target, context_length()))
    ids = prompt_ids(lambda t: session.tokenizer.encode(t, add_special_tokens=False).ids)
    vm = session.vm

    chunk = session.prefill_chunk

    def generate(ids=ids, steps=DECODE_TOKENS):
        session.reset()
        start = time.perf_counter()
        for begin in range(0, len(ids), chunk):  # in the build's prefill chunks, as a chat does
            end = min(begin + chunk, len(ids))
            logits = vm["prefill"](np.asarray(ids[begin:end], np.int32), end)[0]
        prefill = time.perf_counter() - start
        tokens = list(ids)
        start = time.perf_counter()
        for _ in range(steps):
            token = int(np.argmax(logits))
            tokens.append(token)
            logits = vm["decode"](np.array([token], np.int32), len(tokens))[0]
        return prefill, time.perf_counter() - start, tokens[len(ids):]

    generate(ids[:WARM_UP_PROMPT], WARM_UP_STEPS)
    prefill, decode, generated = generate()
    step = (np.array([generated[-1]], np.int32), len(ids) + DECODE_TOKENS)
    kernels = vm.profile_kernels("decode", *step)
    start = time.perf_counter()
    for _ in range(8):
        vm["decode"](*step)
    step_seconds = (time.perf_counter() - start) / 8
    by_kernel: dict[str, list] = {}
    for name, seconds in kernels:
        entry = by_kernel.setdefault(name, [0.0, 0])
        entry[0] += seconds
        entry[1] += 1
    top = sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[:6]
    from tessera.app.memory import device_memory

    profile = {"launches": len(kernels), "kernel_ms": 1e3 * sum(s for _, s in kernels),
               "step_ms": 1e3 * step_seconds, "top": [(n, 1e3 * s, count) for n, (s, count) in top],
               "weight_bytes": device_memory(vm.exe).weights}
    return _result(prefill, decode, generated, profile)


def run_llama_cpp(path: str) -> dict:
    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_ctx=context_length(), n_threads=THREADS, n_threads_batch=THREADS, n_batch=512,
                verbose=False)
    ids = prompt_ids(lambda t: llm.tokenize(t.encode(), add_bos=False, special=False))

    def last_logits():
        # Without logits_all (a context-sized copy that would inflate its memory) llama-cpp-python keeps
        # no scores; the context holds the last token's logits.
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))

    def generate(ids=ids, steps=DECODE_TOKENS):
        llm.reset()
        start = time.perf_counter()
        llm.eval(ids)
        prefill = time.perf_counter() - start
        generated = []
        start = time.perf_counter()
        for _ in range(steps):
            token = int(last_logits().argmax())
            generated.append(token)
            llm.eval([token])
        return prefill, time.perf_counter() - start, generated

    generate(ids[:WARM_UP_PROMPT], WARM_UP_STEPS)
    return _result(*generate())


def run_transformers(path: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(THREADS)
    folder, name = os.path.split(path)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.float32).eval()
    ids = prompt_ids(lambda t: tokenizer.encode(t, add_special_tokens=False))

    @torch.inference_mode()
    def generate(ids=ids, steps=DECODE_TOKENS):
        start = time.perf_counter()
        out = model(torch.tensor([ids]), use_cache=True)
        prefill = time.perf_counter() - start
        cache, logits, generated = out.past_key_values, out.logits[0, -1], []
        start = time.perf_counter()
        for _ in range(steps):
            token = int(logits.argmax())
            generated.append(token)
            out = model(torch.tensor([[token]]), past_key_values=cache, use_cache=True)
            cache, logits = out.past_key_values, out.logits[0, -1]
        return prefill, time.perf_counter() - start, generated

    generate(ids[:WARM_UP_PROMPT], WARM_UP_STEPS)
    return _result(*generate())


def gemv_bandwidth() -> float:
    """Bytes/s of bench/kernels.py's best float32 GEMV on llvmpipe (the shapes a SmolLM2 step
    reads): the ceiling a decode step's weight reads could reach through this adapter."""
    import importlib.util

    import numpy as np

    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("bench_kernels", os.path.join(here, "kernels.py"))
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    runner = kernels.open_runner("webgpu")
    rng = np.random.default_rng(0)
    best = 0.0
    for n, k in kernels.SHAPES:
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        x = rng.standard_normal((1, k)).astype(np.float32)
        _, seconds = kernels.measure_kernel(runner, "llvmpipe", x, w, 0.5)
        best = max(best, 4.0 * k * n / seconds)
    return best


def _result(prefill: float, decode: float, generated: list[int], profile: dict | None = None) -> dict:
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"prefill_tok_s": PROMPT_TOKENS[0] / prefill, "decode_tok_s": DECODE_TOKENS / decode,
            "peak_mib": peak_mib, "first_tokens": generated[:8], "profile": profile}


ENGINES = {"gemv-bandwidth": lambda path: {"bytes_per_s": gemv_bandwidth()},
           "tessera": run_tessera, "tessera-f16": lambda path: run_tessera(path, "webgpu-f16"),
           "llama.cpp": run_llama_cpp, "transformers": run_transformers}


def main() -> int:
    global DECODE_TOKENS
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-tokens", default="128", help="prompt lengths, comma separated (default 128)")
    parser.add_argument("--decode-tokens", type=int, default=DECODE_TOKENS)
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"default {','.join(ENGINES)}")
    parser.add_argument("--child", nargs=2, metavar=("ENGINE", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    DECODE_TOKENS = args.decode_tokens
    lengths = [int(n) for n in args.prompt_tokens.split(",")]
    if args.child:  # a child: one engine, one prompt length
        PROMPT_TOKENS[0] = lengths[0]
        print(json.dumps(ENGINES[args.child[0]](args.child[1])))
        return 0
    from tessera.frontend import bundled_smollm2_path

    path = bundled_smollm2_path()
    engines = [e for e in args.engines.split(",") if e != "gemv-bandwidth"]
    bandwidth = None
    if any(e.startswith("tessera") for e in engines):  # llvmpipe's roofline, measured in this run
        run = subprocess.run([sys.executable, __file__, "--child", "gemv-bandwidth", "-"], capture_output=True,
                             text=True)
        bandwidth = json.loads(run.stdout.strip().splitlines()[-1])["bytes_per_s"] if run.returncode == 0 else None
    print(f"SmolLM2-135M-Instruct Q4_1, decode {DECODE_TOKENS} tokens after each prompt, {THREADS} threads")
    print("| prompt | engine | prefill tok/s | decode tok/s | peak RSS MiB | decode vs llama.cpp | first tokens |")
    print("|---|---|---|---|---|---|---|")
    profiles = []
    for length in lengths:
        results = {}
        for engine in engines:
            run = subprocess.run([sys.executable, __file__, "--child", engine, path, "--prompt-tokens", str(length),
                                  "--decode-tokens", str(DECODE_TOKENS)], capture_output=True, text=True)
            if run.returncode != 0:
                last = (run.stderr.strip().splitlines() or ["no output"])[-1]
                print(f"| {length} | {engine} | failed or missing ({last}) |")
                continue
            results[engine] = json.loads(run.stdout.strip().splitlines()[-1])
        reference = results.get("llama.cpp", {}).get("decode_tok_s")
        for engine, r in results.items():
            ratio = f"{r['decode_tok_s'] / reference:.3f}" if reference else "-"
            print(f"| {length} | {engine} | {r['prefill_tok_s']:.1f} | {r['decode_tok_s']:.2f} | {r['peak_mib']:.0f} "
                  f"| {ratio} | {r['first_tokens']} |", flush=True)
            if r.get("profile"):
                profiles.append((length, engine, r["profile"]))
    for length, engine, profile in profiles:
        print(f"\n{engine} decode step after {length} prompt tokens: {profile['step_ms']:.1f} ms wall, "
              f"{profile['launches']} launches, {profile['kernel_ms']:.1f} ms in kernels timed one by one")
        if bandwidth:
            ceiling = bandwidth / profile["weight_bytes"]
            print(f"  roofline: {profile['weight_bytes'] / 2**20:.1f} MiB of weights a token at the best GEMV's "
                  f"{bandwidth / 1e9:.2f} GB/s (bench/kernels.py, llvmpipe, this run) = {ceiling:.1f} tok/s; "
                  f"this step reaches {1e3 / profile['step_ms'] / ceiling:.2f} of it")
        for name, ms, count in profile["top"]:
            print(f"  {name}: {ms:.2f} ms in {count} launches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
