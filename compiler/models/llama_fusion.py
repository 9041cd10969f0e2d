"""The Llama blocks as fusion patterns (tessera.transform.fuse_ops_by_pattern).

Two kinds. ``compile_patterns()`` are the blocks one generated kernel computes: RoPE's
rotate-half (with the reshape that splits the projection into heads; a model without a KV cache,
``forward``, rotates so: with one, ``op.rope_append`` does) and SwiGLU's ``silu(gate) * up`` (as
the gate projection's epilogue). fuse_ops finds the same groups from the operators'
pattern kinds alone, and matching them first gives the same fused functions, under the same names,
so the kernels are byte for byte the ones the default build writes (tests/transform/test_llama_patterns.py):
these patterns say what the blocks are, and leave room to match a block differently from fuse_ops.

``offload_patterns(prefix)`` are the blocks fuse_tir cannot compose into one kernel, which a
hand-written library kernel may run whole: RMSNorm into the projection that reads it (a row
operator as a GEMV prologue), SwiGLU into the down projection (a matmul reads its operands from
memory). Each becomes ``R.call_dps_library(prefix + name, ...)``.
"""

from __future__ import annotations

from ..transform.fuse_by_pattern import FusionPattern
from ..transform.fuse_ops import quantized_gemm_epilogues_slow
from ..transform.pattern import ExprPattern, is_op, wildcard


def rope(x: ExprPattern | None = None) -> ExprPattern:
    """``x * cos + concat(-x[..., half:], x[..., :half]) * sin`` (llama.py's ``_rope``)."""
    x = x or wildcard("x")
    second = is_op("strided_slice")(x)
    first = is_op("strided_slice")(x)
    rotated = is_op("concat")((is_op("negative")(second), first), axis=2)
    return is_op("add")(is_op("multiply")(x, wildcard("cos")), is_op("multiply")(rotated, wildcard("sin")))


def swiglu() -> ExprPattern:
    return swiglu_of(wildcard("gate"))


def projection(x: ExprPattern) -> ExprPattern:
    """A Linear layer on ``x``: a float matmul with the transposed weight, or GGUF blocks read as they are."""
    weight = wildcard("weight")  # one node in both alternatives: one name, whichever matches
    return is_op("matmul")(x, weight) | is_op("quantized_matmul")(x, weight)


def compile_patterns(target=None) -> list[FusionPattern]:
    """RoPE with the reshape of the projection it rotates (heads split out), and SwiGLU as the gate
    projection's epilogue: the groups fuse_ops forms for ``target``. On C targets (serial threads on
    a CPU) without the GEMM micro-kernels a quantized GEMM of more than one row takes no epilogue
    (fuse_ops's ``_epilogue_slows``): there SwiGLU fuses into a quantized gate projection in decode only."""
    gate = swiglu_of(projection(wildcard("x")))
    slow_epilogues = target is not None and quantized_gemm_epilogues_slow(target)
    return [FusionPattern("llama.rope", rope(is_op("reshape")(wildcard("projected"), wildcard()))),
            FusionPattern("llama.swiglu", gate, _one_row if slow_epilogues else None)]


def _one_row(m) -> bool:
    """No quantized projection of more than one row in the match."""
    for member in m.members:
        if member.value.op.name == "quantized_matmul":
            shape = getattr(member.var.struct_info, "shape", None)
            if shape is None or any(str(dim) != "1" for dim in shape[:-1]):
                return False
    return True


def swiglu_of(gate: ExprPattern) -> ExprPattern:
    return is_op("multiply")(is_op("nn.silu")(gate), wildcard("up"))


def offload_patterns(prefix: str = "llama.") -> list[FusionPattern]:
    """Each library function receives the group's inputs in the order the group first reads them:
    ``rms_norm_last_row_projection(x, norm_weight, weight)`` (the head reads the final norm's last
    row only, llama.py's ``step``), ``rms_norm_projection(x, norm_weight, weight)`` and
    ``swiglu_down(gate, up, weight)``."""
    def norm():
        return is_op("nn.rms_norm")(wildcard("x"), wildcard("norm_weight"))

    found = [("rms_norm_last_row_projection", projection(is_op("strided_slice")(norm()))),
             ("rms_norm_projection", projection(norm())),
             ("swiglu_down", projection(swiglu()))]
    return [FusionPattern(name, pattern, None, prefix + name) for name, pattern in found]
