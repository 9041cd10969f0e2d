"""runtime-native (the C runtime) against llama.cpp (llama-cpp-python) on SmolLM2, in one run: the same
GGUF, the same prompt ids, the same thread count; greedy decoding. With --engines, also runtime-native
on its GPU devices (Vulkan: lavapipe here; OpenCL: PoCL here) beside the Python VM on the same devices.

    .venv/bin/python bench/native.py [--threads 2] [--prompt-tokens 128] [--decode-tokens 128] [--rounds 3]
                                     [--engines native-cpu,llama] [--model FILE]

--model: any GGUF instead of the demo model (SmolLM2-135M-Instruct Q4_1), e.g. one of bench/requantize.py's
(the demo model in Q4_K_M, Q5_K_M, Q6_K, Q5_0); both engines run that file.

Engines (--engines, comma-separated; default native-cpu,llama): native-cpu, native-vulkan, native-opencl
(runtime-native on the cpu, vulkan and opencl builds, each on its device), vm-vulkan, vm-opencl (the
Python VM on the same vulkan and opencl builds), llama (llama.cpp). Each engine runs in its own process,
so that its peak RSS (VmHWM, the Python interpreter's baseline included for all) is its own. Prefill
tokens/s is the prompt over its prefill calls (llama.cpp: one eval of the prompt); decode tokens/s is the
decoded tokens over their calls, each call followed by an argmax on the host. The first round warms each
engine up and is not counted. The Vulkan validation layer is off (TESSERA_VULKAN_VALIDATION is removed
from the workers' environment).

Launches per decode step and host time per launch come from one decode step profiled launch by launch:
each launch is timed on the host with the device synchronized before and after it (runtime-native's
`tessera_model_set_profiling`; the Python VM's `profile_kernels` with the same host timing), and the
host time is the step's wall time outside those windows, over its launches: what the runtime spends
between kernels (the program, shapes, bindings). For the Python VM the step is its launches alone
(profile_kernels runs no read-back), so its figure is a lower bound. Load times are the first load with
an empty pipeline/program cache folder and a second load reading it. Then a per-kernel profile of the
native runtime's decode on the CPU. llama-cpp-python comes with `pip install -e '.[bench]'` (make bench).
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

# engine -> (title, worker, target of the build it runs, runtime-native device)
ENGINES = {
    "native-cpu": ("tessera native (cpu)", "native", "cpu", "cpu"),
    "native-vulkan": ("tessera native (vulkan, lavapipe)", "native", "vulkan", "vulkan"),
    "native-opencl": ("tessera native (opencl, PoCL)", "native", "opencl", "opencl"),
    "vm-vulkan": ("Python VM (vulkan, lavapipe)", "vm", "vulkan", None),
    "vm-opencl": ("Python VM (opencl, PoCL)", "vm", "opencl", None),
    "llama": ("llama.cpp", "llama", None, None),
}
PROFILED_STEPS = 32  # decode steps of the native CPU's per-kernel profile


def time_rounds(prefill, decode, prompt_length: int, steps: int, rounds: int, reset) -> list:
    """(prefill tok/s, decode tok/s, tokens, the calling thread's CPU seconds per decode step) per round,
    greedy: ``prefill()`` and ``decode(token, total)`` give the last position's logits."""
    results = []
    for _ in range(rounds + 1):
        reset()
        start = time.perf_counter()
        logits = prefill()
        prefilled = time.perf_counter()
        thread_start = time.thread_time()
        tokens = [int(logits[0].argmax())]
        while len(tokens) < steps:
            logits = decode(tokens[-1], prompt_length + len(tokens))
            tokens.append(int(logits[0].argmax()))
        done = time.perf_counter()
        results.append((prompt_length / (prefilled - start), (steps - 1) / max(done - prefilled, 1e-9), tokens,
                        (time.thread_time() - thread_start) / max(steps - 1, 1)))
    return results


def chunked_prefill(call, directory: str, prompt: np.ndarray):
    """The prompt in chunks of the build's prefill chunk, each after the last (as the runtimes do)."""
    with open(os.path.join(directory, "chat-config.json"), encoding="utf-8") as f:
        chunk = json.load(f).get("prefill_chunk") or len(prompt)

    def prefill():
        for begin in range(0, len(prompt), chunk):
            end = min(begin + chunk, len(prompt))
            logits = call("prefill", prompt[begin:end], end)
        return logits

    return prefill


def run_native(directory: str, ids: list[int], steps: int, rounds: int, threads: int, device: str = "cpu") -> dict:
    import tempfile

    from tessera.native import NativeModel

    with tempfile.TemporaryDirectory() as cache:  # an empty pipeline cache, then the one the first load wrote
        loads = []
        for _ in range(2):
            start = time.perf_counter()
            NativeModel(directory, n_threads=threads, device=device, cache_dir=cache).close()
            loads.append(time.perf_counter() - start)
    model = NativeModel(directory, n_threads=threads, device=device)
    prompt = np.asarray(ids, np.int32)
    prefill = chunked_prefill(lambda *args: model.call(*args)[0], directory, prompt)
    decode = lambda token, total: model.call("decode", np.array([token], np.int32), total)[0]  # noqa: E731
    results = time_rounds(prefill, decode, len(prompt), steps, rounds, model.reset_state)
    model.reset_state()
    token = int(prefill()[0].argmax())
    outside = []  # per step: its wall time outside the timed launches
    totals: dict[str, list] = {}
    for step in range(PROFILED_STEPS):
        model.profile(True)  # clears the totals: this step's launches only
        start = time.perf_counter()
        token = int(decode(token, len(prompt) + step + 1)[0].argmax())
        wall = time.perf_counter() - start
        rows = model.kernel_profile()
        outside.append(wall - sum(row[2] for row in rows))
        for name, launches, seconds in rows:
            entry = totals.setdefault(name, [0, 0.0])
            entry[0] += launches
            entry[1] += seconds
    model.profile(False)
    profile = sorted(((name, n, seconds) for name, (n, seconds) in totals.items()), key=lambda row: -row[2])
    launches = sum(row[1] for row in profile) / PROFILED_STEPS
    return {"rounds": results[1:], "profile": profile, "launches_per_step": launches, "load_s": loads,
            "host_us_per_launch": 1e6 * statistics.median(outside) / launches, "device": model.device_description}


def run_vm(directory: str, ids: list[int], steps: int, rounds: int) -> dict:
    import types

    from tessera.vm import Executable, VirtualMachine
    from tessera.vm.devices import Device

    loads = []
    for _ in range(2):  # the Python VM's devices keep no cache of their own: both loads compile
        start = time.perf_counter()
        vm = VirtualMachine(Executable.load(directory))
        loads.append(time.perf_counter() - start)
    prompt = np.asarray(ids, np.int32)
    prefill = chunked_prefill(lambda *args: vm[args[0]](*args[1:]), directory, prompt)
    decode = lambda token, total: vm["decode"](np.array([token], np.int32), total)  # noqa: E731
    results = time_rounds(prefill, decode, len(prompt), steps, rounds, vm.reset_state)
    # Each launch timed on the host around a synchronize, as runtime-native's profile times it (a device's
    # own timed_launch may read GPU timestamps instead, which leave the launch's host work outside).
    vm.device.timed_launch = types.MethodType(Device.timed_launch, vm.device)
    step = (np.array([results[-1][2][-1]], np.int32), len(prompt) + steps)
    outside, kernels = [], []
    for _ in range(8):
        start = time.perf_counter()
        kernels = vm.profile_kernels("decode", *step)
        outside.append(time.perf_counter() - start - sum(seconds for _, seconds in kernels))
    return {"rounds": results[1:], "launches_per_step": len(kernels), "device": vm.device.kind,
            "host_us_per_launch": 1e6 * statistics.median(outside) / len(kernels), "load_s": loads}


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


def decode_loop(args) -> None:
    """``--loop SECONDS``: prefill the prompt once, then decode for that long, for a sampling profiler
    (perf record) to say whose code the host runs per launch; prints the steps taken."""
    prompt = np.asarray(args.ids, np.int32)
    if args.worker == "native":
        from tessera.native import NativeModel

        model = NativeModel(args.directory, n_threads=args.threads, device=args.device)
        call = lambda *a: model.call(*a)[0]  # noqa: E731
    else:
        from tessera.vm import Executable, VirtualMachine

        vm = VirtualMachine(Executable.load(args.directory))
        call = lambda name, *a: vm[name](*a)  # noqa: E731
    call("prefill", prompt, len(prompt))
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < args.loop:
        call("decode", np.array([5], np.int32), len(prompt) + 1 + steps % 32)
        steps += 1
    print(f"{steps} decode steps in {time.perf_counter() - start:.1f} s")


def worker(args) -> None:
    if args.loop:
        decode_loop(args)
        return
    baseline = peak_rss_mib()
    if args.worker == "native":
        result = run_native(args.directory, args.ids, args.decode_tokens, args.rounds, args.threads, args.device)
    elif args.worker == "vm":
        result = run_vm(args.directory, args.ids, args.decode_tokens, args.rounds)
    else:
        result = run_llama(args.gguf, args.ids, args.decode_tokens, args.rounds, args.threads, args.context)
    result["peak_rss_mib"] = peak_rss_mib()
    result["baseline_rss_mib"] = baseline
    print(json.dumps(result))


# -- the comparison --------------------------------------------------------------------------------

def spawn(kind: str, args, directory: str, gguf: str, ids: list[int], device: str | None = None) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--directory", directory, "--gguf", gguf,
               "--ids", ",".join(map(str, ids)), "--threads", str(args.threads), "--rounds", str(args.rounds),
               "--decode-tokens", str(args.decode_tokens), "--context", str(args.context)]
    if device:
        command += ["--device", device]
    env = {k: v for k, v in os.environ.items() if k != "TESSERA_VULKAN_VALIDATION"}
    result = subprocess.run(command, capture_output=True, text=True, env=env)
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
    parser.add_argument("--engines", default="native-cpu,llama",
                        help=f"comma-separated, of {', '.join(ENGINES)} (default native-cpu,llama)")
    parser.add_argument("--worker", choices=("native", "vm", "llama"))
    parser.add_argument("--directory")
    parser.add_argument("--gguf")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", help="the GGUF to run (default: the demo model, SmolLM2-135M-Instruct Q4_1)")
    parser.add_argument("--ids", type=lambda text: [int(t) for t in text.split(",")])
    parser.add_argument("--loop", type=float, help="with --worker native or vm: decode for this many seconds, for "
                                                   "perf record (RESULTS.md, issue 34)")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    from tessera.app.compile import cached_compile
    from tessera.frontend import bundled_smollm2_path

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        raise SystemExit(f"--engines: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(ENGINES)}")
    gguf = args.model or bundled_smollm2_path()
    folders = {target: cached_compile(gguf, target, args.context)
               for target in dict.fromkeys(ENGINES[e][2] or "cpu" for e in engines)}
    ids = prompt_ids(folders.get("cpu") or next(iter(folders.values())), args.prompt_tokens)
    results = {}
    for engine in engines:
        _, kind, target, device = ENGINES[engine]
        results[engine] = spawn(kind, args, folders[target or "cpu"], gguf, ids, device)
    print(f"{os.path.basename(gguf)}, {len(ids)} prompt tokens, {args.decode_tokens} greedy tokens, "
          f"{args.threads} threads, context {args.context}\n")
    print("| round | engine | prefill tok/s | decode tok/s |")
    print("|---|---|---|---|")
    for index in range(args.rounds):
        for engine, result in results.items():
            prefill, decode = result["rounds"][index][:2]
            print(f"| {index + 1} | {ENGINES[engine][0]} | {prefill:.1f} | {decode:.1f} |")
    medians = {engine: (statistics.median(r[0] for r in result["rounds"]),
                        statistics.median(r[1] for r in result["rounds"])) for engine, result in results.items()}
    print("\n| engine | prefill tok/s | decode tok/s | peak RSS MiB | launches / decode step | host us / launch "
          "(profiled) | calling thread's CPU us / launch | load s (empty cache, second) |")
    print("|---|---|---|---|---|---|---|---|")
    for engine, result in results.items():
        launches = result.get("launches_per_step")
        host = result.get("host_us_per_launch")
        loads = result.get("load_s")
        thread = f"{1e6 * statistics.median(r[3] for r in result['rounds']) / launches:.1f}" if launches else "-"
        print(f"| {ENGINES[engine][0]} | {medians[engine][0]:.1f} | {medians[engine][1]:.1f} | "
              f"{result['peak_rss_mib']:.0f} | {f'{launches:.0f}' if launches else '-'} | "
              f"{f'{host:.1f}' if host is not None else '-'} | {thread} | "
              f"{f'{loads[0]:.2f}, {loads[1]:.2f}' if loads else '-'} |")
    for engine, result in results.items():
        if result.get("device"):
            print(f"\n{engine}: {result['device']}", end="")
    print()
    for kind in ("vulkan", "opencl"):
        native, vm = results.get(f"native-{kind}"), results.get(f"vm-{kind}")
        if native and vm:
            a, b = native["host_us_per_launch"], vm["host_us_per_launch"]
            threads = [statistics.median(r[3] for r in x["rounds"]) / x["launches_per_step"] for x in (native, vm)]
            print(f"\n{kind}: host time per launch, runtime-native / Python VM: profiled {a:.1f} / {b:.1f} us "
                  f"({a / b:.3f}x); the calling thread's CPU {1e6 * threads[0]:.1f} / {1e6 * threads[1]:.1f} us "
                  f"({threads[0] / threads[1]:.3f}x); greedy tokens equal: "
                  f"{sum(x == y for x, y in zip(native['rounds'][0][2], vm['rounds'][0][2]))} of {args.decode_tokens}")
    native, llama = results.get("native-cpu"), results.get("llama")
    if native and llama:
        print(f"\nmedian ratios, native / llama.cpp: prefill {medians['native-cpu'][0] / medians['llama'][0]:.2f}x, "
              f"decode {medians['native-cpu'][1] / medians['llama'][1]:.2f}x")
        print(f"peak RSS (MiB, Python baseline {native['baseline_rss_mib']:.0f} / {llama['baseline_rss_mib']:.0f} "
              f"included): native {native['peak_rss_mib']:.0f}, llama.cpp {llama['peak_rss_mib']:.0f} "
              f"({native['peak_rss_mib'] / llama['peak_rss_mib']:.2f}x)")
        same = sum(a == b for a, b in zip(native["rounds"][0][2], llama["rounds"][0][2]))
        print(f"greedy tokens equal to llama.cpp's: {same} of {args.decode_tokens} "
              f"(first tokens: native {native['rounds'][0][2][:8]}, llama.cpp {llama['rounds'][0][2][:8]})")
    if native:
        total = sum(row[2] for row in native["profile"])
        print(f"\nnative decode profile ({PROFILED_STEPS} steps), the kernels that take the most time:\n")
        print("| kernel | launches | ms per step | share |")
        print("|---|---|---|---|")
        for name, launches, seconds in native["profile"][:12]:
            print(f"| {name} | {launches} | {1000 * seconds / PROFILED_STEPS:.2f} | {100 * seconds / total:.1f}% |")


if __name__ == "__main__":
    main()
