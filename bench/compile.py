"""Compile speed: `tessera compile` of the bundled SmolLM2 (issue 16, item 7), stage by stage.

    .venv/bin/python bench/compile.py                        # webgpu, 3 rounds
    .venv/bin/python bench/compile.py --target webgpu --target wasm --rounds 5
    .venv/bin/python bench/compile.py --profile              # plus a cProfile top list of one round

Each round runs tessera.app.compile.compile_model into a fresh folder, as `tessera compile` does
(no compile cache), and times each stage by the build's progress callback: reading the GGUF,
exporting the graph, each pass of the pipeline, the kernels (scheduled code rendered), the VM
and writing the folder. The table shows the median and the best round per stage; on a shared
machine the best round is the one to compare, since another process may slow any other round.
With ``--digest`` the sha256 of every file of the last round's folder is printed (one line per
file), to check that a change to the compiler left its output byte for byte the same.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import os
import pstats
import statistics
import sys
import tempfile
import time

from tessera.app.compile import compile_model
from tessera.frontend import bundled_smollm2_path


class StageClock:
    """A progress callback that times each stage: a stage runs until the next one starts."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._stage: str | None = None
        self._started = time.perf_counter()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage != self._stage:
            self.stop()
            self._stage = stage
        if stage.startswith("write "):  # the folder's name differs per round
            self._stage = "write the folder"

    def stop(self) -> None:
        now = time.perf_counter()
        if self._stage is not None:
            self.seconds[_group(self._stage)] = self.seconds.get(_group(self._stage), 0.0) + now - self._started
        self._started = now
        self._stage = None


def _group(stage: str) -> str:
    if stage.startswith("read "):
        return "read the GGUF"
    if stage.startswith("write "):
        return "write the folder"
    return stage


def compile_once(target: str, context: int, output: str) -> tuple[float, dict[str, float]]:
    clock = StageClock()
    start = time.perf_counter()
    compile_model(bundled_smollm2_path(), output, target, context, progress=clock)
    clock.stop()
    total = time.perf_counter() - start
    return total, clock.seconds


def digest_folder(folder: str) -> list[str]:
    lines = []
    for root, dirs, files in sorted(os.walk(folder)):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                lines.append(f"{hashlib.sha256(f.read()).hexdigest()}  {os.path.relpath(path, folder)}")
    return lines


def bench_target(target: str, context: int, rounds: int, workdir: str, show_digest: bool) -> float:
    totals, stages = [], []
    for round_index in range(rounds):
        output = os.path.join(workdir, f"{target}-{round_index}")
        total, seconds = compile_once(target, context, output)
        totals.append(total)
        stages.append(seconds)
        print(f"  {target} round {round_index + 1}: {total:.2f} s", file=sys.stderr)
    best = min(range(rounds), key=lambda i: totals[i])
    print(f"\n{target} at context {context}, {rounds} rounds: median {statistics.median(totals):.2f} s, "
          f"best {totals[best]:.2f} s\n")
    print(f"{'stage':<24}{'median s':>10}{'best round s':>14}")
    names = list(stages[best])
    for name in names:
        values = [s.get(name, 0.0) for s in stages]
        print(f"{name:<24}{statistics.median(values):>10.2f}{stages[best][name]:>14.2f}")
    print(f"{'total':<24}{statistics.median(totals):>10.2f}{totals[best]:>14.2f}")
    if show_digest:
        print()
        print("\n".join(digest_folder(os.path.join(workdir, f"{target}-{rounds - 1}"))))
    return totals[best]


def profile_target(target: str, context: int, workdir: str, top: int) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    compile_model(bundled_smollm2_path(), os.path.join(workdir, f"{target}-profile"), target, context)
    profiler.disable()
    for order in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(top)
        print(f"\ncProfile of one {target} compile, top {top} by {order}:")
        print(text.getvalue().split("\n", 6)[-1].rstrip())  # without pstats' preamble


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", action="append", help="target preset (repeatable; default webgpu)")
    parser.add_argument("--context", type=int, default=1024, help="context length (tessera compile's default)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="also print a cProfile top list of one round")
    parser.add_argument("--top", type=int, default=40, help="rows of the cProfile list")
    parser.add_argument("--digest", action="store_true", help="print the sha256 of every output file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tessera-compile-bench-") as workdir:
        for target in args.target or ["webgpu"]:
            bench_target(target, args.context, args.rounds, workdir, args.digest)
            if args.profile:
                profile_target(target, args.context, workdir, args.top)


if __name__ == "__main__":
    main()
