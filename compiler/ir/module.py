"""IRModule: the unit every pass takes and returns.

It holds graph functions by name, kernels by name (loop-level ``tir``
functions arrive with the kernel issue) and global infos such as the virtual
devices that tensors may be placed on.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .expr import Function


@dataclass(frozen=True)
class VDevice:
    """A virtual device: a target kind, an index among devices of that kind, a memory scope."""

    kind: str
    index: int = 0
    memory_scope: str = "global"

    @property
    def name(self) -> str:
        """How a tensor's struct info refers to it: ``"webgpu:0"``."""
        return f"{self.kind}:{self.index}"


@dataclass(frozen=True)
class IRModule:
    functions: Mapping[str, Any] = field(default_factory=dict)
    global_infos: Mapping[str, tuple] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "functions", dict(self.functions))
        object.__setattr__(self, "global_infos", {k: tuple(v) for k, v in self.global_infos.items()})

    def __getitem__(self, name: str) -> Any:
        try:
            return self.functions[name]
        except KeyError:
            known = ", ".join(sorted(self.functions)) or "none"
            raise KeyError(f"module has no function '{name}' (functions: {known})") from None

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def __iter__(self) -> Iterator[str]:
        return iter(self.functions)

    def graph_functions(self) -> dict[str, Function]:
        return {k: f for k, f in self.functions.items() if isinstance(f, Function)}

    def with_function(self, name: str, func: Any) -> IRModule:
        functions = dict(self.functions)
        functions[name] = func
        return IRModule(functions, self.global_infos)

    def without_function(self, name: str) -> IRModule:
        return IRModule({k: v for k, v in self.functions.items() if k != name}, self.global_infos)

    @property
    def vdevices(self) -> tuple[VDevice, ...]:
        return tuple(self.global_infos.get("vdevice", ()))

    def script(self) -> str:
        """The module as a TVMScript-style Python script (see docs/script.md)."""
        from .printer import print_module

        return print_module(self)

    def __str__(self) -> str:
        return self.script()
