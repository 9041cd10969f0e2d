"""The VM's back end on the compiler side: a lowered module becomes an Executable.

- ``bytecode``: emits each graph function's VM instructions, its tensors' places and its memory
  plan from a legalized, memory-planned module and the kernels the codegen backends compiled;
- ``binding_limits``: checks every tensor a kernel binds whole against its device's limit before
  anything is written, and records the largest as the executable's required limit.

It imports the passes (``lower_vm``, ``plan_memory``, ``device_targets``) and the executable format
(``tessera.vm.executable``); the Python VM, ``tessera.vm``, imports nothing of this package or of the
passes, as Relax keeps its VM back end apart from its runtime.
"""

from .binding_limits import check_binding_limits, record_binding_needs
from .bytecode import VMCompileError, compile_vm

__all__ = ["VMCompileError", "check_binding_limits", "compile_vm", "record_binding_needs"]
