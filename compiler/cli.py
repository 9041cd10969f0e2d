"""The `tessera` command line. See docs/cli.md."""

from __future__ import annotations

import argparse
import os
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

    compile_cmd = commands.add_parser("compile", help="compile a GGUF chat model into a directory")
    compile_cmd.add_argument("model", help="a .gguf file (Llama family)")
    compile_cmd.add_argument("-o", "--output", required=True, help="the directory to write")
    compile_cmd.add_argument("--target", default="webgpu", help="webgpu (any device), llvmpipe, swiftshader ...")
    compile_cmd.add_argument("--context", type=int, default=1024, help="KV cache positions (default 1024)")

    chat = commands.add_parser("chat", help="chat with a model (default: the bundled SmolLM2)")
    chat.add_argument("model", nargs="?", help="a .gguf file or a compiled directory")
    chat.add_argument("--prompt", help="one turn, non-interactive")
    chat.add_argument("--max-tokens", type=int, default=256)
    chat.add_argument("--temperature", type=float, default=0.7)
    chat.add_argument("--top-p", type=float, default=0.95)
    chat.add_argument("--top-k", type=int, default=0)
    chat.add_argument("--repetition-penalty", type=float, default=1.0)
    chat.add_argument("--seed", type=int)
    chat.add_argument("--context", type=int, default=1024)
    chat.add_argument("--json", action="store_true", help="with --prompt: print the reply and speeds as JSON")

    bundle = commands.add_parser("bundle", help="write a static web site that chats with a model")
    bundle.add_argument("model", nargs="?", help="a .gguf file (default: the bundled SmolLM2)")
    bundle.add_argument("-o", "--output", default="dist", help="the folder to write (default dist/)")
    bundle.add_argument("--targets", default="webgpu,wasm",
                        help="builds in order of preference (default webgpu,wasm: WebGPU with spec-default "
                             "limits, then the WebAssembly CPU fallback)")
    bundle.add_argument("--context", type=int, default=1024, help="KV cache positions (default 1024)")

    serve = commands.add_parser("serve", help="serve a bundle on 127.0.0.1")
    serve.add_argument("directory", nargs="?", default="dist")
    serve.add_argument("--port", type=int, default=8000, help="0 picks a free port")

    commands.add_parser("ops", help="list the registered graph operators")
    commands.add_parser("demo", help="build, print, check and run a small example end to end")

    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            return _check(args.file)
        if args.command == "compile":
            from .chat import compile_model

            target = args.target if args.target != "webgpu" else "webgpu"
            print(compile_model(args.model, args.output, target, args.context))
            return 0
        if args.command == "chat":
            return _chat(args)
        if args.command == "inspect":
            return _inspect(args.directory, args.json)
        if args.command == "ops":
            from .op import list_ops

            print("\n".join(list_ops()))
            return 0
        if args.command == "bundle":
            from .bundle import bundle_model
            from .frontend import bundled_smollm2_path

            model = args.model or bundled_smollm2_path()
            print(f"bundling {os.path.basename(model)} (the compile is cached after the first time) ...",
                  file=sys.stderr)
            folder = bundle_model(model, args.output, args.context,
                                  targets=tuple(t.strip() for t in args.targets.split(",") if t.strip()))
            print(f"wrote {args.output}: the chat page is index.html, the model {os.path.relpath(folder, args.output)}")
            return 0
        if args.command == "serve":
            from .bundle import serve as serve_bundle

            serve_bundle(args.directory, args.port)
            return 0
        if args.command == "demo":
            from .demo import run_demo

            return run_demo()
    except TesseraError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 2


def _chat(args) -> int:
    import json
    import os

    from .chat import ChatError, ChatSession, Sampling, cached_compile
    from .frontend import bundled_smollm2_path

    source = args.model or bundled_smollm2_path()
    if os.path.isdir(source):
        directory = source
    else:
        if not args.json:
            print(f"compiling {os.path.basename(source)} (cached after the first time) ...", file=sys.stderr)
        directory = cached_compile(source, "llvmpipe", args.context)
    session = ChatSession(directory)
    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.repetition_penalty, args.seed)
    if args.prompt is not None:
        ids = session.encode_chat([{"role": "user", "content": args.prompt}])
        stream = None if args.json else (lambda piece: print(piece, end="", flush=True))
        result = session.generate(ids, args.max_tokens, sampling, on_text=stream)
        if args.json:
            print(json.dumps(result))
        else:
            print(f"\n[prefill {result['prefill_tokens_per_s']:.1f} tok/s, decode "
                  f"{result['decode_tokens_per_s']:.1f} tok/s]", file=sys.stderr)
        return 0
    messages: list[dict] = []
    print("Chat with the model; an empty line or Ctrl-D ends.", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            return 0
        if not line.strip():
            return 0
        messages.append({"role": "user", "content": line})
        try:
            result = session.generate(session.encode_chat(messages), args.max_tokens, sampling,
                                      on_text=lambda piece: print(piece, end="", flush=True))
        except ChatError as error:  # the conversation goes on without the failed turn
            messages.pop()
            print(f"error: {error}", file=sys.stderr)
            continue
        print(f"\n[prefill {result['prefill_tokens_per_s']:.1f} tok/s, decode "
              f"{result['decode_tokens_per_s']:.1f} tok/s]", file=sys.stderr)
        messages.append({"role": "assistant", "content": result["reply"]})


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
