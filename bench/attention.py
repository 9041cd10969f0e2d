"""Fused causal attention on the CPU adapters of this machine, both kernel shapes a GPU language can
take, next to numpy's attention on the same arrays, in one run: WGSL on WebGPU (llvmpipe), SPIR-V on
Vulkan (lavapipe), OpenCL C on PoCL.

    .venv/bin/python bench/attention.py                      # or: make bench
    .venv/bin/python bench/attention.py --devices webgpu     # some of them

SmolLM2's heads (9 query heads sharing 3 KV heads of 64) over a cache of 1,024 keys: a decode query
(one position) and a prompt's chunk of 1,024 positions (causal, so half the (query, key) pairs).
Each device compiles nn.attention for its machine preset, which takes the lanes rule (one query row
per invocation, tir/schedule/attention.py), and for spec-default WebGPU limits without the CPU
flag, which takes the GPU rule (tiles staged in workgroup memory). Times are the best of several
runs of the attention kernel alone, data resident on the device (for decode, the split-K shares'
kernel without their small merge); numpy's is a float32 einsum softmax of the same shapes.
"""

from __future__ import annotations

import argparse
import importlib

import numpy as np
from kernels import DEVICES, best_time
from tessera import arith, op
from tessera.ir import BlockBuilder, Function, PrimStructInfo, PrimValue, Tensor, Var
from tessera.target import Target
from tessera.transform import legalize_ops

HEADS, KV_HEADS, HEAD, CAPACITY = 9, 3, 64, 1024
CASES = {"decode (1 query)": 1, "prefill (1,024 queries)": 1024}


def attention_kernel(n: int, target: Target):
    """The (first) kernel of nn.attention for ``n`` query positions over the cache, for ``target``."""
    total = arith.Var("total")
    q = Var("q", Tensor((n, HEADS, HEAD), "float32"))
    k, v = (Var(name, Tensor((CAPACITY, KV_HEADS, HEAD), "float32")) for name in ("k", "v"))
    t = Var("t", PrimStructInfo("int64", total))
    bb = BlockBuilder()
    with bb.function("main", [q, k, v, t]):
        bb.emit_func_output(bb.emit(op.nn.attention(q, k, v, PrimValue(total))))
    mod = legalize_ops(bb.get(), target)
    return [f for f in mod.functions.values() if not isinstance(f, Function)][0]


def numpy_attention(q, k, v) -> np.ndarray:
    n, group = q.shape[0], HEADS // KV_HEADS
    keys, values = np.repeat(k[:CAPACITY], group, axis=1), np.repeat(v[:CAPACITY], group, axis=1)
    scores = np.einsum("nhd,khd->hnk", q, keys) / np.float32(np.sqrt(HEAD))
    rows, cols = np.triu_indices(n, CAPACITY - n + 1, CAPACITY)  # keys after each query's own position
    scores[:, rows, cols] = -np.inf
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("hnk,khd->nhd", p / p.sum(-1, keepdims=True), values)


def measure(runner, kernel, arrays, n: int, min_seconds: float) -> float:
    bound = runner.bind(kernel, arrays, {name: {"n": n, "total": CAPACITY}[name] for name in kernel.scalars})
    bound.dispatch()
    if n > 1:  # one share: the kernel's output is the attention (a fast wrong kernel is no result)
        got = bound.read_outputs()[0].reshape(n, HEADS, HEAD)
        np.testing.assert_allclose(got, numpy_attention(*arrays), rtol=1e-3, atol=1e-4)
    repeats = 2

    def run():
        bound.dispatch(repeats)
        bound.wait()

    return best_time(run, min_seconds) / repeats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=0.5, help="minimum time per measurement")
    parser.add_argument("--devices", default=",".join(DEVICES), help="device kinds to measure, comma-separated")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{HEADS} query heads over {KV_HEADS} KV heads of {HEAD}, a cache of {CAPACITY} keys; ms per kernel, "
          "and the GPU rule's time over the lanes rule's")
    print()
    print("| device | case | numpy | lanes rule | GPU rule | GPU / lanes |")
    print("|---|---|---|---|---|---|")
    for kind in [k.strip() for k in args.devices.split(",") if k.strip()]:
        title, factory, preset = DEVICES[kind]
        module, _, name = factory.partition(":")
        runner = getattr(importlib.import_module(module), name)()
        gpu = Target(runner.target.kind, runner.target.features, dict(Target.preset("webgpu").limits),
                     name="GPU rule", loop_budget=runner.target.loop_budget)
        for case, n in CASES.items():
            q = rng.standard_normal((n, HEADS, HEAD)).astype(np.float32)
            k, v = (rng.standard_normal((CAPACITY, KV_HEADS, HEAD)).astype(np.float32) for _ in range(2))
            numpy_seconds = best_time(lambda q=q, k=k, v=v: numpy_attention(q, k, v), args.seconds)
            times = []
            for target in (Target.preset(preset), gpu):
                kernel = attention_kernel(n, target)
                times.append(measure(runner, kernel, [q, k, v], n, args.seconds))
            print(f"| {title} ({runner.adapter_name}) | {case} | {1e3 * numpy_seconds:.1f} | {1e3 * times[0]:.1f} | "
                  f"{1e3 * times[1]:.1f} | {times[1] / times[0]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
