"""`tessera compile model.onnx|model.pt2`: a graph model (an image classifier, an embedder ...) into the same
executable folder as any other compile (docs/format.md), which `tessera.InferenceSession` and runtime-js's
``InferenceSession`` run tensors in, tensors out.

``--input NAME=D0,D1,...`` fixes an input's shape (from_onnx's ``shapes``); ``--dim NAME=LO..HI`` bounds a
shape variable (``dims``), so that memory is planned for its largest size. Every refusal is one
TesseraError line: a missing or truncated file, an unknown op, an opset below 11, a bad option.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

import tessera
from tessera.ir import TesseraError
from tessera.vm import Executable

from .compile import CompileError, Progress, _silent, resolve_target
from .inspect import describe_target, io_lines
from .memory import device_memory, mib
from .paths import check_output_folder

GRAPH_SUFFIXES = (".onnx", ".pt2")
_NAME = r"[^=\s]+"


@dataclass(frozen=True)
class CompiledGraph:
    directory: str
    executable: Executable
    seconds: float


def is_graph_model(path: str) -> bool:
    return path.lower().endswith(GRAPH_SUFFIXES)


def parse_inputs(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``["x=1,3,224,224"]`` -> {"x": (1, 3, 224, 224)}."""
    shapes = {}
    for spec in specs or ():
        match = re.fullmatch(rf"({_NAME})=(\d+(?:,\d+)*)?", spec.strip())
        if not match:
            raise CompileError(f"--input {spec!r}: expected NAME=D0,D1,... with whole numbers (x=1,3,224,224; "
                               "x= for a scalar)")
        name, dims = match.groups()
        if name in shapes:
            raise CompileError(f"--input {name} is given twice")
        shapes[name] = tuple(int(d) for d in dims.split(",")) if dims else ()
    return shapes


def parse_dims(specs: list[str] | None) -> dict[str, tuple[int, int]]:
    """``["batch=1..8"]`` -> {"batch": (1, 8)}; ``batch=8`` is 1..8."""
    dims = {}
    for spec in specs or ():
        match = re.fullmatch(rf"({_NAME})=(?:(\d+)\.\.)?(\d+)", spec.strip())
        if not match:
            raise CompileError(f"--dim {spec!r}: expected NAME=LO..HI (batch=1..8) or NAME=HI with whole numbers")
        name, low, high = match.group(1), int(match.group(2) or 1), int(match.group(3))
        if low > high or high < 1:
            raise CompileError(f"--dim {spec!r}: the bounds must be 0 <= LO <= HI and HI >= 1")
        if name in dims:
            raise CompileError(f"--dim {name} is given twice")
        dims[name] = (low, high)
    return dims


def import_graph(path: str, shapes: dict, dims: dict):
    """The IR module of ``path`` (.onnx or .pt2), by the importer its suffix names."""
    if not os.path.isfile(path):
        raise CompileError(f"{path}: no such file")
    if path.lower().endswith(".onnx"):
        from tessera.frontend import from_onnx

        return _imported(path, lambda: from_onnx(path, shapes=shapes, dims=dims))
    try:
        from tessera.frontend.torch_export import from_exported_program
    except ImportError as error:
        raise CompileError(f"{path}: this Tessera cannot import torch.export programs ({error}); export the model "
                           "with torch.onnx.export and compile the .onnx file") from None
    if shapes:
        raise CompileError(f"--input applies to ONNX models; {os.path.basename(path)} has the shapes torch.export "
                           "recorded: bound its dynamic dimensions with --dim")
    return _imported(path, lambda: from_exported_program(path, dims=dims))


def _imported(path: str, run):
    try:
        return run()
    except TesseraError as error:
        text = str(error)
        if "shapes= " in text or "dims= " in text:  # the importer's keywords, as the command line spells them
            raise CompileError(text.replace("shapes= ", "--input ").replace("dims= ", "--dim ")) from None
        raise
    except Exception as error:  # an importer's own fault: still one line, saying whose it is
        raise CompileError(f"{path}: the importer failed ({type(error).__name__}: {error}); this is a bug in "
                           "Tessera, not in the model") from None


def compile_graph(path: str, output: str, target="webgpu", shapes: dict | None = None, dims: dict | None = None,
                  progress: Progress | None = None, cpu: str | None = None,
                  dump_ir: str | None = None) -> CompiledGraph:
    """Import ``path`` and build it for ``target`` into the folder ``output``."""
    target = resolve_target(target, cpu)
    progress = progress or _silent
    start = time.perf_counter()
    check_output_folder(output, "the compiled model")
    if not os.path.isfile(path):
        raise CompileError(f"{path}: no such file")
    progress(f"import {os.path.basename(path)}", 0, 1)
    mod = import_graph(path, dict(shapes or {}), dict(dims or {}))
    exe = tessera.build(mod, target, progress=progress, dump_ir=dump_ir)
    progress(f"write {output}", 0, 1)
    os.makedirs(output, exist_ok=True)
    exe.save(output)
    return CompiledGraph(output, exe, time.perf_counter() - start)


def graph_summary(compiled: CompiledGraph) -> str:
    """What `tessera compile` prints for a graph model: the target, the kernels, memory, inputs and outputs."""
    exe = compiled.executable
    memory = device_memory(exe)
    rows = [("target", describe_target(exe.target)), ("kernels", str(len(exe.kernels))),
            ("weights", f"{mib(memory.weights)} in {memory.weight_tensors} tensors"),
            ("arena", f"{mib(memory.arena)}"), ("device memory", f"{mib(memory.total)} in all"),
            ("time", f"{compiled.seconds:.1f} s")]
    text = "".join(f"{label + ':':<15}{value}\n" for label, value in rows)
    record = exe.functions.get("main")
    return text + ("".join(line + "\n" for line in io_lines(record)) if record else "")
