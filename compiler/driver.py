"""tessera.build: a graph module in, an executable out (the one place where the layers meet)."""

from __future__ import annotations

from . import codegen
from .ir.module import IRModule
from .target import Target
from .tir.ir import PrimFunc
from .transform.pipeline import Pipeline
from .vm.codegen import compile_vm
from .vm.executable import Executable


def build(mod: IRModule, target: Target | str = "webgpu", upper_bounds: dict[str, int] | None = None,
          pipeline: Pipeline | None = None, progress=None) -> Executable:
    """Compile ``mod`` for ``target``; ``upper_bounds`` ({"n": 2048}) lets memory be planned ahead.

    ``progress(stage, done, total)``, if given, hears of each pass and each kernel, for a progress bar."""
    if isinstance(target, str):
        target = Target.preset(target)
    pipeline = pipeline or Pipeline.default(target, upper_bounds)
    lowered = pipeline(mod, progress)
    backend = codegen.backend_for(target)
    kernels = [f for f in lowered.functions.values() if isinstance(f, PrimFunc)]
    compiled = backend.compile(kernels, target, progress)
    if progress is not None:
        progress("vm", 0, 1)
    return compile_vm(lowered, target, compiled, upper_bounds)
