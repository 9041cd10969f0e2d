"""Fuzz one loader with atheris (libFuzzer for Python), from its committed seed corpus.

    .venv/bin/python tests/fuzz/run.py gguf --seconds 600        # or executable, tensor_cache,
                                                                 # chat_config, template
    .venv/bin/python tests/fuzz/run.py gguf --replay FILE ...    # run inputs once (a crash's file)

New inputs go to a scratch folder (build/fuzz/<target>/, or --scratch), never to the committed
corpus; a failing input is written there as crash-*, timeout-* or oom-*. A failure is an exception
that is not a TesseraError, a single input running past --timeout seconds, or RSS past --rss-mb.
Exit status 0 when none was found.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from targets import CORPORA, TARGETS, run_one  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("target", choices=sorted(TARGETS))
    parser.add_argument("--seconds", type=int, default=60, help="how long to fuzz (default 60)")
    parser.add_argument("--timeout", type=int, default=20, help="seconds one input may take (default 20)")
    parser.add_argument("--rss-mb", type=int, default=2048, help="memory the process may reach (default 2048)")
    parser.add_argument("--scratch", help="where new inputs and failures go (default build/fuzz/TARGET)")
    parser.add_argument("--replay", nargs="+", metavar="FILE", help="run these inputs once and stop")
    args = parser.parse_args()
    if args.replay:
        for path in args.replay:
            with open(path, "rb") as f:
                run_one(args.target, f.read())
            print(f"{path}: no failure")
        return 0

    import atheris

    scratch = args.scratch or os.path.join(HERE, "..", "..", "build", "fuzz", args.target)
    os.makedirs(scratch, exist_ok=True)
    corpus = os.path.join(CORPORA, args.target)
    for name in sorted(os.listdir(corpus)):  # imports every module the target reaches, builds its folder
        with open(os.path.join(corpus, name), "rb") as f:
            run_one(args.target, f.read())
    atheris.instrument_all()  # coverage of every Python function loaded: what guides the mutations
    libfuzzer = [sys.argv[0], scratch, corpus, f"-max_total_time={args.seconds}", f"-timeout={args.timeout}",
                 f"-rss_limit_mb={args.rss_mb}", f"-artifact_prefix={scratch}/", "-print_final_stats=1",
                 "-max_len=131072"]
    atheris.Setup(libfuzzer, lambda data: run_one(args.target, data))
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
