"""`tessera bundle`: a static web site that chats with a model (docs/web.md).

A bundle is a folder any static server can host:

    index.html, chat.js, chat.css      the chat page (web/templates, web/static: tessera/app/web installed)
    runtime/tessera.js ...             the browser runtime (runtime-js/src: tessera/app/runtime installed),
                                       importable by any page
    models/<id>/bundle.json            the model's builds (with what each downloads and needs of the
                                       device), tokenizer and chat configuration
    models/<id>/weights/               every build's weights, each distinct tensor once (weights.py):
                                       params_shard_*.bin, and <build>.json, each build's tensor cache
    models/<id>/tokenizer.json         the tokenizer and chat configuration, shared by the builds
    models/<id>/chat-config.json
    models/<id>/webgpu/                executable.json, kernels/ (the `tessera compile` folder, less what
                                       the builds share)
    models/<id>/wasm/                  the same for the WebAssembly CPU build, with kernels.wasm

The compile itself is the cached one `tessera chat` uses, so bundling again is a copy.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import re
import shutil
from pathlib import Path

from tessera.frontend import check_gguf_file
from tessera.target import Target
from tessera.vm import Executable

from .bundle_json import BUNDLE_VERSION, BundleError, check_bundle
from .compile import CHAT_CONFIG, TOKENIZER, cached_compile
from .memory import device_memory
from .paths import check_output_folder
from .weights import download_bytes, write_shared_weights

# The runtime's npm dependencies, copied next to its sources by runtime-js/scripts/vendor.mjs (make setup),
# which also writes the formats' JSON Schemas there as a module.
VENDORED = ("tokenizers.js", "jinja.js", "schemas.js")


def model_id(gguf_path: str) -> str:
    """A URL-safe folder name from the model file's name."""
    stem = os.path.basename(gguf_path)
    stem = stem[: -len(".gguf")] if stem.lower().endswith(".gguf") else stem
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "model"


# The builds `tessera bundle` knows, best first for a GPU; the runtime takes the first that fits the device.
TARGETS = ("webgpu-f16", "webgpu", "wasm")
DEFAULT_TARGETS = TARGETS
# With --gpu-layers: the split WebGPU build (float32: a float16 build is not split), then the WASM fallback.
SPLIT_TARGETS = ("webgpu", "wasm")


