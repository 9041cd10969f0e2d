"""Real architectures, each engine beside its peer in one run: ResNet-50, MobileNetV2, ViT-B/16,
BERT-base (128 tokens) and Whisper-tiny's encoder (4 layers, 384 wide, 3000 frames), random weights
from transformers' classes built from configs in code (no download).

    nice .venv/bin/python bench/models.py                        # everything (hours on 2 cores)
    nice .venv/bin/python bench/models.py --models mobilenetv2 --engines native,ort,torch --batch 1
    nice .venv/bin/python bench/models.py --models resnet50 --engines browser-tessera,browser-ort --threads 1,2

The models, their ONNX files and their inputs are tests/frontend/test_onnx_models.py's real-size cases
(exported once by ``torch.onnx.export`` with a dynamic batch axis, cached under build/onnx-models/);
this script imports that module rather than keeping a second exporter. Tessera imports each file with
its batch (and BERT's sequence) fixed by ``from_onnx(shapes=...)`` and builds it once per target and
batch, cached under build/bench/models/ (built in a process of its own, so that no engine's memory
holds a build).

Engines (--engines, comma-separated):

- native: Tessera's C runtime (runtime-native, ``tessera.native.NativeModel``) on the ``cpu`` build,
  at each --threads count; ort: onnxruntime's CPU execution provider on the same file at the same
  threads (intra-op pool, inter-op 1); torch: the same transformers module in eager PyTorch
  (``torch.set_num_threads``, inference mode).
- webgpu, vulkan, opencl: Tessera's Python VM on its GPU devices, which are CPU implementations here
  (Mesa's llvmpipe through wgpu-py, lavapipe, PoCL); their builds are the ``llvmpipe``, ``vulkan``
  and ``opencl`` targets. Measured at one thread count only (the device decides its threads).
- browser-tessera, browser-ort: headless Chromium (/usr/bin/chromium, Playwright's Node API):
  Tessera's ``wasm`` build through runtime-js's InferenceSession, and onnxruntime-web's WASM backend
  (npm onnxruntime-web) on the same ONNX file. The page is served by this script with COOP/COEP
  headers (cross-origin isolated), so onnxruntime-web runs at 2 threads where asked; Tessera's
  browser WASM device runs as many threads as the page allows (one where the page is not
  cross-origin isolated, which is how its 1-thread row is served; runtime-js's threaded module may
  take more in an isolated page), and its row gives the threads the device reported.

Every engine runs in a process of its own (its browser, for the browser engines) per model, batch and
thread count, so its peak memory is its own: VmHWM of the worker for the Python-hosted engines (the
Python interpreter, numpy and the engine's library included), the peak of the browser's processes'
summed PSS for the browser ones (bench/browser/models.mjs samples it). Before anything is timed each
engine's outputs are checked against onnxruntime's (run first, at one thread, in its own worker) with
the model tests' tolerance (rtol 1e-3, atol 1e-4 or 1e-5 of the largest output); an engine that
disagrees is reported as failed, not timed. Latency is the median of the calls at batch 1;
throughput is batch 8's items per second from its median call. Each engine runs for about
--seconds per figure after one warm-up call (at least --min-calls calls). Ratios are each engine's
time over onnxruntime's at the same thread count (browser: over onnxruntime-web's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "build" / "bench" / "models"
sys.path.insert(0, str(ROOT / "tests" / "frontend"))

SEQ = 128
# This script's model names -> the model tests' case names, smaller models first.
MODELS = {"mobilenetv2": "mobilenetv2", "whisper-encoder": "whisper-encoder", "resnet50": "resnet",
          "vit": "vit", "bert": "bert"}
TITLES = {"mobilenetv2": "MobileNetV2 1.0 (224 px)", "whisper-encoder": "Whisper-tiny encoder (80x3000)",
          "resnet50": "ResNet-50 (224 px)", "vit": "ViT-B/16 (224 px)", "bert": f"BERT-base ({SEQ} tokens)"}
HOST_ENGINES = ("native", "ort", "torch")
GPU_ENGINES = {"webgpu": "llvmpipe", "vulkan": "vulkan", "opencl": "opencl"}  # engine -> build target
BROWSER_ENGINES = ("browser-tessera", "browser-ort")
ENGINES = (*HOST_ENGINES, *GPU_ENGINES, *BROWSER_ENGINES)
TITLE = {"native": "Tessera native (cpu)", "ort": "onnxruntime", "torch": "PyTorch eager",
         "webgpu": "Tessera VM webgpu (llvmpipe)", "vulkan": "Tessera VM vulkan (lavapipe)",
         "opencl": "Tessera VM opencl (PoCL)", "browser-tessera": "Tessera WASM (Chromium)",
         "browser-ort": "onnxruntime-web WASM (Chromium)"}


# -- the models (the model tests' cases) ------------------------------------------------------------

def case(model: str):
    import test_onnx_models

    return {c.name: c for c in test_onnx_models.cases(real=True)}[MODELS[model]]


def onnx_file(model: str) -> Path:
    import test_onnx_models

    return test_onnx_models.exported(case(model))


def sizes(model: str, batch: int) -> dict:
    return {"batch": batch, "seq": SEQ}


def inputs(model: str, batch: int) -> dict[str, np.ndarray]:
    import test_onnx_models

    return test_onnx_models.feeds(case(model), sizes(model, batch), seed=batch)


def fixed_shapes(model: str, batch: int) -> dict[str, tuple]:
    return {name: tuple(value.shape) for name, value in inputs(model, batch).items()}


def reference_path(model: str, batch: int) -> Path:
    return CACHE / f"{model}-b{batch}-onnxruntime.npz"


_REBUILT: set = set()


def build_folder(model: str, batch: int, target: str, rebuild: bool = False) -> Path:
    """The Tessera build of ``model`` at ``batch`` for ``target``, made (in a process of its own) if absent,
    or once per run with ``rebuild``."""
    import shutil

    path = onnx_file(model)
    folder = CACHE / f"{model}-b{batch}-{target}-{path.stem.rsplit('-', 1)[-1]}"
    if rebuild and folder not in _REBUILT:
        _REBUILT.add(folder)
        shutil.rmtree(folder, ignore_errors=True)
    if not (folder / "executable.json").exists():
        done = subprocess.run([sys.executable, __file__, "--build", json.dumps([model, batch, target, str(folder)])],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the {target} build failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return folder


def build(model: str, batch: int, target: str, folder: str) -> None:
    import tessera
    from tessera.frontend import from_onnx

    started = time.perf_counter()
    exe = tessera.build(from_onnx(str(onnx_file(model)), shapes=fixed_shapes(model, batch)), target)
    exe.save(folder + ".tmp")
    os.replace(folder + ".tmp", folder)
    print(f"built {folder} in {time.perf_counter() - started:.1f} s", file=sys.stderr)


# -- one engine in this process ----------------------------------------------------------------------

def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the parent)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def engine_call(engine: str, model: str, batch: int, threads: int):
    """A function of the feed returning the outputs (a list of arrays) and a note on what runs."""
    if engine == "ort":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(str(onnx_file(model)), options, providers=["CPUExecutionProvider"])
        return (lambda feed: session.run(None, feed)), f"onnxruntime {ort.__version__}"
    if engine == "torch":
        import torch

        torch.set_num_threads(threads)
        module = case(model).make()

        def run(feed):
            with torch.inference_mode():
                return [t.numpy() for t in module(*(torch.from_numpy(v) for v in feed.values()))]
        return run, f"torch {torch.__version__}"
    if engine == "native":
        from tessera.native import NativeModel

        native = NativeModel(str(build_folder(model, batch, "cpu")), n_threads=threads, device="cpu")
        return (lambda feed: native.call("main", *feed.values())), "runtime-native, cpu build"
    import tessera

    session = tessera.InferenceSession(str(build_folder(model, batch, GPU_ENGINES[engine])), device=engine)
    return (lambda feed: session.run(None, feed)), f"Python VM on {session.vm.device.name}"


def check(model: str, batch: int, got: list, want: list) -> float:
    """The worst error as a multiple of the model tests' tolerance; AssertionError beyond it."""
    import test_onnx_models

    assert len(got) == len(want), f"{len(got)} outputs, onnxruntime gives {len(want)}"
    worst = 0.0
    for index, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        assert g.shape == w.shape, f"output {index} is {g.shape}, onnxruntime's {w.shape}"
        np.testing.assert_allclose(g, w, rtol=test_onnx_models.RTOL, atol=test_onnx_models._atol(w),
                                   err_msg=f"{model} at batch {batch}, output {index}")
        worst = max(worst, test_onnx_models._max_error(g, w))
    return worst


