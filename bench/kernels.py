"""GEMV and GEMM kernels on every kernel backend of this machine next to numpy's matmul, at LLM
shapes, in one run: WGSL on WebGPU (llvmpipe), SPIR-V on Vulkan (lavapipe), OpenCL C on PoCL.

    make bench        # or: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/kernels.py
    .venv/bin/python bench/kernels.py --devices webgpu,opencl   # some of them

Shapes are (N, K) of a weight: out = x (M x K) @ W (K x N), with M = 1 (decode, the GEMV rule) and
M = 128 (prefill, the GEMM rule), float32. Each backend compiles the same matmul for its machine
preset (the same schedule rule: all three are CPU adapters here). Times are the best of several
repetitions of the kernel alone (data resident on the device, many dispatches per submit) and of
numpy.matmul on the same arrays. GEMV is memory bound, so its weight traffic is reported as GB/s too.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import time

import numpy as np
from tessera import op
from tessera.ir import BlockBuilder, Function, Tensor, Var
from tessera.target import Target
from tessera.transform import legalize_ops

# Device kind -> (column title, kernel runner factory, the preset of this machine's implementation).
DEVICES = {
    "webgpu": ("WGSL/llvmpipe", "tessera.vm.kernel_runner:default_runner", "llvmpipe"),
    "vulkan": ("SPIR-V/lavapipe", "tessera.vm.vulkan_runner:VulkanKernelRunner", "lavapipe"),
    "opencl": ("OpenCL/PoCL", "tessera.vm.opencl_runner:OpenCLKernelRunner", "pocl"),
}
SHAPES = [(576, 576), (1536, 576), (576, 1536), (49152, 576)]


def open_runner(kind: str):
    module, _, factory = DEVICES[kind][1].partition(":")
    return getattr(importlib.import_module(module), factory)()


def matmul_kernel(m: int, k: int, n: int, preset: str):
    x, w = Var("x", Tensor((m, k), "float32")), Var("w", Tensor((k, n), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        bb.emit_func_output(bb.emit(op.matmul(x, w)))
    mod = legalize_ops(bb.get(), Target.preset(preset))
    (kernel,) = [f for f in mod.functions.values() if not isinstance(f, Function)]
    return kernel


def best_time(fn, min_seconds: float) -> float:
    fn()  # warm up
    best, spent, runs = float("inf"), 0.0, 0
    while spent < min_seconds or runs < 3:
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        best, spent, runs = min(best, elapsed), spent + elapsed, runs + 1
    return best


def measure_kernel(runner, preset, x, w, min_seconds) -> tuple[str, float]:
    """(schedule rule, seconds per launch) of the matmul on ``runner``'s device."""
    (m, k), n = x.shape, w.shape[1]
    kernel = matmul_kernel(m, k, n, preset)
    bound = runner.bind(kernel, [x, w], {})
    bound.dispatch()
    got = bound.read_outputs()[0]
    np.testing.assert_allclose(got, x @ w, rtol=1e-3, atol=1e-3)  # a fast wrong kernel is no result
    repeats = 8

    def run_kernel():
        bound.dispatch(repeats)
        bound.wait()

    return kernel.attrs["rule"], best_time(run_kernel, min_seconds) / repeats


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info

        infos = [f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')}, "
                 f"{i.get('num_threads')} threads)" for i in threadpool_info() if i.get("user_api") == "blas"]
        return "; ".join(infos) or "unknown"
    except ImportError:
        return "threadpoolctl not installed"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=0.5, help="minimum time per measurement")
    parser.add_argument("--devices", default=",".join(DEVICES), help="device kinds to measure, comma-separated")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.devices.split(",") if k.strip()]
    runners = {kind: open_runner(kind) for kind in kinds}
    print("; ".join(f"{DEVICES[kind][0]}: {runner.adapter_name}" for kind, runner in runners.items()))
    print(f"numpy {np.__version__} with {blas_info()}; {platform.machine()}, {platform.processor() or 'cpu'}")
    print()
    print("GFLOP/s (GB/s of weights for M = 1); the ratio is to numpy.")
    print()
    titles = [DEVICES[kind][0] for kind in kinds]
    print("| weight N x K | M | rule | numpy | " + " | ".join(titles) + " |")
    print("|---|---|---|---|" + "---|" * len(titles))
    rng = np.random.default_rng(0)
    for n, k in SHAPES:
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        for m in (1, 128):
            x = rng.standard_normal((m, k)).astype(np.float32)
            flops, weight_bytes = 2.0 * m * n * k, 4.0 * k * n
            numpy_seconds = best_time(lambda x=x, w=w: np.matmul(x, w), args.seconds)
            rules, cells = set(), []
            for kind, runner in runners.items():
                rule, seconds = measure_kernel(runner, DEVICES[kind][2], x, w, args.seconds)
                rules.add(rule)
                cells.append(rate(flops, weight_bytes, seconds, m) + f" ({numpy_seconds / seconds:.2f}x)")
            print(f"| {n} x {k} | {m} | {'/'.join(sorted(rules))} | {rate(flops, weight_bytes, numpy_seconds, m)} | "
                  + " | ".join(cells) + " |", flush=True)


def rate(flops: float, weight_bytes: float, seconds: float, m: int) -> str:
    text = f"{flops / seconds / 1e9:.2f}"
    return text + (f" / {weight_bytes / seconds / 1e9:.2f} GB/s" if m == 1 else "")


if __name__ == "__main__":
    main()
