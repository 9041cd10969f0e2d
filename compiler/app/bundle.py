"""`tessera bundle`: a static web site that chats with a model (docs/web.md).

A bundle is a folder any static server can host:

    index.html, chat.js, chat.css      the chat page (web/templates, web/static)
    runtime/tessera.js ...             the browser runtime (runtime-js/src), importable by any page
    models/<id>/bundle.json            the model's builds, tokenizer and chat configuration
    models/<id>/webgpu/                executable.json, tensor-cache.json, params_shard_*.bin,
                                       tokenizer.json, chat-config.json (the `tessera compile` folder)
    models/<id>/wasm/                  the same for the WebAssembly CPU build, plus kernels.wasm

The compile itself is the cached one `tessera chat` uses, so bundling again is a copy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

from tessera.ir import TesseraError

from .compile import cached_compile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNTIME_SOURCE = os.path.join(REPO, "runtime-js", "src")
WEB_SOURCE = os.path.join(REPO, "web")


class BundleError(TesseraError):
    """A bundle that cannot be written (a missing runtime, a bad output folder)."""


def model_id(gguf_path: str) -> str:
    """A URL-safe folder name from the model file's name."""
    stem = os.path.basename(gguf_path)
    stem = stem[: -len(".gguf")] if stem.lower().endswith(".gguf") else stem
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "model"


TARGETS = ("webgpu", "wasm")


def bundle_model(gguf_path: str, output: str, context_length: int = 1024, title: str | None = None,
                 targets: tuple[str, ...] = TARGETS) -> str:
    """Write the site for ``gguf_path`` into ``output``; returns the model's folder in it.

    ``targets``: the builds, in the order the runtime tries them (WebGPU, then the WASM fallback)."""
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown or not targets:
        raise BundleError(f"unknown bundle target {', '.join(unknown) or '(none)'}; known: {', '.join(TARGETS)}")
    _vendor_runtime()
    name = model_id(gguf_path)
    model_dir = os.path.join(output, "models", name)
    if os.path.exists(model_dir):
        shutil.rmtree(model_dir)
    builds = []
    for target in targets:  # in order of preference: the runtime takes the first that can run
        shutil.copytree(cached_compile(gguf_path, target, context_length), os.path.join(model_dir, target))
        builds.append({"name": target, "kind": target, "path": f"{target}/", "features": []})
    first = targets[0]
    index = {"format": "tessera-bundle", "version": 1, "model": name, "builds": builds,
             "tokenizer": f"{first}/tokenizer.json", "chat_config": f"{first}/chat-config.json"}
    with open(os.path.join(model_dir, "bundle.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1)
    runtime = os.path.join(output, "runtime")
    if os.path.exists(runtime):
        shutil.rmtree(runtime)
    shutil.copytree(RUNTIME_SOURCE, runtime)
    for static in os.listdir(os.path.join(WEB_SOURCE, "static")):
        shutil.copy(os.path.join(WEB_SOURCE, "static", static), os.path.join(output, static))
    _render_page(output, name, title or name)
    return model_dir


def _vendor_runtime() -> None:
    """The runtime imports its npm dependencies from src/vendor, which `make setup` fills."""
    if not os.path.isdir(RUNTIME_SOURCE):
        raise BundleError(f"the browser runtime is not at {RUNTIME_SOURCE}; bundle from a Tessera source checkout")
    if os.path.exists(os.path.join(RUNTIME_SOURCE, "vendor", "tokenizers.js")):
        return
    try:
        subprocess.run(["node", os.path.join(REPO, "runtime-js", "scripts", "vendor.mjs")], check=True,
                       capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as error:
        raise BundleError("the runtime's dependencies are missing (runtime-js/src/vendor); run `make setup` "
                          f"(npm ci) first ({getattr(error, 'stderr', '') or error})") from None


def _render_page(output: str, name: str, title: str) -> None:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(loader=FileSystemLoader(os.path.join(WEB_SOURCE, "templates")),
                      autoescape=select_autoescape(["html", "j2"]))
    html = env.get_template("index.html.j2").render(title=title, model_url=f"models/{name}/",
                                                     runtime_url="runtime/tessera.js")
    with open(os.path.join(output, "index.html"), "w", encoding="utf-8") as f:
        f.write(html)