def timed(run, feed, seconds: float, min_calls: int) -> tuple[float, int]:
    """Median seconds of a call and the calls timed: about ``seconds`` of calls, at least ``min_calls``."""
    times: list[float] = []
    while len(times) < min_calls or sum(times) < seconds:
        start = time.perf_counter()
        run(feed)
        times.append(time.perf_counter() - start)
    return float(np.median(times)), len(times)


def measure(engine: str, model: str, batch: int, threads: int, seconds: float, min_calls: int) -> dict:
    feed = inputs(model, batch)
    started = time.perf_counter()
    run, what = engine_call(engine, model, batch, threads)
    result = {"engine": engine, "model": model, "batch": batch, "threads": threads, "what": what,
              "load s": time.perf_counter() - started}
    outputs = [np.asarray(o) for o in run(feed)]  # the warm-up call, checked
    reference = reference_path(model, batch)
    if engine == "ort" and threads == 1:
        CACHE.mkdir(parents=True, exist_ok=True)
        np.savez(reference, *outputs)
    with np.load(reference) as saved:
        want = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    result["error / tolerance"] = check(model, batch, outputs, want)
    result["s"], result["calls"] = timed(run, feed, seconds, min_calls)
    result["peak MiB"] = peak_rss_mib()
    return result


# -- the browser engines --------------------------------------------------------------------------

