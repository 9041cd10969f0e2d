"""Errors raised by the graph IR. Each names the problem and, where there is one, the binding."""


class TesseraError(Exception):
    """Base of every error Tessera raises on bad input."""


class DeductionError(TesseraError):
    """A call whose struct info cannot be deduced because its inputs are incompatible.

    ``kind`` is a short category ("shape mismatch", "rank mismatch", ...) and
    ``detail`` says what was seen; the builder adds the offending binding.
    """

    def __init__(self, kind: str, detail: str, binding: str | None = None):
        self.kind, self.detail, self.binding = kind, detail, binding
        where = f" in {binding}" if binding else ""
        super().__init__(f"{kind}{where}: {detail}")

    def at(self, binding: str) -> "DeductionError":
        return DeductionError(self.kind, self.detail, binding)


class UnknownOpError(TesseraError):
    """An operator name that is not registered."""


class WellFormedError(TesseraError):
    """A module that breaks a structural rule of the IR (scoping, purity, consistency)."""


class ScriptError(TesseraError):
    """Script text that cannot be parsed; the message starts with the line and column."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.line, self.column = line, column
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(where + message)


class RuntimeCheckError(TesseraError):
    """A value that violates an annotation or a match_cast when the program runs."""


class MemoryPlanError(TesseraError):
    """A tensor that no arena buffer of the target can hold at its sizes' upper bounds.
    ``size`` and ``limit`` are bytes; ``tensors`` the bindings that share the storage; ``function``
    the function whose plan it is, once known."""

    def __init__(self, message: str, size: int = 0, limit: int = 0, tensors: tuple[str, ...] = (),
                 function: str = ""):
        self.size, self.limit, self.tensors, self.function = size, limit, tensors, function
        super().__init__(message)


class BindingLimitError(TesseraError):
    """A tensor that a kernel would bind whole but that is larger than the target lets one binding be
    (``maxStorageBufferBindingSize``). ``tensor`` names it; ``size`` and ``limit`` are bytes; ``kind`` is
    "weight", "state" or "storage" (an arena storage of ``function``), which says what fixes it."""

    def __init__(self, message: str, tensor: str = "", size: int = 0, limit: int = 0, kind: str = "weight",
                 function: str = ""):
        self.tensor, self.size, self.limit, self.kind, self.function = tensor, size, limit, kind, function
        super().__init__(message)


class UnknownVDeviceError(WellFormedError):
    """A virtual-device spec (``"webgpu"``, ``"webgpu:1"``, ``"vdevice:2"``) that names no device of the
    module; the message lists the module's devices by their canonical names."""


class VDeviceConflictError(TesseraError):
    """A value that would have to live on two virtual devices with no ``R.to_vdevice`` between them."""
