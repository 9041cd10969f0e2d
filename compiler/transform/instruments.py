"""Pass instruments: what a ``Pipeline`` tells about each pass it runs, for people who watch it.

An instrument hears of every pass before and after it runs (TVM's ``PassInstrument``). A pipeline
without instruments runs its passes and nothing else, so a default build pays nothing for them.

- ``PrintAfter(["fuse_tir"])``: the module as text (docs/script.md) after the named passes.
- ``CheckAfterEachPass()``: well-formedness (``tessera.ir.well_formed``) and every new kernel's
  ``verify_kernel`` after each pass; the first failure is a ``PassCheckError`` naming the pass.
- ``PassTimings()``: the seconds each pass took, as a table.
- ``DumpIR(directory)``: one file per pass, ``00-input.py``, ``01-lambda_lift.py``, ...; each is
  a module ``tessera check`` reads back.
"""

from __future__ import annotations

import os
import re
import sys
import time
from typing import TextIO

from ..ir.errors import TesseraError
from ..ir.module import IRModule
from ..ir.printer import print_module
from ..ir.well_formed import check_well_formed
from ..tir.ir import PrimFunc
from ..tir.verify import KernelVerifyError, verify_kernel

# The sizes every symbolic scalar of a kernel takes in turn when it is verified: one, a size that is
# no multiple of any tile, and one past a common tile. Kernels relate their scalars (total >= n), so
# all of them take the same size at once, which every such relation allows.
VERIFY_SIZES = (1, 7, 65)
DUMP_FILE = re.compile(r"[0-9]{2,}-[A-Za-z0-9_]+\.py")


class PassCheckError(TesseraError):
    """A pass left a module that is not well formed, or a kernel that the verifier refuses."""


class PassInstrument:
    """Hooks around each pass; an instrument overrides the ones it needs."""

    def run_before_pass(self, name: str, mod: IRModule) -> None:
        pass

    def run_after_pass(self, name: str, mod: IRModule) -> None:
        pass


class PrintAfter(PassInstrument):
    """Writes the module after each pass named in ``passes`` to ``stream`` (stderr by default).
    ``weights``: print the values of weights too (named constants; docs/script.md), not only their
    shapes, which make a model's text as large as its weights."""

    def __init__(self, passes, stream: TextIO | None = None, weights: bool = False):
        self.passes, self.stream, self.weights = set(passes), stream, weights

    def run_after_pass(self, name: str, mod: IRModule) -> None:
        if name in self.passes:
            stream = self.stream or sys.stderr
            stream.write(f"# after {name}\n{print_module(mod, elide_weights=not self.weights)}")


class CheckAfterEachPass(PassInstrument):
    """Checks the module before the first pass and after every pass: each graph function well
    formed, each kernel in bounds and free of divergent barriers (``verify_kernel``) at every size of
    ``VERIFY_SIZES``. A kernel is verified once, when it first appears: passes keep kernels they do
    not change as they are. Off in builds (it costs time after every pass), on where a test asks."""

    def __init__(self):
        # Kept, not only their ids: an id is unique only while its kernel lives.
        self.verified: dict[int, PrimFunc] = {}
        self.started = False

    def run_before_pass(self, name: str, mod: IRModule) -> None:
        if not self.started:
            self.started = True
            self._check(mod, f"in the module given to the pipeline (before {name})")

    def run_after_pass(self, name: str, mod: IRModule) -> None:
        self._check(mod, f"after pass {name}")

    def _check(self, mod: IRModule, where: str) -> None:
        try:
            check_well_formed(mod)
        except TesseraError as error:
            raise PassCheckError(f"{where}: the module is not well formed: {error}") from None
        for name, func in mod.functions.items():
            if isinstance(func, PrimFunc) and id(func) not in self.verified:
                self._verify(name, func, where)
                self.verified[id(func)] = func

    @staticmethod
    def _verify(name: str, func: PrimFunc, where: str) -> None:
        for size in VERIFY_SIZES:
            try:
                verify_kernel(func, dict.fromkeys(func.scalars, size))
            except KernelVerifyError as error:
                sizes = ", ".join(f"{s} = {size}" for s in func.scalars)
                raise PassCheckError(f"{where}: kernel {name} fails verification"
                                     f"{' at ' + sizes if sizes else ''}: {error}") from None


class PassTimings(PassInstrument):
    """The wall-clock seconds of each pass, in the order they ran."""

    def __init__(self):
        self.seconds: list[tuple[str, float]] = []
        self._start = 0.0

    def run_before_pass(self, name: str, mod: IRModule) -> None:
        self._start = time.perf_counter()

    def run_after_pass(self, name: str, mod: IRModule) -> None:
        self.seconds.append((name, time.perf_counter() - self._start))

    def table(self) -> str:
        """One line per pass, ``pass  seconds``, then the total."""
        width = max([len(name) for name, _ in self.seconds] + [len("total")])
        lines = [f"{'pass':<{width}}  seconds"]
        lines += [f"{name:<{width}}  {seconds:7.3f}" for name, seconds in self.seconds]
        lines.append(f"{'total':<{width}}  {sum(s for _, s in self.seconds):7.3f}")
        return "\n".join(lines) + "\n"


class DumpIR(PassInstrument):
    """Writes the module the pipeline is given and the module after each pass into ``directory``:
    ``00-input.py``, then ``NN-<pass>.py`` numbered in the order the passes ran. Weights are written
    by name, dtype and shape only (docs/script.md), so a file stays the size of the program."""

    def __init__(self, directory: str):
        self.directory = directory
        self.written: list[str] = []

    def run_before_pass(self, name: str, mod: IRModule) -> None:
        if not self.written:
            os.makedirs(self.directory, exist_ok=True)
            for old in os.listdir(self.directory):  # an earlier dump's files would read as this build's
                if DUMP_FILE.fullmatch(old):
                    os.remove(os.path.join(self.directory, old))
            self._write("input", mod)

    def run_after_pass(self, name: str, mod: IRModule) -> None:
        self._write(name, mod)

    def _write(self, name: str, mod: IRModule) -> None:
        path = os.path.join(self.directory, f"{len(self.written):02d}-{name}.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(print_module(mod, elide_weights=True))
        self.written.append(path)
