"""Real architectures through the ONNX importer beside onnxruntime: ResNet-50, MobileNetV2, BERT-base,
DistilBERT and ViT-B/16 at their real sizes, random weights from transformers' configs (no download),
exported once by ``torch.onnx.export`` (dynamo) and cached under build/bench/onnx/. Each file is imported
with ``tessera.frontend.from_onnx``, compiled for "cpu" (runtime C kernels on this CPU, through the
Python VM) and run through ``tessera.InferenceSession``, in one run beside onnxruntime's CPU execution
provider on the same file and the same inputs.

    make bench        # or: .venv/bin/python bench/onnx_models.py [--models resnet50,bert] [--threads 1]

Outputs are compared (rtol 1e-3) before anything is timed. Both engines get the same threads:
onnxruntime's intra-op pool and Tessera's CPU device (TESSERA_CPU_THREADS) alike, inter-op 1. Latency
is the median of several calls of one input after warm-up, the engines taking turns in rounds so
that load from other work falls on both alike; ratio = Tessera's latency / onnxruntime's. Each model
runs in a process of its own, so its peak memory (ru_maxrss after the Tessera build, before
onnxruntime loads) is its own. With --profile, the kernels taking most of Tessera's time are listed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import platform
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "build" / "bench" / "onnx"
RTOL = 1e-3
SEQ = 128  # BERT's and DistilBERT's sequence length, batch 1
MODELS = ("resnet50", "mobilenetv2", "bert", "distilbert", "vit")
ROUND_SECONDS = 2.0  # time each engine takes per round (at least one call)
ROUNDS = 5


def _config(name: str):
    import transformers as t

    return {
        # The default configs are ResNet-50 and MobileNetV2 1.0 at 224 px; their heads get ImageNet's
        # 1,000 classes (the configs' default is 2).
        "resnet50": (t.ResNetForImageClassification, t.ResNetConfig(num_labels=1000), "image"),
        "mobilenetv2": (t.MobileNetV2ForImageClassification, t.MobileNetV2Config(num_labels=1000), "image"),
        "bert": (t.BertModel, t.BertConfig(), "text"),  # bert-base: 12 layers, 768 wide
        "distilbert": (t.DistilBertModel, t.DistilBertConfig(), "text"),
        "vit": (t.ViTModel, t.ViTConfig(), "image"),  # ViT-B/16 at 224 px
    }[name]


def feeds(kind: str, vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    if kind == "image":
        return {"pixel_values": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    mask = np.ones((1, SEQ), np.int64)
    mask[0, -8:] = 0  # padding at the end: the mask matters
    return {"input_ids": rng.integers(0, vocab, (1, SEQ)).astype(np.int64), "attention_mask": mask}


def exported(name: str) -> tuple[Path, dict[str, np.ndarray]]:
    """The model exported at fixed sizes (batch 1), cached by a hash of its config and the versions."""
    import onnxscript
    import torch
    import transformers

    model_class, config, kind = _config(name)
    inputs = feeds(kind, getattr(config, "vocab_size", 0))
    key = json.dumps([name, config.to_dict(), {k: v.shape for k, v in inputs.items()}, torch.__version__,
                      transformers.__version__, onnxscript.__version__], sort_keys=True, default=str)
    path = CACHE / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.onnx"
    if path.exists():
        return path, inputs
    CACHE.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = model_class(config).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # random weights everywhere, biases and norms too, none trivially 0 or 1
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05)

    class FirstOutput(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            return self.model(**dict(zip(inputs, args)))[0]

    tmp = path.with_suffix(".tmp.onnx")
    example = tuple(torch.from_numpy(v) for v in inputs.values())
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(FirstOutput().eval(), example, dynamo=True, input_names=list(inputs),
                                    output_names=["output"])
        program.save(str(tmp), external_data=False)
    os.replace(tmp, path)
    return path, inputs


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def turns(engines: dict, feed: dict) -> dict[str, tuple[float, int]]:
    """Median seconds of each engine and its calls timed, taking turns in rounds; each round runs an
    engine for about ROUND_SECONDS (at least once)."""
    times: dict[str, list[float]] = {label: [] for label in engines}
    for _ in range(ROUNDS):
        for label, run in engines.items():
            spent = 0.0
            while True:
                start = time.perf_counter()
                run(feed)
                times[label].append(time.perf_counter() - start)
                spent += times[label][-1]
                if spent >= ROUND_SECONDS:
                    break
    return {label: (float(np.median(t)), len(t)) for label, t in times.items()}


def measure(name: str, threads: int, targets: list[str], profile: bool) -> dict:
    """One model in this process: export (cached), import, build for each target, check, time."""
    os.environ["TESSERA_CPU_THREADS"] = str(threads)
    import onnxruntime as ort
    import tessera
    from tessera.frontend import from_onnx

    path, inputs = exported(name)
    result = {"model": name, "threads": threads, "onnx MB": path.stat().st_size / 1e6, "targets": {}}
    started = time.perf_counter()
    mod = from_onnx(str(path))
    result["import s"] = time.perf_counter() - started
    sessions = {}
    for target in targets:
        started = time.perf_counter()
        exe = tessera.build(mod, target)
        result["targets"][target] = {"build s": time.perf_counter() - started, "kernels": len(exe.kernels)}
        sessions[target] = tessera.InferenceSession(exe, device=target)
    del mod, exe
    result["peak MiB after builds"] = peak_mib()

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    reference = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    want = reference.run(None, inputs)[0]
    atol = max(1e-4, 1e-5 * float(np.abs(want).max()))  # float32 sums in another order (as the model tests)
    for target, session in sessions.items():  # a fast wrong answer is no result
        got = session.run(None, inputs)[0]
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=atol, err_msg=f"{name}: Tessera {target} vs onnxruntime")
        # Random weights let activations grow (ResNet-50's logits reach 1e7): the error relative to the largest.
        result["targets"][target]["relative error"] = \
            float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())

    engines = {target: (lambda feed, s=session: s.run(None, feed)) for target, session in sessions.items()}
    engines["onnxruntime"] = lambda feed: reference.run(None, feed)
    for run in engines.values():
        run(inputs)  # warm-up beyond the checked call
    timed = turns(engines, inputs)
    result["onnxruntime ms"], result["onnxruntime calls"] = 1e3 * timed["onnxruntime"][0], timed["onnxruntime"][1]
    for target in sessions:
        entry = result["targets"][target]
        entry["ms"], entry["calls"] = 1e3 * timed[target][0], timed[target][1]
        entry["ratio"] = entry["ms"] / result["onnxruntime ms"]
    result["peak MiB"] = peak_mib()
    if profile and "cpu" in sessions:
        launches = sessions["cpu"].vm.profile_kernels("main", *inputs.values())
        by_kernel: dict[str, list[float]] = {}
        for kernel, seconds in launches:
            by_kernel.setdefault(kernel, []).append(seconds)
        top = sorted(by_kernel.items(), key=lambda item: -sum(item[1]))[:8]
        result["profile"] = {"launches": len(launches), "total ms": 1e3 * sum(s for _, s in launches),
                             "top": [(k, len(s), 1e3 * sum(s)) for k, s in top]}
    return result


def table(results: list[dict], ort_version: str) -> str:
    lines = [f"| model | onnx MB | import s | target | build s | kernels | peak MiB | Tessera ms | onnxruntime "
             f"{ort_version} ms | ratio | max error / max output |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | failed: {r['error']} ||||||||||")
            continue
        for target, t in r["targets"].items():
            lines.append(f"| {r['model']} | {r['onnx MB']:.0f} | {r['import s']:.1f} | {target} | {t['build s']:.1f} "
                         f"| {t['kernels']} | {r['peak MiB']:.0f} | {t['ms']:.1f} ({t['calls']}) "
                         f"| {r['onnxruntime ms']:.1f} ({r['onnxruntime calls']}) | {t['ratio']:.1f}x "
                         f"| {t['relative error']:.1e} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--threads", type=int, default=1, help="threads for each engine (default 1)")
    parser.add_argument("--targets", default="cpu", help="comma-separated Tessera targets (default cpu; wasm too)")
    parser.add_argument("--profile", action="store_true", help="list the kernels taking most of Tessera's time")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process: measure one model, print JSON
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(measure(args.one, args.threads, args.targets.split(","), args.profile)))
        return 0
    import onnxruntime as ort

    results = []
    for name in args.models.split(","):
        command = [sys.executable, __file__, "--one", name, "--threads", str(args.threads), "--targets", args.targets]
        command += ["--profile"] if args.profile else []
        done = subprocess.run(command, capture_output=True, text=True)
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
        if done.returncode != 0 or line is None:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"{name}: failed: {last}", file=sys.stderr)
            results.append({"model": name, "error": last[:200]})
            continue
        results.append(json.loads(line[len("RESULT "):]))
        print(json.dumps(results[-1]), flush=True)
    print(f"\nbatch 1 (text: {SEQ} tokens), float32, {platform.machine()}, {args.threads} thread(s) each; "
          "ms: median (calls timed)")
    print(table(results, ort.__version__))
    for r in results:
        if "profile" in r:
            p = r["profile"]
            print(f"\n{r['model']}: {p['launches']} launches, {p['total ms']:.0f} ms timed one at a time; largest:")
            for kernel, count, ms in p["top"]:
                print(f"  {kernel}: {count} launches, {ms:.1f} ms")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
