"""bundle.json (docs/web.md): its version, the figures of each build, and reading it with every field checked.

A runtime decides from these figures whether a build fits a device before it downloads anything, so a
missing, negative, fractional or huge figure is an error that names it, never a number passed on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tessera import facts
from tessera.ir import TesseraError
from tessera.vm import check_against_schema, path_problem, read_json, resolve_inside

BUNDLE_VERSION = 2
# The figures of a build (docs/web.md): whole numbers of bytes that JSON and JavaScript hold exactly.
MAX_FIGURE = (1 << 53) - 1
MAX_BUNDLE_JSON = facts.MAX_JSON_BYTES["bundle"]
MEMORY_FIGURES = ("weights_bytes", "arena_bytes", "kv_cache_bytes", "total_bytes", "largest_buffer_bytes",
                  "largest_binding_bytes")


class BundleError(TesseraError):
    """A bundle that cannot be written (a missing runtime, a bad output folder) or read (a bad bundle.json)."""


def read_bundle(model_dir: str) -> dict:
    """A model folder's bundle.json, checked (``check_bundle``): a regular file of at most 1 MiB."""
    path = os.path.join(model_dir, "bundle.json")
    return check_bundle(read_json(model_dir, "bundle.json", "bundle index", MAX_BUNDLE_JSON, BundleError), path)


def check_bundle(doc, what: str = "bundle.json") -> dict:
    """``doc`` if it is a bundle.json this Tessera reads (docs/web.md), else a BundleError saying what is wrong:
    a missing, negative, fractional or huge figure is named, never passed on."""
    def expect(ok, problem):
        if not ok:
            raise BundleError(f"{what}: {problem}")

    expect(isinstance(doc, dict), "not a JSON object")
    expect(doc.get("format") == "tessera-bundle", f"not a Tessera bundle (format {doc.get('format')!r})")
    expect(doc.get("version") == BUNDLE_VERSION, f"version {doc.get('version')!r}; this Tessera reads version "
                                                 f"{BUNDLE_VERSION}: bundle the model again")
    expect(isinstance(doc.get("builds"), list) and doc["builds"], "lists no builds")
    for build in doc["builds"]:
        expect(isinstance(build, dict) and isinstance(build.get("name"), str), "a build has no name")
        name = build["name"]
        for key in ("path", "tensor_cache"):
            problem = path_problem(_folder(build.get(key)) if key == "path" else build.get(key))
            expect(problem is None, f"build {name}'s {key} {build.get(key)!r} is not a relative path inside the "
                                    f"model's folder: {problem}")
        expect(isinstance(build.get("kind"), str), f"build {name} has no kind")
        expect(isinstance(build.get("features"), list) and all(isinstance(f, str) for f in build["features"]),
               f"build {name}'s features are not a list of names")
        _check_figure(expect, f"build {name}'s download_bytes", build.get("download_bytes"))
        memory = build.get("memory")
        expect(isinstance(memory, dict), f"build {name} has no memory figures")
        for key in MEMORY_FIGURES:
            _check_figure(expect, f"build {name}'s memory.{key}", memory.get(key))
    for key in ("tokenizer", "chat_config"):
        problem = path_problem(doc.get(key))
        expect(problem is None, f"{key} {doc.get(key)!r} is not a relative path inside the model's folder: {problem}")
    check_against_schema(doc, "bundle", what, BundleError)  # and everything else docs/bundle.schema.json says
    return doc


def _check_figure(expect, what: str, value) -> None:
    expect(value is not None, f"{what} is missing")
    expect(isinstance(value, int) and not isinstance(value, bool),
           f"{what} is {value!r}, not a whole number of bytes")
    expect(0 <= value <= MAX_FIGURE, f"{what} is {value}, outside 0 .. 2**53 - 1 bytes")


def _folder(path):
    """A build's folder without its one closing '/'."""
    return path[:-1] if isinstance(path, str) and path.endswith("/") else path


@dataclass(frozen=True)
class BuildFiles:
    """Where a compiled build's weights, tokenizer and chat configuration are: in its folder (a `tessera
    compile` folder), or, for a build in a bundle, where bundle.json says (shared by its builds)."""

    tensor_cache: str
    tokenizer: str
    chat_config: str
    in_bundle: bool


def build_files(directory: str) -> BuildFiles:
    """The files of the build in ``directory``: its own, unless it is a build of a bundle (no
    tensor-cache.json of its own, and bundle.json in the folder above names it)."""
    own = BuildFiles(*(resolve_inside(directory, name, what, BundleError) for name, what in (
        ("tensor-cache.json", "tensor cache"), ("tokenizer.json", "tokenizer"),
        ("chat-config.json", "chat configuration"))), in_bundle=False)
    model_dir = os.path.dirname(os.path.abspath(directory))
    if os.path.exists(own.tensor_cache) or not os.path.exists(os.path.join(model_dir, "bundle.json")):
        return own
    index = read_bundle(model_dir)
    for build in index["builds"]:
        if os.path.normpath(os.path.join(model_dir, build["path"])) == os.path.abspath(directory):
            # Each where bundle.json says, with symlinks followed: still inside the model's folder.
            return BuildFiles(*(resolve_inside(model_dir, path, what, BundleError) for path, what in
                                ((build["tensor_cache"], f"build {build['name']}'s tensor cache"),
                                 (index["tokenizer"], "tokenizer"), (index["chat_config"], "chat configuration"))),
                              in_bundle=True)
    return own
