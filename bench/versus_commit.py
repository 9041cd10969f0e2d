"""Tessera against an earlier Tessera: bench/llm.py's Tessera engine (SmolLM2 prefill and decode
tokens/s on llvmpipe) run from this checkout and from a git worktree of an earlier commit, in turns,
in one session on one machine (this machine's figures swing 3x from one machine to the next, so
only a side-by-side run compares).

    .venv/bin/python bench/versus_commit.py 45a74e1 [--rounds 2] [--prompt-tokens 128] [--decode-tokens 64]

The earlier commit is checked out under build/versus/<commit> and imported through a folder of
symlinks on PYTHONPATH (this venv's dependencies, that commit's source); each tree's own
bench/llm.py runs the engine, so each measures what its own code does. Prints each round and the
median ratio this/earlier for prefill and decode.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def checkout(commit: str) -> str:
    """A worktree of ``commit`` with an importable ``tessera`` package: (tree, PYTHONPATH folder)."""
    tree = os.path.join(ROOT, "build", "versus", commit)
    if not os.path.isdir(tree):
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", tree, commit], check=True,
                       capture_output=True)
    # `compiler/` is `tessera` and `codegen/` is `tessera.codegen` (pyproject's package-dir).
    link = os.path.join(tree, "compiler", "codegen")
    if not os.path.lexists(link):
        os.symlink(os.path.join("..", "codegen"), link)
    path = os.path.join(tree, "build", "pythonpath")
    os.makedirs(path, exist_ok=True)
    if not os.path.lexists(os.path.join(path, "tessera")):
        os.symlink(os.path.join(tree, "compiler"), os.path.join(path, "tessera"))
    return tree, path


def run_engine(tree: str, pythonpath: str | None, model: str, prompt_tokens: int, decode_tokens: int) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    run = subprocess.run([sys.executable, os.path.join(tree, "bench", "llm.py"), "--child", "tessera", model,
                          "--prompt-tokens", str(prompt_tokens), "--decode-tokens", str(decode_tokens)], env=env,
                         capture_output=True, text=True, cwd="/tmp")
    if run.returncode != 0:
        raise SystemExit(f"the engine failed in {tree}:\n{run.stderr[-3000:]}")
    result = json.loads(run.stdout.strip().splitlines()[-1])
    where = subprocess.run([sys.executable, "-c", "import tessera; print(tessera.__file__)"], env=env,
                           capture_output=True, text=True, cwd="/tmp").stdout.strip()
    result["source"] = where
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--decode-tokens", type=int, default=64)
    args = parser.parse_args()
    from tessera.frontend import bundled_smollm2_path

    model = bundled_smollm2_path()
    tree, path = checkout(args.commit)
    rows = []
    for round_ in range(args.rounds):
        earlier = run_engine(tree, path, model, args.prompt_tokens, args.decode_tokens)
        this = run_engine(ROOT, None, model, args.prompt_tokens, args.decode_tokens)
        assert earlier["source"].startswith(tree) and this["source"].startswith(ROOT), (earlier["source"],
                                                                                       this["source"])
        rows.append((earlier, this))
        print(f"round {round_ + 1}: earlier prefill {earlier['prefill_tok_s']:.2f} decode {earlier['decode_tok_s']:.2f}"
              f" tok/s; this prefill {this['prefill_tok_s']:.2f} decode {this['decode_tok_s']:.2f} tok/s; "
              f"first tokens equal: {earlier['first_tokens'] == this['first_tokens']}", flush=True)
    prefill = statistics.median(t["prefill_tok_s"] / e["prefill_tok_s"] for e, t in rows)
    decode = statistics.median(t["decode_tok_s"] / e["decode_tok_s"] for e, t in rows)
    print(f"this / {args.commit}: prefill {prefill:.3f}, decode {decode:.3f} (median of {len(rows)} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
