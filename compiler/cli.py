"""The `tessera` command line. See docs/cli.md."""

from __future__ import annotations

import argparse
import sys

from .ir.errors import TesseraError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tessera", description="Tessera: compile ML models for the web "
                                     "and the edge.")
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("check", help="parse a script, check it is well formed, print it back")
    check.add_argument("file", help="a module in the text format (docs/script.md); - for stdin")

    inspect = commands.add_parser("inspect", help="describe a compiled executable directory")
    inspect.add_argument("directory")
    inspect.add_argument("--json", action="store_true", help="print a JSON object instead of text")

    commands.add_parser("ops", help="list the registered graph operators")
    commands.add_parser("demo", help="build, print, check and run a small example end to end")

    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            return _check(args.file)
        if args.command == "inspect":
            return _inspect(args.directory, args.json)
        if args.command == "ops":
            from .op import list_ops

            print("\n".join(list_ops()))
            return 0
        if args.command == "demo":
            from .demo import run_demo

            return run_demo()
    except TesseraError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 2


def _inspect(directory: str, as_json: bool) -> int:
    import json

    from .inspect_executable import format_summary, summarize
    from .vm.executable import Executable

    summary = summarize(Executable.load(directory))
    sys.stdout.write(json.dumps(summary, indent=1) + "\n" if as_json else format_summary(summary))
    return 0


def _check(path: str) -> int:
    from .ir import well_formed
    from .script import from_source

    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as error:
        print(f"error: cannot read {path}: {error.strerror}", file=sys.stderr)
        return 1
    mod = from_source(text)
    well_formed(mod)
    sys.stdout.write(mod.script())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
