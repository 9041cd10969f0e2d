"""Which build `tessera chat` runs on this machine, and why (docs/cli.md).

A WebGPU adapter that is a CPU (Mesa's llvmpipe behind wgpu, adapter type CPU) runs WGSL kernels
far slower than runtime-native runs the cpu build's machine code on the same cores, as SwiftShader
runs them slower than WASM in the browser (runtime-js/src/engine.js, orderBuilds). So when every
WebGPU adapter is a CPU and the native runtime is built, `tessera chat` compiles for the ``cpu``
target and chats on runtime-native; an explicit ``--runtime`` wins. ``choose_chat_build`` is that
decision as a pure function of what was found; ``webgpu_adapters`` and ``native_runtime_problem``
find it.

``--device NAME`` names one of runtime-native's devices (``auto``, ``cpu``, ``vulkan``, ``opencl``,
``metal``, ``vulkan:1`` for the second Vulkan device) and so implies ``--runtime native``: a GGUF
file is compiled for that device's target (``vulkan``, ``opencl``: the portable presets, whose
limits every such device meets), and a compiled folder must hold a build of that kind. A vulkan or
opencl folder runs natively only when asked (``--runtime native`` or ``--device``): without it the
Python VM runs it, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.target import NATIVE_DEVICE_LABELS
from tessera.vm import FileCheckError

from .bundle_json import BundleError


class DeviceChoiceError(BundleError):
    """A --device that names no runtime-native device, or one that does not run the build given."""

# What reading a compiled folder's executable.json and chat-config.json raises when they are no build
# (AttributeError: a document that is no JSON object).
_BUILD_ERRORS = (FileCheckError, AttributeError, BundleError)
# Names of software renderers in an adapter's info (as runtime-js/src/device.js lists them).
SOFTWARE_RENDERERS = ("llvmpipe", "lavapipe", "swiftshader", "basic render driver", "warp")
# runtime-native's device names (target.py), each also the target kind whose kernels it runs; "auto"
# lets the library pick the first that runs them. Labels name each build in the line that says which runs.
NATIVE_DEVICES = tuple(NATIVE_DEVICE_LABELS)
NATIVE_LABELS = NATIVE_DEVICE_LABELS


def native_device_kind(device: str) -> str:
    """The target kind a runtime-native device name runs ("vulkan:1" -> "vulkan"; "auto" -> "cpu", what a
    GGUF file is compiled for when no device is named), or a DeviceChoiceError naming the known ones."""
    name, _, index = device.partition(":")
    if device == "auto":
        return "cpu"
    if name not in NATIVE_DEVICES or (index and not (index.isdigit() and int(index) <= 255)):
        raise DeviceChoiceError(f"--device {device}: runtime-native's devices are auto, {', '.join(NATIVE_DEVICES)}, "
                                "with :N for the N-th of a kind (vulkan:1)")
    return name


def native_build_problem(flag: str, device: str, built_for: str | None, directory: str) -> str | None:
    """Why ``device`` cannot run the build in ``directory`` (of target kind ``built_for``), or None: a
    named device runs only its own kind's build, and "auto" one of the kinds runtime-native has."""
    wanted = native_device_kind(device) if device != "auto" else None
    if built_for is None:  # no readable build: the load says what is missing
        return None
    if wanted:
        return None if built_for == wanted else \
            f"{flag} runs a {wanted} build; {directory} holds a {built_for} build (compile it with --target {wanted})"
    if built_for in NATIVE_DEVICES:
        return None
    return (f"{flag} runs a {', '.join(NATIVE_DEVICES[:-1])} or {NATIVE_DEVICES[-1]} build on runtime-native; "
            f"{directory} holds a {built_for} build")


@dataclass(frozen=True)
class Adapter:
    """A WebGPU adapter as `tessera chat` weighs it: its name, and whether a CPU renders it."""

    name: str
    cpu: bool


@dataclass(frozen=True)
class ChatBuild:
    """What `tessera chat` runs: ``runtime`` "python" (the Python VM) or "native" (runtime-native),
    ``target`` the preset a GGUF file is compiled for (a directory keeps its own), why, and for
    runtime-native the device it is loaded on (a name of its device table; "auto": its choice)."""

    runtime: str
    target: str
    reason: str
    device: str = "auto"

    def describe(self) -> str:
        """The line `tessera chat` prints: ``using the native CPU build: <reason>``."""
        if self.runtime == "native":
            return f"using the native {NATIVE_LABELS.get(self.target, self.target)} build: {self.reason}"
        on = " with the WebGPU build" if self.target in ("llvmpipe", "webgpu") else ""
        return f"using the Python VM{on}: {self.reason}"


def choose_chat_build(adapters: list[Adapter], native_problem: str | None, runtime: str | None = None,
                      directory_target: str | None = None, native_chat_format: bool = True,
                      device: str | None = None) -> ChatBuild:
    """The build to chat with. ``adapters``: this machine's WebGPU adapters; ``native_problem``: why
    runtime-native cannot run here (None when its library loads); ``runtime``: what ``--runtime``
    asked (None: choose); ``directory_target``: the target kind of a compiled directory given
    instead of a GGUF file; ``native_chat_format``: whether its chat-config.json has the chat_format
    the native runtime needs to render a conversation; ``device``: what ``--device`` named (a
    runtime-native device: it implies runtime-native)."""
    if device is not None and runtime != "python":
        return ChatBuild("native", directory_target or native_device_kind(device), f"--device {device}", device)
    if runtime == "native":
        return ChatBuild("native", directory_target or "cpu", "--runtime native")
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

