"""`tessera serve`: a model behind the OpenAI chat API with its chat page, or a bundle's static site,
over HTTP on this machine (docs/serve.md).

    tessera serve MODEL.gguf           compiled as `tessera chat` compiles it (cached), then served
    tessera serve DIR                  a compiled folder, or a bundle's model folder (with bundle.json)
    tessera serve SITE                 a bundle's site (index.html): its files as they are; the page
                                       runs the model in the browser

uvicorn runs the Starlette application (http_server.py) with the limits a server on a network needs:
a deadline for a request's head, an idle timeout between requests, a bound on open connections, on
header and body sizes; loopback unless told otherwise.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys

from .bundle import model_id as gguf_model_id
from .bundle import render_page, web_folder
from .bundle_json import BundleError, read_bundle
from .compile import MAX_BATCH

DEVICES = ("auto", "webgpu", "wasm", "native")  # and native:NAME, a device of runtime-native (chat_build.py)
IDLE_TIMEOUT_S = 5  # between requests on a kept-alive connection (uvicorn's timeout_keep_alive)
MAX_CONNECTIONS = 64  # open connections and requests in flight; past it uvicorn answers 503
MAX_HEADER_BYTES = 16 * 1024


class ServeError(BundleError):
    """A server that cannot start: a bad option, a folder that is neither a model nor a site."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(source: str, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
          device: str = "auto", max_batch: int = 1, max_queue: int = 8, context: int = 1024,
          prefill_chunk: int | None = None, threads: int = 0, ready=None) -> None:
    """Serve ``source`` (a GGUF file, a compiled folder, a bundle's model folder or its site) on
    ``host``:``port`` until interrupted; ``ready(url)`` is called once it listens."""
    from .batch_engine import BatchEngine, PagedModel
    from .engine import SerialEngine
    from .http_server import create_app

    if not 1 <= max_batch <= MAX_BATCH:
        raise ServeError(f"--max-batch {max_batch}: requests decoded together, 1 to {MAX_BATCH}")
    if max_queue < 0:
        raise ServeError(f"--max-queue {max_queue}: a count of waiting requests, 0 or more")
    check_device(device)
    engine = None
    if os.path.isdir(source) and os.path.isfile(os.path.join(source, "index.html")):
        app = create_app(None, site=source)
        what = f"the site {source} (the page runs the model in the browser)"
    else:
        session, name = open_model(source, device, context, prefill_chunk, threads, max_batch=max_batch)
        engine = BatchEngine(session, name, max_queue=max_queue) if isinstance(session, PagedModel) else \
            SerialEngine(session, name, max_queue=max_queue)
        page = render_page(name, api_url="v1/")
        app = create_app(engine, page_html=page, page_files=str(web_folder() / "static"), api_key=api_key)
        what = f"{name} (OpenAI API at /v1/, chat page at /)"
    try:
        run_app(app, host, port, api_key, what, ready)
    finally:
        if engine is not None:
            engine.close()


def check_device(device: str) -> str | None:
    """The runtime-native device ``--device`` names ("native" -> "auto", "native:vulkan" -> "vulkan"), None
    for the Python VM's choices; a ServeError for a name that is neither."""
    from .chat_build import DeviceChoiceError, native_device_kind

    base, colon, native = device.partition(":")
    if base == "native" and colon:
        try:
            native_device_kind(native)
        except DeviceChoiceError as error:
            raise ServeError(f"--device {device}: {str(error).split(': ', 1)[1]}") from None
        return native
    if device not in DEVICES:
        raise ServeError(f"unknown --device {device!r}; known: {', '.join(DEVICES)}, or native:NAME with NAME a "
                         "device of runtime-native (native:vulkan, native:opencl, native:cpu, native:vulkan:1)")
    return "auto" if device == "native" else None


def run_app(app, host: str, port: int, api_key: str | None, what: str, ready=None) -> None:
    """Run ``app`` until interrupted, saying where (and warning when the model is open to a network)."""
    if not is_loopback(host) and not api_key:
        print(f"warning: serving on {host}, which is not a loopback address, without --api-key: anyone who can "
              f"reach this machine's port can use the model; pass --api-key KEY, or bind 127.0.0.1", file=sys.stderr,
              flush=True)
    server, sock, url = uvicorn_server(app, host, port)
    print(f"serving {what} at {url}", flush=True)
    if ready is not None:
        ready(url)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        print("stopped", file=sys.stderr)


