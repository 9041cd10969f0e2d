"""`tessera bundle model.onnx`: a static site that classifies a picture the user gives, in the browser.

    index.html, infer.js, infer.css    the page (web/infer: tessera/app/web/infer installed)
    runtime/tessera.js ...             the browser runtime (its InferenceSession runs the model)
    model/model.json                   the builds in order of preference, the input (name, shape, layout),
                                       the output, the normalization and the labels
    model/webgpu/, model/wasm/         `tessera compile` folders, one per target, each with its weights

The page feeds one image: an input whose batch dimension is symbolic is fixed to 1 (other dimensions must
be fixed, by the model or by --input). Labels come from --labels (one per line), else from the model's
metadata (metadata_props "labels": a JSON list or one label per line, or "id2label": a JSON object as
transformers writes it); without them the page shows class indices. "mean" and "std" metadata (JSON
lists) set the normalization, ImageNet's by default.
"""

from __future__ import annotations

import json
import os
import shutil

from tessera.vm import Executable

from .bundle import BundleError, runtime_folder, web_folder
from .compile_graph import compile_graph
from .inspect import outputs_of
from .paths import check_output_folder

GRAPH_TARGETS = ("webgpu", "wasm")


def bundle_graph_model(path: str, output: str, targets: tuple[str, ...] = GRAPH_TARGETS, shapes: dict | None = None,
                       dims: dict | None = None, labels_file: str | None = None, progress=None) -> str:
    """Write the site for the ONNX model ``path`` into ``output``; returns the model's folder in it."""
    unknown = sorted(set(targets) - set(GRAPH_TARGETS))
    if unknown or not targets:
        raise BundleError(f"unknown bundle target {', '.join(unknown) or '(none)'} for a graph model; known: "
                          f"{', '.join(GRAPH_TARGETS)}")
    if not path.lower().endswith(".onnx"):
        raise BundleError(f"{os.path.basename(path)}: tessera bundle takes a .gguf chat model or a .onnx model")
    if not os.path.isfile(path):
        raise BundleError(f"{path}: no such file")
    check_output_folder(output, "the site")
    runtime_source, page_source = runtime_folder(), web_folder() / "infer"
    proto = _read_header(path)
    shapes = {**_batch_of_one(proto, shapes or {}, dims or {}), **(shapes or {})}
    labels = _labels(proto, labels_file)
    model_dir = os.path.join(output, "model")
    if os.path.exists(model_dir):
        shutil.rmtree(model_dir)
    targets = tuple(dict.fromkeys(targets))
    for target in targets:
        compile_graph(path, os.path.join(model_dir, target), target, shapes, dims, progress)
    record = Executable.load(os.path.join(model_dir, targets[0])).functions["main"]
    inputs = [p for p in record["params"] if not p.get("state")]
    if not inputs or inputs[0]["sinfo"]["kind"] != "tensor" or not inputs[0]["sinfo"]["shape"] or \
            not all(d.isdigit() for d in inputs[0]["sinfo"]["shape"]):
        shown = inputs[0]["sinfo"].get("shape") if inputs else None
        raise BundleError(f"the page feeds one picture of a fixed size, and the model's first input has shape "
                          f"{shown}: fix it with --input NAME=1,3,224,224")
    image = inputs[0]
    metadata = {entry.key: entry.value for entry in proto.metadata_props}
    index = {"name": os.path.splitext(os.path.basename(path))[0], "builds": [f"{t}/" for t in targets],
             "input": {"name": image["name"], "shape": [int(d) for d in image["sinfo"]["shape"]],
                       "type": image["sinfo"]["dtype"]},
             "output": outputs_of(record)[0]["name"], "labels": labels,
             "mean": _floats(metadata, "mean"), "std": _floats(metadata, "std")}
    with open(os.path.join(model_dir, "model.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1)
    runtime = os.path.join(output, "runtime")
    if os.path.exists(runtime):
        shutil.rmtree(runtime)
    shutil.copytree(runtime_source, runtime, ignore=shutil.ignore_patterns("__pycache__"))
    for page_file in ("index.html", "infer.js", "infer.css"):
        shutil.copy(page_source / page_file, os.path.join(output, page_file))
    return model_dir


def _read_header(path: str):
    """The model's graph and metadata, without its external data (the importer reads and checks that)."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        return onnx.load(path, load_external_data=False)
    except (DecodeError, RuntimeError, ValueError) as error:
        raise BundleError(f"{path} is not a valid ONNX model (truncated or corrupt: {error})") from None


def _batch_of_one(proto, shapes: dict, dims: dict) -> dict:
    """The first graph input fixed to a batch of 1 where its batch dimension is symbolic, its others fixed,
    and neither --input nor --dim says otherwise."""
    initializers = {tensor.name for tensor in proto.graph.initializer}
    inputs = [value for value in proto.graph.input if value.name not in initializers]
    if not inputs or inputs[0].name in shapes:
        return {}
    dims_of = inputs[0].type.tensor_type.shape.dim
    if len(dims_of) < 2 or dims_of[0].HasField("dim_value") or dims_of[0].dim_param in dims:
        return {}
    rest = [d.dim_value if d.HasField("dim_value") else None for d in dims_of[1:]]
    return {} if None in rest else {inputs[0].name: (1, *rest)}


def _labels(proto, labels_file: str | None) -> list[str] | None:
    if labels_file:
        try:
            with open(labels_file, encoding="utf-8") as f:
                return [line.strip() for line in f if line.strip()]
        except OSError as error:
            raise BundleError(f"cannot read --labels {labels_file}: {error.strerror or error}") from None
    metadata = {entry.key: entry.value for entry in proto.metadata_props}
    if "labels" in metadata:
        text = metadata["labels"]
        try:
            labels = json.loads(text)
        except ValueError:
            labels = [line.strip() for line in text.splitlines() if line.strip()]
        return [str(label) for label in labels] if isinstance(labels, list) else None
    if "id2label" in metadata:
        try:
            table = json.loads(metadata["id2label"])
            return [str(table[str(i)]) for i in range(len(table))]
        except (ValueError, KeyError, TypeError):
            return None
    return None


def _floats(metadata: dict, key: str) -> list[float] | None:
    try:
        values = json.loads(metadata[key]) if key in metadata else None
    except ValueError:
        return None
    return [float(v) for v in values] if isinstance(values, list) and all(isinstance(v, int | float) for v in values) \
        else None