def browser_files(model: str, batch: int) -> tuple[list[dict], list[dict]]:
    """The inputs and onnxruntime's outputs as raw files the page fetches: (inputs, outputs) entries."""
    folder = CACHE / f"{model}-b{batch}-browser"
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, value in inputs(model, batch).items():
        (folder / f"{name}.bin").write_bytes(np.ascontiguousarray(value).tobytes())
        entries.append({"name": name, "type": str(value.dtype), "dims": list(value.shape),
                        "file": str((folder / f"{name}.bin").relative_to(ROOT))})
    outputs = []
    with np.load(reference_path(model, batch)) as saved:
        for index in range(len(saved.files)):
            value = saved[f"arr_{index}"].astype(np.float32)
            (folder / f"output{index}.bin").write_bytes(value.tobytes())
            outputs.append({"name": f"output{index}", "type": "float32", "dims": list(value.shape),
                            "file": str((folder / f"output{index}.bin").relative_to(ROOT))})
    return entries, outputs


def browser_runs(model: str, batch: int, threads: list[int], engines: list[str], seconds: float,
                 min_calls: int, rebuild: bool = False) -> list[dict]:
    """Each browser engine at each thread count in a browser of its own (bench/browser/models.mjs). Tessera's
    WASM device takes the threads a page allows: at 1 thread its page is not cross-origin isolated (no shared
    memory, so one thread), otherwise it is, and its row says how many threads the device ran."""
    import test_onnx_models

    feed, outputs = browser_files(model, batch)
    rows = []
    for engine in engines:
        for count in threads:
            row = {"engine": engine, "model": model, "batch": batch, "threads": count}
            try:
                build = str(build_folder(model, batch, "wasm", rebuild).relative_to(ROOT)) \
                    if engine == "browser-tessera" else ""
            except RuntimeError as error:
                rows.append({**row, "error": str(error)})
                continue
            config = {"engine": engine, "threads": count, "seconds": seconds, "minCalls": min_calls, "build": build,
                      "onnx": str(onnx_file(model).relative_to(ROOT)), "inputs": feed, "outputs": outputs,
                      "rtol": test_onnx_models.RTOL,
                      "isolated": not (engine == "browser-tessera" and count == 1)}
            done = subprocess.run(["node", str(ROOT / "bench" / "browser" / "models.mjs"), json.dumps(config)],
                                  capture_output=True, text=True, cwd=ROOT)
            line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
            got = json.loads(line[len("RESULT "):]) if line else {"error": (done.stderr.strip() or "no output")[-240:]}
            if "error" in got:
                rows.append({**row, "error": got["error"]})
                continue
            rows.append({**row, "threads": got["threads"], "s": got["s"], "calls": got["calls"],
                         "peak MiB": got["peakMiB"], "error / tolerance": got["worst"], "load s": got["loadSeconds"],
                         "what": f"{got['agent']}, cross-origin isolated: {got['isolated']}"})
    return rows


# -- the run ---------------------------------------------------------------------------------------