def uvicorn_server(app, host: str = "127.0.0.1", port: int = 0):
    """A uvicorn server for ``app`` with the limits above, its socket bound here (port 0: a free one) and
    its URL; ``server.run(sockets=[sock])`` serves."""
    import uvicorn

    from .http_server import HeadTimeoutProtocol

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # connections made as soon as the URL is printed wait for uvicorn in the backlog
    except OSError as error:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    url = f"http://{'[' + host + ']' if ':' in host else host}:{sock.getsockname()[1]}/"
    logging = bool(os.environ.get("TESSERA_SERVE_LOG"))
    config = uvicorn.Config(app, http=HeadTimeoutProtocol, timeout_keep_alive=IDLE_TIMEOUT_S,
                            limit_concurrency=MAX_CONNECTIONS, h11_max_incomplete_event_size=MAX_HEADER_BYTES,
                            log_level="info" if logging else "warning", access_log=logging, server_header=False,
                            lifespan="off")
    return uvicorn.Server(config), sock, url


def open_model(source: str, device: str = "auto", context: int = 1024, prefill_chunk: int | None = None,
               threads: int = 0, say=None, max_batch: int = 1):
    """The chat session for ``source`` and the model's name. A GGUF file is compiled (cached) for the build
    ``--device`` names, or the one `tessera chat` would choose (and says why); a compiled folder runs what
    it holds; a bundle's model folder runs one of its builds, WASM first when every WebGPU adapter here is
    a CPU, as the browser runtime orders them. With ``max_batch`` > 1, or for a compiled folder that holds
    a batched build, a ``PagedModel`` (batch_engine.py) in place of the session."""
    from tessera.frontend import check_gguf_file

    from .chat import ChatSession, NativeChatSession
    from .chat_build import (
        ChatBuild,
        choose_chat_build,
        compiled_build,
        compiled_build_problem,
        native_build_problem,
        native_device_kind,
        native_runtime_problem,
        webgpu_adapters,
    )
    from .compile import cached_compile
    from .progress import ProgressBar

    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    native_device = check_device(device)
    if not os.path.exists(source):
        raise ServeError(f"{source} does not exist: give a .gguf file, a compiled folder or a bundle")
    if os.path.isdir(source) and os.path.isfile(os.path.join(source, "bundle.json")):
        if max_batch > 1:
            raise ServeError(f"--max-batch {max_batch}: {source} is a bundle, whose builds are for one browser tab; "
                             "serve the GGUF file with --max-batch instead")
        return _bundle_session(source, device, webgpu_adapters, say), read_bundle(source)["model"]
    folder_batch = _compiled_batch(source) if os.path.isdir(source) else 1
    if os.path.isdir(source) and (max_batch > 1 or folder_batch > 1):
        if max_batch not in (1, folder_batch):
            raise ServeError(f"--max-batch {max_batch}: {source} holds a "
                             + (f"batched build for {folder_batch} requests" if folder_batch > 1 else "chat build")
                             + "; compile it again with the batch you want, or serve the GGUF file")
        max_batch = folder_batch
    if os.path.isdir(source):
        built_for, has_chat_format = compiled_build(source)
        if built_for is None and os.path.lexists(os.path.join(source, "executable.json")):
            problem = compiled_build_problem(source)  # a compiled folder after all: its files say what is wrong
            if problem:
                raise ServeError(f"{source} is not a compiled model that can be served: {problem}")
        if built_for is None:
            raise ServeError(f"{source} is neither a compiled model (no readable executable.json), a bundle's model "
                             "folder (bundle.json) nor a bundle's site (index.html)")
        wanted = {"webgpu": "webgpu", "wasm": "wasm"}.get(device)
        if wanted and built_for != wanted:
            raise ServeError(f"--device {device} runs a {wanted} build; {source} holds a {built_for} build")
        problem = native_build_problem(f"--device {device}", native_device, built_for, source) \
            if native_device else None
        if problem:
            raise ServeError(problem)
        if device == "auto":
            choice = choose_chat_build([], native_runtime_problem(), None, built_for, has_chat_format)
        elif native_device:
            choice = ChatBuild("native", built_for, f"--device {device}", native_device)
        else:
            choice = ChatBuild("python", built_for, f"--device {device}")
        directory, name = source, os.path.basename(os.path.normpath(source))
    else:
        check_gguf_file(source)  # a FIFO would block the compile cache's hash of it
        if device == "auto":
            choice = choose_chat_build(webgpu_adapters(), native_runtime_problem())
        elif native_device:
            choice = ChatBuild("native", native_device_kind(native_device), f"--device {device}", native_device)
        else:
            choice = ChatBuild(*{"webgpu": ("python", "llvmpipe"), "wasm": ("python", "wasm")}[device],
                               f"--device {device}")
        batched = f", batched for {max_batch} requests" if max_batch > 1 else ""
        say(f"compiling {os.path.basename(source)} for {choice.target}{batched} (cached after the first time) ...")
        with ProgressBar() as progress:
            directory = cached_compile(source, choice.target, context, progress, prefill_chunk, max_batch)
        if choice.runtime == "native" and device == "auto" and not compiled_build(directory)[1] and max_batch == 1:
            choice = choose_chat_build([], None, None, "cpu", native_chat_format=False)
        name = gguf_model_id(source)
    say(choice.describe())
    if max_batch > 1:
        from .batch_engine import BatchBuildError, PagedModel

        say(f"decoding up to {max_batch} requests together (continuous batching over a paged KV cache)")
        try:
            return PagedModel(directory, choice.runtime, threads, choice.device), name
        except BatchBuildError as error:
            raise ServeError(str(error)) from None
    if choice.runtime == "native":
        session = NativeChatSession(directory, threads, choice.device)
        say(f"device: {session.model.device_description}")
    else:
        session = ChatSession(directory)
    return session, name


