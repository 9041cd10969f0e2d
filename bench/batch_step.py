"""One batched decode step (`decode_batch`, models/llama.py) at batch sizes 1, 2, 4 and 8: the bundled
SmolLM2-135M-Instruct Q4_1 compiled with --max-batch 8, on runtime-native (target cpu) or the Python VM.

    .venv/bin/python bench/batch_step.py                     # runtime-native, 2 threads
    .venv/bin/python bench/batch_step.py --runtime python --target wasm

Each sequence is prefilled with 32 random tokens into pages of its own, then each batch size runs
one warm-up step and ``--steps`` timed steps of its first b sequences at the next position. Prints
milliseconds a step and tokens a second (b / step).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    from tessera.app.batch_engine import PagedModel
    from tessera.app.compile import cached_compile
    from tessera.frontend import bundled_smollm2_path

    parser = argparse.ArgumentParser()
    parser.add_argument("--runtime", choices=("native", "python"), default="native")
    parser.add_argument("--target", default=None, help="default: cpu for native, wasm for python")
    parser.add_argument("--threads", type=int, default=2, help="runtime-native's threads (default 2)")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    target = args.target or ("cpu" if args.runtime == "native" else "wasm")
    model = PagedModel(cached_compile(bundled_smollm2_path(), target, 1024, max_batch=8), args.runtime,
                       args.threads)
    rng = np.random.default_rng(0)
    pages = [[i * model.pages_per_sequence + j for j in range(4)] for i in range(8)]
    for sequence in pages:
        model.prefill(list(rng.integers(0, 40000, 32)), 32, sequence)
    print(f"decode_batch, SmolLM2-135M-Instruct Q4_1, {target} on {args.runtime}")
    for batch in (1, 2, 4, 8):
        ids, positions = list(rng.integers(0, 40000, batch)), [32] * batch
        model.decode(ids, positions, pages[:batch])
        start = time.perf_counter()
        for _ in range(args.steps):
            model.decode(ids, positions, pages[:batch])
        step = (time.perf_counter() - start) / args.steps
        print(f"b={batch}: {step * 1000:.1f} ms a step, {batch / step:.1f} tok/s")


if __name__ == "__main__":
    main()
