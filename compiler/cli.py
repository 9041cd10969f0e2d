"""The `tessera` command line (docs/cli.md): argument parsing over tessera.app.

Errors are printed as `error: ...` with exit status 1, without a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from .ir.errors import TesseraError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tessera", description="Tessera: compile ML models for the web "
                                     "and the edge.")
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("check", help="parse a script, check it is well formed, print it back")
    check.add_argument("file", help="a module in the text format (docs/script.md); - for stdin")

    inspect = commands.add_parser("inspect", help="describe a compiled executable directory or a bundle")
    inspect.add_argument("directory")
    inspect.add_argument("-v", "--verbose", action="store_true",
                         help="also every storage of the memory plans and every kernel")
    inspect.add_argument("--json", action="store_true", help="print everything as a JSON object instead of text")

    compile_cmd = commands.add_parser("compile", help="compile a GGUF chat model, an ONNX model or a torch.export "
                                      "program into a directory")
    compile_cmd.add_argument("model", help="a .gguf file (Llama family), a .onnx model or a .pt2 file "
                             "(torch.export.save)")
    compile_cmd.add_argument("-o", "--output", required=True, help="the directory to write")
    compile_cmd.add_argument("--target", default="webgpu",
                             help="a target preset, as `tessera targets` lists them (webgpu, wasm, vulkan ...)")
    compile_cmd.add_argument("--cpu", help="with --target cpu: the instruction set to build for (native, the default: "
                             "this machine; x86-64-v2, x86-64-v3, x86-64-v4; armv8.2-a; android-arm64-v8a, "
                             "android-x86_64: linked for Android's bionic)")
    compile_cmd.add_argument("--context", type=int, default=1024, help="KV cache positions (default 1024)")
    compile_cmd.add_argument("--prefill-chunk", type=int,
                             help="the most prompt positions one prefill call takes; longer prompts take several "
                                  "(default: up to 2048, from the target's buffer limits)")
    compile_cmd.add_argument("--max-batch", type=int, default=1,
                             help="B > 1: a batched build for `tessera serve`, decoding up to B requests together "
                                  "over a paged KV cache (docs/serve.md); default 1, a chat build")
    compile_cmd.add_argument("--gpu-layers", type=int, metavar="N",
                             help="split the model: the first N decoder layers on the GPU target, the rest and the "
                                  "output head on the CPU (WASM beside webgpu, native C beside vulkan/opencl/metal; "
                                  "docs/vdevice.md); default: all on the target")
    compile_cmd.add_argument("--input", action="append", metavar="NAME=D0,D1,...",
                             help="ONNX: fix an input's shape (x=1,3,224,224); repeat for more inputs")
    compile_cmd.add_argument("--dim", action="append", metavar="NAME=LO..HI",
                             help="ONNX or .pt2: bound a symbolic dimension (batch=1..8), so that memory is planned "
                                  "for its largest size; repeat for more")
    compile_cmd.add_argument("--dump-ir", metavar="DIR",
                             help="write the module before the passes and after each one into DIR (00-input.py, "
                                  "01-lambda_lift.py, ...; weights by shape only), each a file `tessera check` reads")
    compile_cmd.add_argument("-q", "--quiet", action="store_true",
                             help="print only the directory: no progress, no summary")

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
    chat.add_argument("--prefill-chunk", type=int, help="when compiling a GGUF: as for `tessera compile`")
    chat.add_argument("--json", action="store_true", help="with --prompt: print the reply and speeds as JSON")
    chat.add_argument("--runtime", choices=("python", "native"),
                      help="python: the Python VM on WebGPU; native: runtime-native's C runtime on the CPU (a GGUF is "
                           "compiled for --target cpu; a cpu, vulkan or opencl folder runs on its device). Default: "
                           "native when every WebGPU adapter is a CPU (llvmpipe) and the native runtime is built, else "
                           "python; a line on stderr says which and why")
    chat.add_argument("--device", metavar="NAME",
                      help="run on runtime-native's device NAME (implies --runtime native): auto, cpu, vulkan, "
                           "opencl, metal, or vulkan:N for the N-th Vulkan device. A GGUF is compiled for that "
                           "device's target; a compiled folder must hold a build of its kind. A line on stderr names "
                           "the device and why it was chosen")
    chat.add_argument("--threads", type=int, default=0, help="--runtime native: CPU threads (default: all)")

    bundle = commands.add_parser("bundle", help="write a static web site that chats with a model")
    bundle.add_argument("model", nargs="?", help="a .gguf file (default: the bundled SmolLM2), or a .onnx model: a "
                        "page that classifies a picture")
    bundle.add_argument("-o", "--output", default="dist", help="the folder to write (default dist/)")
    bundle.add_argument("--targets",
                        help="builds in order of preference (default webgpu-f16,webgpu,wasm: WebGPU with "
                             "float16 activations for adapters with shader-f16, WebGPU in float32 with "
                             "spec-default limits, then the WebAssembly CPU fallback)")
    bundle.add_argument("--context", type=int, default=1024, help="KV cache positions (default 1024)")
    bundle.add_argument("--gpu-layers", type=int, metavar="N",
                        help="split the WebGPU build: the first N decoder layers on WebGPU, the rest on WASM, as "
                             "`tessera compile --gpu-layers` (default targets then webgpu,wasm: a float16 build is "
                             "not split)")

    bundle.add_argument("--input", action="append", metavar="NAME=D0,D1,...",
                        help="a .onnx model: fix an input's shape, as for `tessera compile`")
    bundle.add_argument("--dim", action="append", metavar="NAME=LO..HI",
                        help="a .onnx model: bound a symbolic dimension, as for `tessera compile`")
    bundle.add_argument("--labels", metavar="FILE", help="a .onnx model: the class names, one per line")

    package = commands.add_parser("package", help="compile a GGUF chat model for Android or iOS and lay out the "
                                  "Gradle project or Swift package an app developer opens (docs/mobile.md)")
    package.add_argument("model", help="a .gguf file (Llama family)")
    package.add_argument("--target", required=True, metavar="PLATFORM",
                         help="android (Vulkan plus CPU builds in the Gradle library module) or ios (Metal, in the "
                              "Swift package)")
    package.add_argument("-o", "--output", required=True, help="the folder to write (new, or empty)")
    package.add_argument("--context", type=int, default=1024, help="KV cache positions (default 1024)")
    layout = package.add_mutually_exclusive_group()
    layout.add_argument("--whole", action="store_true",
                        help="the default: whole builds, one per device (android: vulkan, then the CPU per ABI), "
                             "the app loads the first that works")
    layout.add_argument("--split", action="store_true",
                        help="android: one build split between Vulkan and the CPU by --gpu-layers")
    package.add_argument("--gpu-layers", type=int, metavar="N",
                         help="the first N decoder layers on the GPU, the rest on the CPU (implies --split)")
    package.add_argument("--force", action="store_true",
                         help="replace a package that tessera package wrote into the folder before")

    serve = commands.add_parser("serve", help="serve a model over the OpenAI chat API with its chat page, or a "
                                "bundle's site (docs/serve.md)")
    serve.add_argument("model", nargs="?", default="dist", metavar="MODEL_OR_DIR",
                       help="a .gguf file, a compiled folder, a bundle's model folder (models/<id>), or a bundle's "
                            "site, served as static files (default dist)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="the address to listen on (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    serve.add_argument("--api-key", default=os.environ.get("TESSERA_API_KEY"),
                       help="the key /v1/ requires as 'Authorization: Bearer KEY' (default $TESSERA_API_KEY)")
    serve.add_argument("--device", default="auto", metavar="DEVICE",
                       help="where the model runs: webgpu or wasm (the Python VM), native (runtime-native: a cpu, "
                            "vulkan or opencl build, a GGUF compiled for cpu) or native:NAME (runtime-native's device "
                            "NAME as `tessera chat --device` names it: native:vulkan, native:opencl, native:vulkan:1, "
                            "native:cpu; a GGUF compiled for its target). Default auto: as `tessera chat` chooses")
    serve.add_argument("--max-batch", type=int, default=1,
                       help="requests decoded together as one step over a paged KV cache (continuous batching; "
                            "a GGUF is compiled for it); default 1: one request at a time")
    serve.add_argument("--max-queue", type=int, default=8,
                       help="requests waiting beyond the running ones; past it a 503 with Retry-After (default 8)")
    serve.add_argument("--context", type=int, default=1024, help="when compiling a GGUF: KV cache positions")
    serve.add_argument("--prefill-chunk", type=int, help="when compiling a GGUF: as for `tessera compile`")
    serve.add_argument("--threads", type=int, default=0, help="--device native: CPU threads (default: all)")

    commands.add_parser("ops", help="list the registered graph operators")
    commands.add_parser("targets", help="list the target presets --target accepts")
    commands.add_parser("demo", help="build, print, check and run a small example end to end")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except TesseraError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # what no check foresaw (a disk that fills, a file removed meanwhile): one line still
        where = f"{error.filename}: " if error.filename else ""
        print(f"error: {where}{error.strerror or error}", file=sys.stderr)
        return 1


def _check(args) -> int:
    from .ir import well_formed
    from .script import from_source

    path = args.file
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as error:
        print(f"error: cannot read {path}: {error.strerror}", file=sys.stderr)
        return 1
    mod = from_source(text)
    well_formed(mod)
    sys.stdout.write(mod.script())
    return 0


def _compile(args) -> int:
    from .app.compile import compile_model, compile_summary
    from .app.compile_graph import is_graph_model
    from .app.progress import ProgressBar

    if is_graph_model(args.model):
        return _compile_graph(args)
    if args.input or args.dim:
        print("error: --input and --dim apply to .onnx and .pt2 models, not to a GGUF", file=sys.stderr)
        return 1

    with ProgressBar("quiet" if args.quiet else None) as progress:
        compiled = compile_model(args.model, args.output, args.target, args.context, progress, args.cpu,
                                 args.prefill_chunk, args.max_batch, args.gpu_layers, dump_ir=args.dump_ir)
    if not args.quiet:
        sys.stderr.write(compile_summary(compiled))
    print(compiled.directory)
    return 0


def _compile_graph(args) -> int:
    from .app.compile_graph import compile_graph, graph_summary, parse_dims, parse_inputs
    from .app.progress import ProgressBar

    chat_only = [flag for flag, given in (("--prefill-chunk", args.prefill_chunk is not None),
                                          ("--max-batch", args.max_batch != 1),
                                          ("--gpu-layers", args.gpu_layers is not None)) if given]
    if chat_only:
        print(f"error: {', '.join(chat_only)} apply to GGUF chat models, not to {os.path.basename(args.model)}",
              file=sys.stderr)
        return 1
    shapes, dims = parse_inputs(args.input), parse_dims(args.dim)
    with ProgressBar("quiet" if args.quiet else None) as progress:
        compiled = compile_graph(args.model, args.output, args.target, shapes, dims, progress, args.cpu,
                                 dump_ir=args.dump_ir)
    if not args.quiet:
        sys.stderr.write(graph_summary(compiled))
    print(compiled.directory)
    return 0


def _chat(args) -> int:
    from .app.chat import ChatSession, NativeChatSession, Sampling, chat_interactive, chat_once
    from .app.chat_build import (
        DeviceChoiceError,
        choose_chat_build,
        compiled_build,
        native_build_problem,
        native_device_kind,
        native_runtime_problem,
        webgpu_adapters,
    )
    from .app.compile import cached_compile
    from .app.conversation import check_max_tokens, check_messages
    from .app.paths import check_chat_source
    from .app.progress import ProgressBar
    from .frontend import bundled_smollm2_path

    def say(line: str) -> None:
        if not args.json:
            print(line, file=sys.stderr)

    check_max_tokens(args.max_tokens)  # before a model is compiled or loaded
    if args.prompt is not None:
        check_messages([{"role": "user", "content": args.prompt}])

    source = args.model or bundled_smollm2_path()
    check_chat_source(source)
    if args.device is not None:
        if args.runtime == "python":
            raise DeviceChoiceError(f"--device {args.device} names a device of runtime-native; the Python VM runs a "
                                    "build on the device its kernels are for (leave out --device, or use --runtime "
                                    "native)")
        native_device_kind(args.device)  # a name runtime-native has, before anything is compiled
    asked = args.runtime or ("native" if args.device is not None else None)
    native_problem = native_runtime_problem() if asked is None else None
    if os.path.isdir(source):
        directory = source
        built_for, has_chat_format = compiled_build(directory)
        if asked == "native":
            problem = native_build_problem(f"--device {args.device}" if args.device else "--runtime native",
                                           args.device or "auto", built_for, directory)
            if problem:
                raise DeviceChoiceError(problem)
        # Not a compiled directory (no executable.json): the Python VM's error says what is missing.
        choice = choose_chat_build([], native_problem, args.runtime or (None if built_for or args.device else "python"),
                                   built_for, has_chat_format, args.device)
        if built_for:
            say(choice.describe())
    else:
        choice = choose_chat_build(webgpu_adapters() if asked is None else [], native_problem, args.runtime,
                                   device=args.device)
        say(choice.describe())
        say(f"compiling {os.path.basename(source)} (cached after the first time) ...")
        with ProgressBar("quiet" if args.json else None) as progress:
            directory = cached_compile(source, choice.target, args.context, progress, args.prefill_chunk)
        if choice.runtime == "native" and asked is None and not compiled_build(directory)[1]:
            choice = choose_chat_build([], None, None, "cpu", native_chat_format=False)
            say(choice.describe())
    if choice.runtime == "native":
        session = NativeChatSession(directory, args.threads, choice.device)
        say(f"device: {session.model.device_description}")
    else:
        session = ChatSession(directory)
    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.repetition_penalty, args.seed)
    if args.prompt is not None:
        chat_once(session, args.prompt, args.max_tokens, sampling, as_json=args.json)
    else:
        chat_interactive(session, args.max_tokens, sampling)
    return 0


def _inspect(args) -> int:
    from .app.inspect import inspect_directory

    sys.stdout.write(inspect_directory(args.directory, args.verbose, args.json))
    return 0


def _ops(args) -> int:
    from .op import list_ops

    print("\n".join(list_ops()))
    return 0


def _targets(args) -> int:
    from . import codegen  # noqa: F401  (each backend registers its target kinds and presets)
    from .target import presets

    for name, description in presets().items():
        print(f"{name:<12} {description}")
    return 0


def _bundle(args) -> int:
    from .app.bundle import DEFAULT_TARGETS, SPLIT_TARGETS, bundle_model
    from .app.progress import ProgressBar
    from .frontend import bundled_smollm2_path

    if args.model and args.model.lower().endswith((".onnx", ".pt2")):
        return _bundle_graph(args)
    if args.input or args.dim or args.labels:
        print("error: --input, --dim and --labels apply to a .onnx model, not to a GGUF", file=sys.stderr)
        return 1
    model = args.model or bundled_smollm2_path()
    print(f"bundling {os.path.basename(model)} (the compile is cached after the first time) ...", file=sys.stderr)
    targets = tuple(t.strip() for t in args.targets.split(",") if t.strip()) if args.targets is not None else \
        (SPLIT_TARGETS if args.gpu_layers is not None else DEFAULT_TARGETS)
    with ProgressBar() as progress:
        folder = bundle_model(model, args.output, args.context, targets=targets, progress=progress,
                              gpu_layers=args.gpu_layers)
    print(f"wrote {args.output}: the chat page is index.html, the model {os.path.relpath(folder, args.output)}")
    return 0


def _bundle_graph(args) -> int:
    from .app.bundle_graph import GRAPH_TARGETS, bundle_graph_model
    from .app.compile_graph import parse_dims, parse_inputs
    from .app.progress import ProgressBar

    targets = tuple(t.strip() for t in args.targets.split(",") if t.strip()) if args.targets is not None else \
        GRAPH_TARGETS
    if args.gpu_layers is not None:
        print("error: --gpu-layers applies to GGUF chat models", file=sys.stderr)
        return 1
    shapes, dims = parse_inputs(args.input), parse_dims(args.dim)
    with ProgressBar() as progress:
        folder = bundle_graph_model(args.model, args.output, targets, shapes, dims, args.labels, progress)
    print(f"wrote {args.output}: the page is index.html, the model {os.path.relpath(folder, args.output)}")
    return 0


def _package(args) -> int:
    from .app.package import package_model
    from .app.progress import ProgressBar

    print(f"packaging {os.path.basename(args.model)} for {args.target} (compiles are cached) ...", file=sys.stderr)
    with ProgressBar() as progress:
        folder = package_model(args.model, args.target, args.output, args.context, args.split, args.whole,
                               args.gpu_layers, args.force, progress)
    print(f"wrote {args.output}: the model is in {os.path.relpath(folder, args.output)}; {args.output}/README.md "
          "says what to open")
    return 0


def _serve(args) -> int:
    from .app.serve import serve

    serve(args.model, args.host, args.port, args.api_key, args.device, args.max_batch, args.max_queue, args.context,
          args.prefill_chunk, args.threads)
    return 0


def _demo(args) -> int:
    from .app.demo import run_demo

    return run_demo()


COMMANDS = {"check": _check, "compile": _compile, "chat": _chat, "inspect": _inspect, "ops": _ops, "targets": _targets,
            "bundle": _bundle, "package": _package, "serve": _serve, "demo": _demo}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