def _compiled_batch(directory: str) -> int:
    """The requests a compiled folder's build decodes together: the max_batch of its chat-config.json's
    program section (tessera.models.llm_program); 1 for a one-sequence build, or a folder whose files do not
    say (the session opened on it then refuses it, and says why)."""
    from tessera.models.llm_program import ProgramError, read_program

    from .batch_engine import BatchBuildError, executable_functions
    from .chat_files import ChatFilesError, read_chat_config

    path = os.path.join(directory, "chat-config.json")
    try:  # a FIFO in its place is not opened (the open would wait for a writer): the session refuses it by name
        program = read_program(read_chat_config(path), executable_functions(directory), path)
    except (ChatFilesError, BatchBuildError, ProgramError):
        return 1
    return program.max_batch if program.batched else 1


def _bundle_session(model_dir: str, device: str, adapters, say):
    """A chat session on one of a bundle's builds: the first of the wanted kind whose device check passes."""
    from tessera.vm import DeviceError

    from .chat import ChatSession

    builds = read_bundle(model_dir)["builds"]
    kinds = [build["kind"] for build in builds]
    if device.startswith("native"):
        raise ServeError(f"{model_dir} is a bundle, whose builds ({', '.join(kinds)}) the native runtime does not "
                         f"run; serve the GGUF file with --device {device} instead")
    if device == "auto":
        device = "wasm" if "wasm" in kinds and all(a.cpu for a in adapters()) else "webgpu"
    problems = []
    for build in builds:
        if build["kind"] != device:
            continue
        try:
            session = ChatSession(os.path.join(model_dir, build["path"]))
        except DeviceError as error:  # e.g. webgpu-f16 on an adapter without shader-f16: the next build
            problems.append(f"{build['name']}: {error}")
            continue
        say(f"using the Python VM with the bundle's {build['name']} build")
        return session
    raise ServeError(f"{model_dir} has no {device} build that runs here (its builds: {', '.join(kinds)}"
                     + (f"; {'; '.join(problems)}" if problems else "") + ")")
