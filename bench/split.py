"""SmolLM2 split across devices (tessera compile --gpu-layers N): decode tokens/s with half the decoder
layers on WebGPU (llvmpipe) and half on WASM (wasmtime), beside all on WebGPU and all on WASM, in one
run, each in the Python VM.

    .venv/bin/python bench/split.py [--gpu-layers 15] [--prompt-tokens 128] [--decode-tokens 64]

Each build runs in a subprocess of its own (its peak resident memory is its own); the first
generation is a warm-up, the second is timed. Every build decodes the same prompt greedily, ignoring
stop tokens, and the script checks that the three agree token for token. It also prints the copies
between devices per decode step and where a split step's time goes (the copies include waiting for the
GPU's queued work). On a machine without a GPU both "devices" share the same two CPU cores, so the split
cannot beat the faster of the two here: the row says what splitting costs, not what it gains on a
laptop with a real GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

SEED_TEXT = ("The history of the printing press begins in the fifteenth century, when movable type made books "
             "cheaper to produce and ideas faster to spread across Europe. ")


def run_build(path: str, target: str, gpu_layers: int | None, prompt_tokens: int, decode_tokens: int) -> dict:
    import numpy as np
    from tessera.app import ChatSession, cached_compile

    context = 1024
    while context < prompt_tokens + decode_tokens + 1:
        context *= 2
    session = ChatSession(cached_compile(path, target, context, gpu_layers=gpu_layers))
    ids: list[int] = []
    while len(ids) < prompt_tokens:
        ids += session.tokenizer.encode(SEED_TEXT, add_special_tokens=False).ids
    ids = ids[:prompt_tokens]
    vm, chunk = session.vm, session.prefill_chunk

    def generate():
        session.reset()
        for begin in range(0, len(ids), chunk):
            end = min(begin + chunk, len(ids))
            logits = vm["prefill"](np.asarray(ids[begin:end], np.int32), end)[0]
        tokens = list(ids)
        copies = vm.copies
        start = time.perf_counter()
        for _ in range(decode_tokens):
            tokens.append(int(np.argmax(logits)))
            logits = vm["decode"](np.array([tokens[-1]], np.int32), len(tokens))[0]
        return time.perf_counter() - start, tokens[len(ids):], (vm.copies - copies) / decode_tokens

    generate()
    seconds, generated, copies = generate()
    return {"decode_tok_s": decode_tokens / seconds, "copies_per_step": copies, "tokens": generated,
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "device": vm.device.name}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu-layers", type=int, default=15, help="layers on the GPU in the split build (15 of 30)")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    from tessera.frontend import bundled_smollm2_path

    path = bundled_smollm2_path()
    if args.child:
        target, layers = args.child[0], None if args.child[1] == "-" else int(args.child[1])
        print(json.dumps(run_build(path, target, layers, args.prompt_tokens, args.decode_tokens)))
        return 0
    builds = {"all on WebGPU (llvmpipe)": ("llvmpipe", "-"), "all on WASM (wasmtime)": ("wasm", "-"),
              f"{args.gpu_layers} layers on WebGPU, the rest on WASM": ("llvmpipe", str(args.gpu_layers))}
    results = {}
    for label, (target, layers) in builds.items():
        command = [sys.executable, __file__, "--prompt-tokens", str(args.prompt_tokens), "--decode-tokens",
                   str(args.decode_tokens), "--child", target, layers, "--gpu-layers", str(args.gpu_layers)]
        out = subprocess.run(command, capture_output=True, text=True, env={**os.environ})
        if out.returncode != 0:
            print(f"{label}: failed\n{out.stderr[-2000:]}", file=sys.stderr)
            return 1
        results[label] = json.loads(out.stdout.strip().splitlines()[-1])
    first = next(iter(results.values()))
    print(f"SmolLM2-135M Q4_1, prompt {args.prompt_tokens} tokens, {args.decode_tokens} decoded, Python VM")
    print(f"{'build':<42}{'decode tok/s':>14}{'vs all-GPU':>12}{'copies/step':>13}{'peak MiB':>10}")
    for label, r in results.items():
        print(f"{label:<42}{r['decode_tok_s']:>14.2f}{r['decode_tok_s'] / first['decode_tok_s']:>11.2f}x"
              f"{r['copies_per_step']:>13.1f}{r['peak_mib']:>10.0f}")
    same = all(r["tokens"] == first["tokens"] for r in results.values())
    print(f"greedy tokens equal across builds: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
