"""Integer converters: shifts (and, as they come, the bitwise ops and bit casts)."""

from __future__ import annotations

from ... import op as R
from .convert_common import scalar_like
from .registry import NodeContext, converter


@converter("BitShift", attrs=("direction",))
def _bit_shift(ctx: NodeContext):
    """Unsigned shifts as products and floor divisions by powers of two (bits shifted out are lost,
    as in the unsigned arithmetic of the same width)."""
    dtype = ctx.dtype(0)
    if not dtype.startswith("uint"):
        raise ctx.error(f"input 0 is {dtype}: only unsigned shifts are supported (signed ones wrap and "
                        "shift in sign bits, which products and divisions do not)")
    direction = ctx.attr("direction", b"")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.error(f"direction={direction!r} must be LEFT or RIGHT", "invalid")
    factor = R.power(scalar_like(ctx, 2), ctx.input(1))
    if direction == "LEFT":
        return R.multiply(ctx.input(0), factor)
    return R.floor_divide(ctx.input(0), factor)


