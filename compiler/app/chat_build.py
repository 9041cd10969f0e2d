"""Which build `tessera chat` runs on this machine, and why (docs/cli.md).

A WebGPU adapter that is a CPU (Mesa's llvmpipe behind wgpu, adapter type CPU) runs WGSL kernels
far slower than runtime-native runs the cpu build's machine code on the same cores, as SwiftShader
runs them slower than WASM in the browser (runtime-js/src/engine.js, orderBuilds). So when every
WebGPU adapter is a CPU and the native runtime is built, `tessera chat` compiles for the ``cpu``
target and chats on runtime-native; an explicit ``--runtime`` wins. ``choose_chat_build`` is that
decision as a pure function of what was found; ``webgpu_adapters`` and ``native_runtime_problem``
find it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.vm import FileCheckError

from .bundle_json import BundleError

# What reading a compiled folder's executable.json and chat-config.json raises when they are no build
# (AttributeError: a document that is no JSON object).
_BUILD_ERRORS = (FileCheckError, AttributeError, BundleError)
# Names of software renderers in an adapter's info (as runtime-js/src/device.js lists them).
SOFTWARE_RENDERERS = ("llvmpipe", "lavapipe", "swiftshader", "basic render driver", "warp")


@dataclass(frozen=True)
class Adapter:
    """A WebGPU adapter as `tessera chat` weighs it: its name, and whether a CPU renders it."""

    name: str
    cpu: bool


@dataclass(frozen=True)
class ChatBuild:
    """What `tessera chat` runs: ``runtime`` "python" (the Python VM) or "native" (runtime-native),
    ``target`` the preset a GGUF file is compiled for (a directory keeps its own), and why."""

    runtime: str
    target: str
    reason: str

    def describe(self) -> str:
        """The line `tessera chat` prints: ``using the native CPU build: <reason>``."""
        if self.runtime == "native":
            return f"using the native CPU build: {self.reason}"
        on = " with the WebGPU build" if self.target in ("llvmpipe", "webgpu") else ""
        return f"using the Python VM{on}: {self.reason}"


def choose_chat_build(adapters: list[Adapter], native_problem: str | None, runtime: str | None = None,
                      directory_target: str | None = None, native_chat_format: bool = True) -> ChatBuild:
    """The build to chat with. ``adapters``: this machine's WebGPU adapters; ``native_problem``: why
    runtime-native cannot run here (None when its library loads); ``runtime``: what ``--runtime``
    asked (None: choose); ``directory_target``: the target kind of a compiled directory given
    instead of a GGUF file; ``native_chat_format``: whether its chat-config.json has the chat_format
    the native runtime needs to render a conversation."""
    if runtime == "native":
        return ChatBuild("native", "cpu", "--runtime native")
    if runtime == "python":
        return ChatBuild("python", directory_target or "llvmpipe", "--runtime python")
    if directory_target is not None:
        if directory_target != "cpu":
            return ChatBuild("python", directory_target, f"the directory holds a {directory_target} build")
        if native_problem:
            return ChatBuild("python", "cpu", f"the directory holds a cpu build and {native_problem}")
        if not native_chat_format:
            return ChatBuild("python", "cpu", "the native runtime cannot render this model's chat template "
                                              "(chat-config.json has no chat_format)")
        return ChatBuild("native", "cpu", "the directory holds a cpu build")
    gpus = [a.name for a in adapters if not a.cpu]
    if gpus:
        return ChatBuild("python", "llvmpipe", f"the WebGPU adapter {gpus[0]} is a GPU")
    names = sorted({a.name for a in adapters})
    found = (f"the only WebGPU adapter is {names[0]}, a software renderer" if len(names) == 1 else
             f"the WebGPU adapters ({', '.join(names)}) are software renderers" if names else
             "there is no WebGPU adapter")
    if native_problem:
        return ChatBuild("python", "llvmpipe", f"{found}, but {native_problem}")
    return ChatBuild("native", "cpu", found)


def webgpu_adapters() -> list[Adapter]:
    """This machine's WebGPU adapters as wgpu-py finds them (none when wgpu cannot)."""
    from tessera.vm import webgpu_adapter_infos

    adapters = []
    for info in webgpu_adapter_infos():
        name = info.get("device") or info.get("description") or "unknown adapter"
        text = " ".join(str(info.get(key, "")) for key in ("vendor", "architecture", "device", "description")).lower()
        cpu = info.get("adapter_type") == "CPU" or any(n in text for n in SOFTWARE_RENDERERS)
        adapters.append(Adapter(name, cpu))
    return adapters


def native_runtime_problem() -> str | None:
    """Why runtime-native cannot be used here (its library is not built), or None."""
    from tessera.native import NativeError, load_library

    try:
        load_library()
    except (NativeError, OSError):
        return "the native runtime is not built (`make native` builds it)"
    return None


def compiled_build(directory: str) -> tuple[str | None, bool]:
    """The target kind a compiled directory was built for (None when it holds no readable
    executable.json), and whether its chat-config.json has the chat_format runtime-native needs."""
    try:
        return _read_build(directory)
    except _BUILD_ERRORS:
        return None, False


def compiled_build_problem(directory: str) -> str | None:
    """Why ``compiled_build`` finds no build in ``directory``, in words, where a file says why (None
    where none does): a folder with an executable.json but a chat-config.json that is a FIFO, say."""
    try:
        _read_build(directory)
    except _BUILD_ERRORS as error:
        return str(error) if not isinstance(error, AttributeError) else \
            "executable.json or chat-config.json is not a JSON object"
    return None


def _read_build(directory: str) -> tuple[str | None, bool]:
    from tessera.vm import parse_json, read_inside, read_regular

    from .bundle_json import build_files

    # Regular files only: a FIFO in their place is refused, never opened
    executable = parse_json(read_inside(directory, "executable.json", "executable"), "executable.json")
    chat_config = build_files(directory).chat_config
    config = parse_json(read_regular(chat_config, "chat configuration"), chat_config)
    kind = executable.get("target", {}).get("kind")
    has_chat_format = config.get("chat_format") is not None
    return (kind if isinstance(kind, str) else None), has_chat_format