def bundle_model(gguf_path: str, output: str, context_length: int = 1024, title: str | None = None,
                 targets: tuple[str, ...] = DEFAULT_TARGETS, progress=None, gpu_layers: int | None = None) -> str:
    """Write the site for ``gguf_path`` into ``output``; returns the model's folder in it.

    ``targets``: the builds, in the order the runtime tries them (WebGPU, then the WASM fallback).
    ``gpu_layers``: the WebGPU builds are split, their first that many decoder layers on WebGPU and
    the rest on WASM (`tessera compile --gpu-layers`); the WASM build stays whole.
    ``progress(stage, done, total)`` follows the compiles that are not cached yet."""
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown or not targets:
        raise BundleError(f"unknown bundle target {', '.join(unknown) or '(none)'}; known: {', '.join(TARGETS)}")
    split = {t for t in targets if gpu_layers is not None and Target.preset(t).split_partner}
    unsplittable = [t for t in split if Target.preset(t).activation_dtype != "float32"]
    if unsplittable:
        raise BundleError(f"--gpu-layers splits float32 builds; drop {', '.join(unsplittable)} from --targets "
                          f"(e.g. --targets {','.join(SPLIT_TARGETS)})")
    targets = tuple(dict.fromkeys(targets))
    # Before anything is compiled, and before an earlier bundle of this model is removed below.
    check_gguf_file(gguf_path)
    check_output_folder(output, "the site")
    runtime_source, web_source = runtime_folder(), web_folder()
    name = model_id(gguf_path)
    model_dir = os.path.join(output, "models", name)
    if os.path.exists(model_dir):
        shutil.rmtree(model_dir)
    executables = {}
    for target in targets:  # in order of preference: the runtime takes the first that can run
        compiled = cached_compile(gguf_path, target, context_length, progress,
                                  gpu_layers=gpu_layers if target in split else None)
        # The weights, tokenizer and chat configuration are written once for all builds, below; a
        # native GPU device's compile cache (.tessera-cache, docs/native.md) is this machine's alone.
        shutil.copytree(compiled, os.path.join(model_dir, target), ignore=shutil.ignore_patterns(
            "tensor-cache.json", "params_shard_*.bin", TOKENIZER, CHAT_CONFIG, ".tessera-cache"))
        executables[target] = Executable.load(compiled)
        if target == targets[0]:
            for file in (TOKENIZER, CHAT_CONFIG):  # the same for every build: one compile of one model file
                shutil.copy(os.path.join(compiled, file), os.path.join(model_dir, file))
    caches = write_shared_weights(model_dir, {target: exe.constants for target, exe in executables.items()})
    shared = (TOKENIZER, CHAT_CONFIG)
    builds = [_build_record(model_dir, target, executables[target], caches[target], shared) for target in targets]
    index = {"format": "tessera-bundle", "version": BUNDLE_VERSION, "model": name, "builds": builds,
             "tokenizer": shared[0], "chat_config": shared[1]}
    check_bundle(index, os.path.join(model_dir, "bundle.json"))
    with open(os.path.join(model_dir, "bundle.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1)
    runtime = os.path.join(output, "runtime")
    if os.path.exists(runtime):
        shutil.rmtree(runtime)
    shutil.copytree(runtime_source, runtime, ignore=shutil.ignore_patterns("__pycache__"))
    for static in sorted((web_source / "static").iterdir()):
        shutil.copy(static, os.path.join(output, static.name))
    _render_page(web_source / "templates", output, name, title or name)
    return model_dir


def _build_record(model_dir: str, target: str, exe: Executable, tensor_cache: str, shared: tuple[str, ...]) -> dict:
    """A build's entry in bundle.json: where it is, and the figures a runtime checks before it downloads."""
    memory = device_memory(exe)
    if memory.total is None or memory.largest_buffer is None or memory.largest_binding is None:
        raise BundleError(f"the {target} build plans some memory at run time (a size without an upper bound), so "
                          "bundle.json could not say whether it fits a device before the download")
    figures = {"weights_bytes": memory.weights, "arena_bytes": memory.arena, "kv_cache_bytes": memory.kv_cache,
               "total_bytes": memory.total, "largest_buffer_bytes": memory.largest_buffer,
               "largest_binding_bytes": memory.largest_binding}
    download = download_bytes(os.path.join(model_dir, target), os.path.join(model_dir, tensor_cache),
                              tuple(os.path.join(model_dir, path) for path in shared))
    return {"name": target, "kind": exe.target["kind"], "path": f"{target}/", "features": list(exe.required_features),
            "tensor_cache": tensor_cache, "download_bytes": download, "memory": figures}


def runtime_folder() -> Path:
    """The browser runtime's ES modules (runtime-js/src), with the vendored dependencies they import."""
    folder = _shipped_folder("runtime", "runtime-js/src")
    if not (folder / "tessera.js").is_file():
        raise BundleError(f"the browser runtime at {folder} has no tessera.js (an incomplete installation?)")
    missing = [name for name in VENDORED if not (folder / "vendor" / name).is_file()]
    if missing:
        fix = ("run `make setup` (npm ci, then node runtime-js/scripts/vendor.mjs)"
               if folder == _source_tree() / "runtime-js" / "src" else
               "this installation was built from a checkout before `make setup`: build the wheel again after it")
        raise BundleError(f"the browser runtime's npm dependencies are missing ({folder / 'vendor'} lacks "
                          f"{', '.join(missing)}); {fix}")
    return folder


def web_folder() -> Path:
    """The chat page: templates/ (jinja2) and static/ (script and style)."""
    return _shipped_folder("web", "web")


def _shipped_folder(name: str, source_path: str) -> Path:
    """A folder that ships as package data of tessera.app (pyproject.toml maps it there): inside the
    installed package from a wheel; in the source tree for an editable install, which maps only the
    Python packages."""
    installed = importlib.resources.files(__package__) / name
    if isinstance(installed, Path) and installed.is_dir():
        return installed
    source = _source_tree() / source_path
    if source.is_dir():
        return source
    raise BundleError(f"this Tessera installation lacks tessera/app/{name} (package data); reinstall it")


def _source_tree() -> Path:
    return Path(__file__).resolve().parents[2]  # compiler/app/bundle.py in a checkout


def _render_page(templates: Path, output: str, name: str, title: str) -> None:
    html = render_page(title, model_url=f"models/{name}/", runtime_url="runtime/tessera.js", templates=templates)
    with open(os.path.join(output, "index.html"), "w", encoding="utf-8") as f:
        f.write(html)


def render_page(title: str, model_url: str = "", runtime_url: str = "", api_url: str = "",
                templates: Path | None = None) -> str:
    """The chat page: running the model at ``model_url`` in the browser with the runtime at ``runtime_url``
    (a bundle), or talking to the OpenAI API at ``api_url`` (the page `tessera serve` serves with a model)."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(loader=FileSystemLoader(templates or web_folder() / "templates"),
                      autoescape=select_autoescape(["html", "j2"]))
    return env.get_template("index.html.j2").render(title=title, model_url=model_url, runtime_url=runtime_url,
                                                    api_url=api_url)
