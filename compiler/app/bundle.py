"""`tessera bundle`: a static web site that chats with a model (docs/web.md).

A bundle is a folder any static server can host:

    index.html, chat.js, chat.css      the chat page (web/templates, web/static: tessera/app/web installed)
    runtime/tessera.js ...             the browser runtime (runtime-js/src: tessera/app/runtime installed),
                                       importable by any page
    models/<id>/bundle.json            the model's builds, tokenizer and chat configuration
    models/<id>/webgpu/                executable.json, tensor-cache.json, params_shard_*.bin,
                                       tokenizer.json, chat-config.json (the `tessera compile` folder)
    models/<id>/wasm/                  the same for the WebAssembly CPU build, plus kernels.wasm

The compile itself is the cached one `tessera chat` uses, so bundling again is a copy.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import re
import shutil
from pathlib import Path

from tessera.ir import TesseraError

from .compile import cached_compile

# The runtime's npm dependencies, copied next to its sources by runtime-js/scripts/vendor.mjs (make setup).
VENDORED = ("tokenizers.js", "jinja.js")


class BundleError(TesseraError):
    """A bundle that cannot be written (a missing runtime, a bad output folder)."""


def model_id(gguf_path: str) -> str:
    """A URL-safe folder name from the model file's name."""
    stem = os.path.basename(gguf_path)
    stem = stem[: -len(".gguf")] if stem.lower().endswith(".gguf") else stem
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "model"


TARGETS = ("webgpu", "wasm")


def bundle_model(gguf_path: str, output: str, context_length: int = 1024, title: str | None = None,
                 targets: tuple[str, ...] = TARGETS, progress=None) -> str:
    """Write the site for ``gguf_path`` into ``output``; returns the model's folder in it.

    ``targets``: the builds, in the order the runtime tries them (WebGPU, then the WASM fallback).
    ``progress(stage, done, total)`` follows the compiles that are not cached yet."""
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown or not targets:
        raise BundleError(f"unknown bundle target {', '.join(unknown) or '(none)'}; known: {', '.join(TARGETS)}")
    runtime_source, web_source = runtime_folder(), web_folder()
    name = model_id(gguf_path)
    model_dir = os.path.join(output, "models", name)
    if os.path.exists(model_dir):
        shutil.rmtree(model_dir)
    builds = []
    for target in targets:  # in order of preference: the runtime takes the first that can run
        compiled = cached_compile(gguf_path, target, context_length, progress)
        shutil.copytree(compiled, os.path.join(model_dir, target))
        builds.append({"name": target, "kind": target, "path": f"{target}/", "features": []})
    first = targets[0]
    index = {"format": "tessera-bundle", "version": 1, "model": name, "builds": builds,
             "tokenizer": f"{first}/tokenizer.json", "chat_config": f"{first}/chat-config.json"}
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
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(loader=FileSystemLoader(templates), autoescape=select_autoescape(["html", "j2"]))
    html = env.get_template("index.html.j2").render(title=title, model_url=f"models/{name}/",
                                                     runtime_url="runtime/tessera.js")
    with open(os.path.join(output, "index.html"), "w", encoding="utf-8") as f:
        f.write(html)
