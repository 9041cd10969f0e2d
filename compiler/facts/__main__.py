"""python -m tessera.facts --write | --check: regenerate the runtimes' facts files, or say which are stale."""

from __future__ import annotations

import argparse
import sys

from .render import REGENERATE, REPOSITORY, stale_files, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tessera.facts", description=__doc__.split(":", 1)[1].strip())
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="regenerate runtime-js's and runtime-native's files")
    action.add_argument("--check", action="store_true", help="exit with status 1 when a generated file is stale")
    args = parser.parse_args(argv)
    if not (REPOSITORY / "runtime-js").is_dir() or not (REPOSITORY / "runtime-native").is_dir():
        print(f"error: {REPOSITORY} is not a Tessera checkout (no runtime-js/ and runtime-native/ beside "
              "compiler/): the generated files live in the repository", file=sys.stderr)
        return 2
    if args.write:
        for relative in write():
            print(f"wrote {relative}")
        return 0
    stale = stale_files()
    for relative in stale:
        print(f"{relative} is stale: run `{REGENERATE}`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
