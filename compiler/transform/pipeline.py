"""The compilation pipeline: the passes in order, as a list a user can edit, and the instruments
that watch them (transform/instruments.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ..ir.module import IRModule
from ..target import Target
from .combine_parallel_matmul import combine_parallel_matmul
from .data_dependent import split_data_dependent
from .device_targets import DeviceTargets
from .fuse_ops import fuse_ops
from .fuse_tir import fuse_tir
from .inline import inline_functions
from .instruments import CheckAfterEachPass, PassInstrument
from .lambda_lift import lambda_lift
from .legalize import legalize_ops
from .lower_vm import explicit_allocation, to_non_dataflow, vm_shape_lowering
from .mixed_precision import to_mixed_precision
from .normalize import bind_results
from .plan_memory import plan_memory
from .realize_vdevice import realize_vdevice
from .reshape_checks import check_reshapes
from .simplify import dead_code_elimination, fold_constants
from .split_weights import split_oversized_weights
from .unalias import unalias_kernel_args

Pass = Callable[[IRModule], IRModule]
# Set to 1, the default pipeline checks the module after every pass (instruments.CheckAfterEachPass).
CHECK_PASSES_VARIABLE = "TESSERA_CHECK_PASSES"


@dataclass
class Pipeline:
    """``passes`` run in order; each is (name, IRModule -> IRModule). ``instruments`` hear of each
    pass before and after it runs (printing, checking, timing); a pipeline has none by default."""

    passes: list[tuple[str, Pass]] = field(default_factory=list)
    instruments: list[PassInstrument] = field(default_factory=list)

    @staticmethod
    def default(target: Target, upper_bounds: dict[str, int] | None = None, fuse: bool = True) -> Pipeline:
        passes = [("lambda_lift", lambda_lift), ("inline_functions", inline_functions),
                  ("bind_results", bind_results), ("fold_constants", fold_constants),
                  ("dead_code_elimination", dead_code_elimination),
                  # A module placed on virtual devices: every tensor on its device, hints made copies.
                  ("realize_vdevice", lambda m: realize_vdevice(m) if m.vdevices else m),
                  # A reshape whose element count only a call can tell is checked before fusion hides it.
                  ("check_reshapes", check_reshapes)]
        if target.activation_dtype != "float32":
            passes += [("to_mixed_precision", lambda m: to_mixed_precision(m, target.activation_dtype))]
        # A weight larger than one binding may be is read in row chunks (after mixed precision has set
        # its dtype, before fusion puts its readers into kernels).
        binding_limit = target.limit("maxStorageBufferBindingSize")
        passes += [("split_oversized_weights", lambda m: split_oversized_weights(m, binding_limit))]
        if fuse:
            passes.insert(4, ("combine_parallel_matmul", combine_parallel_matmul))  # after fold_constants
            passes += [("fuse_ops", lambda m: fuse_ops(m, target)), ("fuse_tir", lambda m: fuse_tir(m, target))]
        passes += [("legalize_ops", lambda m: legalize_ops(m, target)),
                   ("split_data_dependent", split_data_dependent),
                   ("unalias_kernel_args", unalias_kernel_args),
                   ("to_non_dataflow", to_non_dataflow),
                   ("vm_shape_lowering", vm_shape_lowering),
                   ("explicit_allocation", lambda m: explicit_allocation(m, target)),
                   ("plan_memory", lambda m: plan_memory(m, upper_bounds, target.limit("maxBufferSize"),
                                                          target.storage_alignment, _split_targets(m, target)))]
        # The test suite (tests/conftest.py) checks every build's passes; a user's build does not pay for it.
        checks = [CheckAfterEachPass()] if os.environ.get(CHECK_PASSES_VARIABLE) == "1" else []
        return Pipeline(passes, checks)

    def insert_after(self, name: str, new_name: str, new_pass: Pass) -> None:
        index = [n for n, _ in self.passes].index(name)
        self.passes.insert(index + 1, (new_name, new_pass))

    def insert_before(self, name: str, new_name: str, new_pass: Pass) -> None:
        index = [n for n, _ in self.passes].index(name)
        self.passes.insert(index, (new_name, new_pass))

    def __call__(self, mod: IRModule, progress=None) -> IRModule:
        """Run the passes; ``progress(stage, done, total)``, if given, hears of each one."""
        for done, (name, run) in enumerate(self.passes):
            if progress is not None:
                progress(name, done, len(self.passes))
            for instrument in self.instruments:
                instrument.run_before_pass(name, mod)
            mod = run(mod)
            for instrument in self.instruments:
                instrument.run_after_pass(name, mod)
        return mod


def _split_targets(mod: IRModule, target: Target) -> DeviceTargets | None:
    """The devices of a module placed on several (its vdevices), None for one."""
    return DeviceTargets.of(mod, target) if mod.vdevices else None
