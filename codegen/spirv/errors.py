"""The error the SPIR-V emitter raises for a kernel it cannot write as SPIR-V."""

from __future__ import annotations

from .. import CodegenError


class SPIRVError(CodegenError):
    """A lowered kernel that has no SPIR-V form: a dtype, an operator or a construct the emitter
    does not write. Raised where the problem is found, without the kernel's name;
    ``emit_spirv`` adds it (``kernel <name>: ...``)."""
