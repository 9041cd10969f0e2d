"""runtime-native (the C runtime, CPU backend) against llama.cpp (llama-cpp-python) on SmolLM2, in one
run: the same GGUF, the same prompt ids, the same thread count; greedy decoding.

    .venv/bin/python bench/native.py [--threads 2] [--prompt-tokens 128] [--decode-tokens 128] [--rounds 3]

Each engine runs in its own process, so that its peak RSS (VmHWM, the Python interpreter's
baseline included for both) is its own. Prefill tokens/s is the prompt over one prefill call
(llama.cpp: one eval of the prompt); decode tokens/s is the decoded tokens over their calls, each
call followed by an argmax on the host. The first round warms each engine up and is not counted.
Then a per-kernel profile of the native runtime's decode (`tessera_model_set_profiling`).
llama-cpp-python comes with `pip install -e '.[bench]'` (make bench).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

TEXT = ("Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker "
        "named Elias. Every morning he opened the shutters of his workshop, wound the hundred clocks that lined "
        "its walls, and listened to them tick together like rain on a roof. Children came to watch him work, "
        "and he told them stories about the gears: how each one turned another, and how a single missing tooth "
        "could stop the whole machine. One winter, a stranger arrived with a broken pocket watch that no one "
        "else could repair. It was made of a metal Elias had never seen, and its hands moved backwards. ") * 30


def prompt_ids(directory: str, count: int) -> list[int]:
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(os.path.join(directory, "tokenizer.json")).encode(TEXT).ids
    if len(ids) < count:
        raise SystemExit(f"the benchmark text has only {len(ids)} tokens")
    return ids[:count]


# -- workers (one process each) -------------------------------------------------------------------

def run_native(directory: str, ids: list[int], steps: int, rounds: int, threads: int) -> dict:
    from tessera.native import NativeModel

    model = NativeModel(directory, n_threads=threads)
    prompt = np.asarray(ids, np.int32)
    with open(os.path.join(directory, "chat-config.json"), encoding="utf-8") as f:
        chunk = json.load(f).get("prefill_chunk") or len(prompt)

    def prefill():
        """The prompt in chunks of the build's prefill chunk, each after the last (as the runtimes do)."""
        for begin in range(0, len(prompt), chunk):
            end = min(begin + chunk, len(prompt))
            logits = model.call("prefill", prompt[begin:end], end)[0]
        return logits

    results = []
    for _ in range(rounds + 1):
        model.reset_state()
        start = time.perf_counter()
        logits = prefill()
        prefilled = time.perf_counter()
        tokens = [int(logits[0].argmax())]
        while len(tokens) < steps:
            logits = model.call("decode", np.array([tokens[-1]], np.int32), len(prompt) + len(tokens))[0]
            tokens.append(int(logits[0].argmax()))
        done = time.perf_counter()
        results.append((len(prompt) / (prefilled - start), (steps - 1) / (done - prefilled), tokens))
    model.profile(True)
    model.reset_state()
    logits = prefill()
    token = int(logits[0].argmax())
    model.profile(True)  # the decode steps only
    for step in range(32):
        logits = model.call("decode", np.array([token], np.int32), len(prompt) + step + 1)[0]
        token = int(logits[0].argmax())
    profile = sorted(model.kernel_profile(), key=lambda row: -row[2])
    return {"rounds": results[1:], "profile": profile}


