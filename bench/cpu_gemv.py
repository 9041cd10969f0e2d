"""Quantized and float GEMV kernels (M = 1, LLM decode) on the cpu target: time, GFLOP/s and GB/s of
weight traffic, at SmolLM2-135M's shapes (its Q4_K_M re-quantization's formats too: Q5_0, Q4_K,
Q6_K). Each shape of a format with q8 micro-kernels runs twice: x read as f32 (rule quantized-gemv)
and x rounded to 8 bits (activations="q8": rule quantized-gemv-q8, the integer SIMD micro-kernels),
the latter compared with the rounded x; the other formats run once (rule quantized-matmul). Each
kernel is built through the normal path (legalize_ops for the target, then the c-native backend) and
run by the CPU kernel runner; times are the median of many launches with the data resident (and the
best), single thread unless --threads says otherwise.

    .venv/bin/python bench/cpu_gemv.py [--threads 2] [--target cpu] [--dump DIR]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

# (name, format, N outputs, K): out = x (1 x K) @ W^T, W of N x K.
SHAPES = [("q4_1 ffn-up 1536x576", "q4_1", 1536, 576), ("q4_1 ffn-down 576x1536", "q4_1", 576, 1536),
          ("q4_1 attn 576x576", "q4_1", 576, 576), ("q8_0 lm-head 49152x576", "q8_0", 49152, 576),
          ("q4_0 1536x576", "q4_0", 1536, 576), ("f32 1536x576", "float32", 1536, 576),
          ("q5_0 ffn-up 1536x576", "q5_0", 1536, 576), ("q4_k ffn-down 576x1536", "q4_k", 576, 1536),
          ("q6_k ffn-down 576x1536", "q6_k", 576, 1536)]


def kernel_for(fmt: str, n: int, k: int, target, activations: str = ""):
    from tessera import op
    from tessera.ir import BlockBuilder, Function, Tensor, Var
    from tessera.transform import legalize_ops

    x = Var("x", Tensor((1, k), "float32"))
    if fmt == "float32":
        w = Var("w", Tensor((k, n), "float32"))
        value = op.matmul(x, w)
    else:
        from tessera.tir.quant import FORMATS

        w = Var("w", Tensor((n, FORMATS[fmt].row_words(k)), "uint32"))
        value = op.quantized_matmul(x, w, format=fmt, k=k, activations=activations)
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        bb.emit_func_output(bb.emit(value))
    mod = legalize_ops(bb.get(), target)
    (kernel,) = [f for f in mod.functions.values() if not isinstance(f, Function)]
    return kernel


def weights(fmt: str, n: int, k: int, rng):
    w = rng.standard_normal((n, k)).astype(np.float32)
    if fmt == "float32":
        return np.ascontiguousarray(w.T), w
    import gguf

    kind = getattr(gguf.GGMLQuantizationType, fmt.upper())
    if fmt.endswith("_k"):  # gguf cannot quantize to K-quants: random bytes, the super-block f16s set
        values, size = gguf.GGML_QUANT_SIZES[kind]
        blocks = rng.integers(0, 256, (n, k // values, size), dtype=np.uint8)
        for offset in {"q4_k": (0, 2), "q6_k": (208,)}[fmt]:
            blocks[..., offset:offset + 2] = np.full(blocks.shape[:2], 1e-3, np.float16)[..., None].view(np.uint8)
        blocks = blocks.reshape(n, -1)
    else:
        blocks = gguf.quants.quantize(w, kind)
    return np.ascontiguousarray(blocks).view("<u4"), gguf.quants.dequantize(blocks, kind)


def times(fn, runs: int) -> tuple[float, float]:
    """(median, best) of ``runs`` calls: other processes share the cores, the best is the kernel's."""
    fn()
    spent = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        spent.append(time.perf_counter() - start)
    return float(np.median(spent)), min(spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--only", default="", help="substring of the shapes to run")
    parser.add_argument("--dump", default="", help="write each kernel's C here")
    args = parser.parse_args()
    os.environ["TESSERA_CPU_THREADS"] = str(args.threads)
    from tessera.op.quantized import Q8_ACTIVATION_FORMATS, round_activations_q8
    from tessera.target import Target
    from tessera.vm.cpu_runner import CPUKernelRunner

    target = Target.preset(args.target)
    runner = CPUKernelRunner()
    runner.target = target
    rng = np.random.default_rng(0)
    print(f"{'kernel':31} {'median us':>9} {'best us':>9} {'GFLOP/s':>8} {'GB/s':>7}  (of the best) rule, max rel err")
    for name, fmt, n, k in SHAPES:
        if args.only and args.only not in name:
            continue
        w, dense = weights(fmt, n, k, rng)
        x = rng.standard_normal((1, k)).astype(np.float32)
        for activations in ("", "q8") if fmt in Q8_ACTIVATION_FORMATS else ("",):
            kernel = kernel_for(fmt, n, k, target, activations)
            if args.dump:
                from tessera.codegen.c.native import NATIVE_LOWERING, emit_native_module
                from tessera.tir.lower import lower_kernel

                os.makedirs(args.dump, exist_ok=True)
                suffix = "_q8" if activations else ""
                with open(os.path.join(args.dump, name.split()[0] + f"_{n}x{k}{suffix}.c"), "w") as f:
                    f.write(emit_native_module([lower_kernel(kernel, NATIVE_LOWERING)]))
            bound = runner.bind(kernel, [x, w], {})
            bound.dispatch()
            got = bound.read_outputs()[0]
            read = round_activations_q8(x) if activations else x
            want = read @ dense.T if fmt != "float32" else x @ w
            err = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-30))
            runs = 30 if n > 10000 else 300
            median, seconds = times(bound.dispatch, runs)
            label = name + (" x:q8" if activations else "")
            print(f"{label:31} {median * 1e6:9.1f} {seconds * 1e6:9.1f} {2 * n * k / seconds / 1e9:8.2f} "
                  f"{w.nbytes / seconds / 1e9:7.2f}  "
                  f"{kernel.attrs.get('rule')} grid={[str(g) for g in kernel.grid]} wg={kernel.workgroup_size[0]} "
                  f"err={err:.1e}")


if __name__ == "__main__":
    main()
