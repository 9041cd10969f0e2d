"""tessera.build: a graph module in, an executable out (the one place where the layers meet)."""

from __future__ import annotations

from .ir.module import IRModule
from .target import Target
from .transform.pipeline import Pipeline
from .vm.codegen import compile_vm
from .vm.executable import Executable


def build(mod: IRModule, target: Target | str = "webgpu", upper_bounds: dict[str, int] | None = None,
          pipeline: Pipeline | None = None) -> Executable:
    """Compile ``mod`` for ``target``; ``upper_bounds`` ({"n": 2048}) lets memory be planned ahead."""
    if isinstance(target, str):
        target = Target.preset(target)
    pipeline = pipeline or Pipeline.default(target, upper_bounds)
    return compile_vm(pipeline(mod), target, upper_bounds)