def run_llama(gguf: str, ids: list[int], steps: int, rounds: int, threads: int, context: int) -> dict:
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=gguf, n_ctx=context, n_threads=threads, n_threads_batch=threads, n_batch=512,
                verbose=False)
    vocab = llm.n_vocab()

    def last_logits() -> np.ndarray:  # (Llama.scores stays zero unless every position's logits are kept)
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(vocab,))

    results = []
    for _ in range(rounds + 1):
        llm.reset()
        start = time.perf_counter()
        llm.eval(ids)
        prefilled = time.perf_counter()
        tokens = [int(np.argmax(last_logits()))]
        while len(tokens) < steps:
            llm.eval([tokens[-1]])
            tokens.append(int(np.argmax(last_logits())))
        done = time.perf_counter()
        results.append((len(ids) / (prefilled - start), (steps - 1) / (done - prefilled), tokens))
    return {"rounds": results[1:]}


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the parent)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def worker(args) -> None:
    baseline = peak_rss_mib()
    if args.worker == "native":
        result = run_native(args.directory, args.ids, args.decode_tokens, args.rounds, args.threads)
    else:
        result = run_llama(args.gguf, args.ids, args.decode_tokens, args.rounds, args.threads, args.context)
    result["peak_rss_mib"] = peak_rss_mib()
    result["baseline_rss_mib"] = baseline
    print(json.dumps(result))


# -- the comparison --------------------------------------------------------------------------------

def spawn(kind: str, args, directory: str, gguf: str, ids: list[int]) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--directory", directory, "--gguf", gguf,
               "--ids", ",".join(map(str, ids)), "--threads", str(args.threads), "--rounds", str(args.rounds),
               "--decode-tokens", str(args.decode_tokens), "--context", str(args.context)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"the {kind} worker failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--worker", choices=("native", "llama"))
    parser.add_argument("--directory")
    parser.add_argument("--gguf")
    parser.add_argument("--ids", type=lambda text: [int(t) for t in text.split(",")])
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    from tessera.app.compile import cached_compile
    from tessera.frontend import bundled_smollm2_path

    gguf = bundled_smollm2_path()
    directory = cached_compile(gguf, "cpu", args.context)
    ids = prompt_ids(directory, args.prompt_tokens)
    native = spawn("native", args, directory, gguf, ids)
    llama = spawn("llama", args, directory, gguf, ids)
    print(f"SmolLM2-135M-Instruct Q4_1, {len(ids)} prompt tokens, {args.decode_tokens} greedy tokens, "
          f"{args.threads} threads, context {args.context}\n")
    print("| round | engine | prefill tok/s | decode tok/s |")
    print("|---|---|---|---|")
    for index in range(args.rounds):
        for title, result in (("tessera native (cpu)", native), ("llama.cpp", llama)):
            prefill, decode, _ = result["rounds"][index]
            print(f"| {index + 1} | {title} | {prefill:.1f} | {decode:.1f} |")
    medians = {title: (statistics.median(r[0] for r in result["rounds"]),
                       statistics.median(r[1] for r in result["rounds"]))
               for title, result in (("native", native), ("llama", llama))}
    print(f"\nmedian ratios, native / llama.cpp: prefill {medians['native'][0] / medians['llama'][0]:.2f}x, "
          f"decode {medians['native'][1] / medians['llama'][1]:.2f}x")
    print(f"peak RSS (MiB, Python baseline {native['baseline_rss_mib']:.0f} / {llama['baseline_rss_mib']:.0f} "
          f"included): native {native['peak_rss_mib']:.0f}, llama.cpp {llama['peak_rss_mib']:.0f} "
          f"({native['peak_rss_mib'] / llama['peak_rss_mib']:.2f}x)")
    same = sum(a == b for a, b in zip(native["rounds"][0][2], llama["rounds"][0][2]))
    print(f"greedy tokens equal to llama.cpp's: {same} of {args.decode_tokens} "
          f"(first tokens: native {native['rounds'][0][2][:8]}, llama.cpp {llama['rounds'][0][2][:8]})")
    total = sum(row[2] for row in native["profile"])
    print("\nnative decode profile (32 steps), the kernels that take the most time:\n")
    print("| kernel | launches | ms per step | share |")
    print("|---|---|---|---|")
    for name, launches, seconds in native["profile"][:12]:
        print(f"| {name} | {launches} | {1000 * seconds / 32:.2f} | {100 * seconds / total:.1f}% |")


if __name__ == "__main__":
    main()
