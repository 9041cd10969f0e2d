"""The one error the torch.export importer raises on a program it cannot take."""

from __future__ import annotations

from ...ir.errors import TesseraError


class TorchImportError(TesseraError):
    """A program the importer refuses, with where and why.

    ``kind`` is "unsupported" (an aten op, argument value or dtype the importer does not implement:
    the program may be fine) or "invalid" (the program itself is wrong or unusable: a file that is
    not an exported program, shapes that contradict each other)."""

    def __init__(self, message: str, kind: str = "unsupported"):
        self.kind = kind
        super().__init__(message)
