"""SmolLM2 end to end on every kernel backend of this machine, in one run: the same model compiled
for WGSL (WebGPU on llvmpipe), SPIR-V (Vulkan on lavapipe) and OpenCL C (PoCL), run by the Python
VM with the KV cache, greedy, in turns.

    TESSERA_VULKAN_VALIDATION=0 .venv/bin/python bench/edge_llm.py [--rounds 2] [--steps 48]

Prefill tokens/s is the prompt's length over one prefill call; decode tokens/s is the tokens after
the first over the decode calls. Each build is loaded once and warmed by its first round; the
table shows every round and the median ratio of each backend to WGSL/llvmpipe. The replies must
agree (the first tokens are printed), or the numbers compare different work.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import tessera
from tessera import nn
from tessera.frontend import bundled_smollm2_path, load_gguf
from tessera.frontend.tokenizer import build_tokenizer
from tessera.models import export_llm, model_from_gguf
from tessera.vm import VirtualMachine

BUILDS = {"WGSL/llvmpipe": "llvmpipe", "SPIR-V/lavapipe": "lavapipe", "OpenCL/PoCL": "pocl"}
PROMPT = "<|im_start|>user\nTell me a long story about a dragon.<|im_end|>\n<|im_start|>assistant\n"


def generate(vm, ids: np.ndarray, steps: int) -> tuple[list[int], float, float]:
    vm.reset_state()
    start = time.perf_counter()
    logits = vm["prefill"](ids, len(ids))
    prefilled = time.perf_counter()
    tokens = [int(logits[0].argmax())]
    while len(tokens) < steps:
        logits = vm["decode"](np.array([tokens[-1]], np.int32), len(ids) + len(tokens))
        tokens.append(int(logits[0].argmax()))
    done = time.perf_counter()
    return tokens, len(ids) / (prefilled - start), (steps - 1) / (done - prefilled)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=48, help="greedy tokens per round")
    parser.add_argument("--context", type=int, default=512)
    args = parser.parse_args()
    gguf = load_gguf(bundled_smollm2_path())
    model, weights = model_from_gguf(gguf)
    tokenizer = build_tokenizer(gguf.tokenizer)
    ids = np.asarray(tokenizer.encode(PROMPT).ids, np.int32)
    vms = {}
    for title, preset in BUILDS.items():
        vms[title] = VirtualMachine(tessera.build(nn.bind_weights(export_llm(model, args.context), weights), preset))
        print(f"{title}: {vms[title].device.name}", flush=True)
    print(f"\nSmolLM2-135M-Instruct Q4_1, {len(ids)} prompt tokens, {args.steps} greedy tokens\n")
    print("| round | backend | prefill tok/s | decode tok/s | first tokens |")
    print("|---|---|---|---|---|")
    speeds: dict[str, list[tuple[float, float]]] = {title: [] for title in BUILDS}
    for round_ in range(1, args.rounds + 1):
        for title, vm in vms.items():
            tokens, prefill, decode = generate(vm, ids, args.steps)
            speeds[title].append((prefill, decode))
            print(f"| {round_} | {title} | {prefill:.1f} | {decode:.2f} | {tokenizer.decode(tokens[:8])!r} |",
                  flush=True)
    base = speeds["WGSL/llvmpipe"]
    print("\nMedian ratio to WGSL/llvmpipe:")
    for title, rounds in speeds.items():
        prefill = statistics.median(p / b[0] for (p, _), b in zip(rounds, base))
        decode = statistics.median(d / b[1] for (_, d), b in zip(rounds, base))
        print(f"- {title}: prefill {prefill:.2f}x, decode {decode:.2f}x")


if __name__ == "__main__":
    main()
