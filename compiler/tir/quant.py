"""Reading GGUF blocks in kernels: the bytes, scales and values of Q4_0, Q4_1 and Q8_0 blocks.

A row of N x K weights is K / 32 blocks laid end to end and viewed as uint32
words; ``word_at(i)`` reads word ``i`` of the row. See tessera/op/quantized.py
for the block layouts.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ir import Buffer, Const, TExpr, Unary, binary, cast, select

BLOCK_VALUES = 32
BLOCK_BYTES = {"q4_0": 18, "q4_1": 20, "q8_0": 34}


@dataclass(frozen=True, eq=False)
class QuantizedMatmulInfo:
    """What the quantized matmul rule needs: the activation and block buffers, the format and K."""

    x: Buffer
    w: Buffer
    format: str
    k: int


def _byte(word_at, offset: TExpr) -> TExpr:
    """Byte ``offset`` of a row, from the uint32 word that holds it (little-endian)."""
    word = word_at(binary(">>", offset, Const(2)))
    shift = cast(binary("*", binary("&", offset, Const(3)), Const(8)), "u32")
    return binary("&", binary(">>", word, shift), Const(255, "u32"))


def _half(word_at, offset: TExpr) -> TExpr:
    """The f16 at an even byte ``offset``, as f32."""
    bits = binary("|", _byte(word_at, offset), binary("<<", _byte(word_at, binary("+", offset, Const(1))),
                                                       Const(8, "u32")))
    return Unary("f16_bits_to_f32", bits, "f32")


def block_scale(fmt: str, word_at, block: TExpr) -> tuple[TExpr, TExpr | None]:
    """(d, m) of a block (m only for Q4_1)."""
    start = binary("*", block, Const(BLOCK_BYTES[fmt]))
    d = _half(word_at, start)
    m = _half(word_at, binary("+", start, Const(2))) if fmt == "q4_1" else None
    return d, m


def block_value(fmt: str, word_at, block: TExpr, j: TExpr, d: TExpr, m: TExpr | None) -> TExpr:
    """Value ``j`` (0..31) of a block, as f32."""
    start = binary("*", block, Const(BLOCK_BYTES[fmt]))
    if fmt == "q8_0":
        q = Unary("sign_extend8", _byte(word_at, binary("+", start, binary("+", Const(2), j))), "i32")
        return binary("*", d, cast(q, "f32"))
    offset = 2 if fmt == "q4_0" else 4
    index = binary("%", j, Const(16))
    byte = _byte(word_at, binary("+", start, binary("+", Const(offset), index)))
    high = binary(">=", j, Const(16))
    nibble = select(high, binary(">>", byte, Const(4, "u32")), binary("&", byte, Const(15, "u32")))
    q = cast(nibble, "f32")
    if fmt == "q4_0":
        return binary("*", d, binary("-", q, Const(8.0, "f32")))
    return binary("+", binary("*", d, q), m)


# Blocks per word-aligned group: a Q4_1 block (20 bytes) is 5 whole words; two Q4_0 blocks (36 bytes)
# are 9 and two Q8_0 blocks (68 bytes) 17. Within a group every byte sits at a constant word and shift.
GROUP_BLOCKS = {"q4_0": 2, "q4_1": 1, "q8_0": 2}


def group_words(fmt: str) -> int:
    return GROUP_BLOCKS[fmt] * BLOCK_BYTES[fmt] // 4


def _static_byte(word_at, base: TExpr, offset: int) -> TExpr:
    """Byte ``offset`` (a constant) after the word-aligned ``base``: one load, a constant shift."""
    word = word_at(binary("+", base, Const(offset // 4)))
    shift = (offset % 4) * 8
    shifted = binary(">>", word, Const(shift, "u32")) if shift else word
    return binary("&", shifted, Const(255, "u32"))


def _static_half(word_at, base: TExpr, offset: int) -> TExpr:
    if offset % 4 == 0:
        bits = binary("&", word_at(binary("+", base, Const(offset // 4))), Const(0xFFFF, "u32"))
    elif offset % 4 == 2:
        bits = binary(">>", word_at(binary("+", base, Const(offset // 4))), Const(16, "u32"))
    else:
        bits = binary("|", _static_byte(word_at, base, offset),
                      binary("<<", _static_byte(word_at, base, offset + 1), Const(8, "u32")))
    return Unary("f16_bits_to_f32", bits, "f32")


def group_block_scale(fmt: str, word_at, base: TExpr, index: int) -> tuple[TExpr, TExpr | None]:
    """(d, m) of block ``index`` of the group starting at word ``base``."""
    start = index * BLOCK_BYTES[fmt]
    d = _static_half(word_at, base, start)
    m = _static_half(word_at, base, start + 2) if fmt == "q4_1" else None
    return d, m


def group_block_value(fmt: str, word_at, base: TExpr, index: int, j: int, d: TExpr, m: TExpr | None) -> TExpr:
    """Value ``j`` (a constant, 0..31) of block ``index`` of the group at word ``base``, as f32."""
    start = index * BLOCK_BYTES[fmt]
    if fmt == "q8_0":
        q = Unary("sign_extend8", _static_byte(word_at, base, start + 2 + j), "i32")
        return binary("*", d, cast(q, "f32"))
    byte = _static_byte(word_at, base, start + (2 if fmt == "q4_0" else 4) + j % 16)
    nibble = binary(">>", byte, Const(4, "u32")) if j >= 16 else binary("&", byte, Const(15, "u32"))
    q = cast(nibble, "f32")
    if fmt == "q4_0":
        return binary("*", d, binary("-", q, Const(8.0, "f32")))
    return binary("+", binary("*", d, q), m)