def worker(spec: list) -> dict:
    """``measure`` in a child process; a failure becomes a row with its reason."""
    command = [sys.executable, __file__, "--one", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        lines = [x for x in done.stderr.strip().splitlines() if x.strip()] or ["no output"]
        reason = next((x for x in reversed(lines) if "Error" in x), lines[-1])
        engine, model, batch, threads = spec[:4]
        return {"engine": engine, "model": model, "batch": batch, "threads": threads, "error": reason.strip()[:240]}
    return json.loads(line[len("RESULT "):])


def figure(row: dict) -> str:
    if "error" in row:
        return "failed"
    if row["batch"] == 1:
        return f"{1e3 * row['s']:.1f} ms"
    return f"{row['batch'] / row['s']:.2f}/s"


def table(rows: list[dict]) -> str:
    """One line per model, batch, engine and thread count: the figure, its ratio to the peer, memory."""
    peers = {(r["model"], r["batch"], r["threads"], r["engine"].startswith("browser")): r for r in rows
             if r["engine"] in ("ort", "browser-ort") and "error" not in r}
    lines = ["| model | batch | engine | threads | latency (batch 1) or items/s | vs peer | calls | peak MiB "
             "| error / tolerance |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        peer = peers.get((r["model"], r["batch"], r["threads"], r["engine"].startswith("browser")))
        if "error" in r:
            lines.append(f"| {TITLES[r['model']]} | {r['batch']} | {TITLE[r['engine']]} | {r['threads']} | failed: "
                         f"{r['error'].replace('|', '/')} | | | | |")
            continue
        ratio = f"{r['s'] / peer['s']:.1f}x" if peer and peer is not r else ""
        shown = r.get("shown threads", r["threads"])
        lines.append(f"| {TITLES[r['model']]} | {r['batch']} | {TITLE[r['engine']]} | {shown} | {figure(r)} | {ratio} "
                     f"| {r['calls']} | {r['peak MiB']:.0f} | {r['error / tolerance']:.2f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--engines", default="native,ort,torch", help=f"comma-separated, of {', '.join(ENGINES)}")
    parser.add_argument("--batch", default="1,8", help="batch sizes (1: latency; more: throughput)")
    parser.add_argument("--threads", default="1,2", help="thread counts of the CPU engines")
    parser.add_argument("--seconds", type=float, default=10.0, help="time each figure's calls take, about")
    parser.add_argument("--min-calls", type=int, default=3, help="calls timed at least, for each figure")
    parser.add_argument("--json", help="also append each row to this file as a JSON line")
    parser.add_argument("--rebuild", action="store_true", help="rebuild Tessera's builds (cached under "
                        "build/bench/models/, not rebuilt when the compiler changes)")
    parser.add_argument("--table", help="only print the table of the rows of this --json file")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: one engine, one figure
    parser.add_argument("--build", help=argparse.SUPPRESS)  # a child: one build
    args = parser.parse_args()
    if args.build:
        model, batch, target, folder = json.loads(args.build)
        build(model, batch, target, folder)
        return 0
    if args.one:
        print("RESULT " + json.dumps(measure(*json.loads(args.one))), flush=True)
        return 0
    if args.table:
        with open(args.table) as f:
            print(table([json.loads(line) for line in f if line.strip()]))
        return 0
    models, engines = args.models.split(","), args.engines.split(",")
    batches, threads = [int(b) for b in args.batch.split(",")], [int(t) for t in args.threads.split(",")]
    for name in models + engines:
        if name not in MODELS and name not in ENGINES:
            parser.error(f"unknown model or engine {name!r}: models {', '.join(MODELS)}; engines {', '.join(ENGINES)}")
    rows = []
    for model in models:
        for batch in batches:
            plan = [["ort", model, batch, 1]]  # first: its outputs are every engine's reference
            plan += [[e, model, batch, t] for t in threads for e in ("ort", "native", "torch")
                     if e in engines and [e, t] != ["ort", 1]]
            plan += [[e, model, batch, 1] for e in GPU_ENGINES if e in engines]
            for spec in plan:
                target = "cpu" if spec[0] == "native" else GPU_ENGINES.get(spec[0])
                try:  # built here, in a process of its own, so that the engine's load and memory hold no build
                    if target:
                        build_folder(model, batch, target, rebuild=args.rebuild)
                    rows.append(worker([*spec, args.seconds, args.min_calls]))
                except RuntimeError as error:
                    rows.append({"engine": spec[0], "model": model, "batch": batch, "threads": spec[3],
                                 "error": str(error)})
                report(rows[-1], args.json)
            wanted = [e for e in BROWSER_ENGINES if e in engines]
            if wanted:
                for row in browser_runs(model, batch, threads, wanted, args.seconds, args.min_calls, args.rebuild):
                    rows.append(row)
                    report(row, args.json)
    print(f"\n`{' '.join(['bench/models.py', *sys.argv[1:]])}`; latency: median call at batch 1; items/s: batch over "
          "its median call; vs peer: time over onnxruntime's (onnxruntime-web's for the browser) at the same "
          "threads")
    print(table(rows))
    return 1 if any("error" in r for r in rows) else 0


def report(row: dict, path: str | None) -> None:
    print(json.dumps(row), flush=True)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    sys.exit(main())
