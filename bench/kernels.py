"""GEMV and GEMM kernels on WebGPU (llvmpipe) next to numpy's matmul, at LLM shapes, in one run.

    make bench        # or: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/kernels.py

Shapes are (N, K) of a weight: out = x (M x K) @ W (K x N), with M = 1 (decode, the GEMV rule) and
M = 128 (prefill, the GEMM rule), float32. Times are the best of several repetitions of the kernel
alone (data resident on the device, many dispatches per submit) and of numpy.matmul on the same
arrays. GEMV is memory bound, so its weight traffic is reported as GB/s too.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
from tessera import op
from tessera.ir import BlockBuilder, Function, Tensor, Var
from tessera.target import Target
from tessera.transform import legalize_ops
from tessera.vm.kernel_runner import default_runner

SHAPES = [(576, 576), (1536, 576), (576, 1536), (49152, 576)]


def matmul_kernel(m: int, k: int, n: int):
    x, w = Var("x", Tensor((m, k), "float32")), Var("w", Tensor((k, n), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        bb.emit_func_output(bb.emit(op.matmul(x, w)))
    mod = legalize_ops(bb.get(), Target.preset("llvmpipe"))
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


def measure(m, k, n, min_seconds):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    kernel = matmul_kernel(m, k, n)
    bound = default_runner().bind(kernel, [x, w], {})
    bound.dispatch()
    got = bound.read_outputs()[0]
    np.testing.assert_allclose(got, x @ w, rtol=1e-3, atol=1e-3)  # a fast wrong kernel is no result
    repeats = 8

    def run_kernel():
        bound.dispatch(repeats)
        bound.wait()

    gpu = best_time(run_kernel, min_seconds) / repeats
    cpu = best_time(lambda: np.matmul(x, w), min_seconds)
    flops = 2.0 * m * n * k
    weight_bytes = 4.0 * k * n
    return kernel.attrs["rule"], flops / gpu / 1e9, flops / cpu / 1e9, weight_bytes / gpu / 1e9, \
        weight_bytes / cpu / 1e9


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
    args = parser.parse_args()
    print(f"adapter: {default_runner().adapter_name}; numpy {np.__version__} with {blas_info()}; "
          f"{platform.machine()}, {platform.processor() or 'cpu'}")
    print()
    print("| weight N x K | M | rule | Tessera GFLOP/s | numpy GFLOP/s | ratio | Tessera GB/s | numpy GB/s |")
    print("|---|---|---|---|---|---|---|---|")
    for n, k in SHAPES:
        for m in (1, 128):
            rule, ours, theirs, ours_bw, theirs_bw = measure(m, k, n, args.seconds)
            bandwidth = f"{ours_bw:.2f} | {theirs_bw:.2f}" if m == 1 else "- | -"
            print(f"| {n} x {k} | {m} | {rule} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f} | {bandwidth} |",
                  flush=True)


if __name__ == "__main__":
    main()
