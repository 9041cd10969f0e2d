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
    """What the quantized matmul rule needs: the activation and block buffers, the format, K and
    how x is read (``activations``: "" as it is, "q8" rounded to 8 bits in blocks, op/quantized.py)."""

    x: Buffer
    w: Buffer
    format: str
    k: int
    activations: str = ""


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


# -- lanes: one block read by a loop over 8 consecutive bytes at a time -------------------------
# A loop whose iteration ``lane`` handles byte ``start + lane`` of a block: ``start`` is a constant
# offset from a word-aligned group, so the bytes span two or three whole words, loaded once before
# the loop; each lane picks its word with masks and moves its byte to the top by a multiply.
# Every operand is then either the same for all lanes or a lane-wise mask or multiply, which a
# C compiler turns into vector instructions (broadcast, and, xor, multiply) across the lanes.

DATA_OFFSET = {"q4_0": 2, "q4_1": 4, "q8_0": 2}  # where a block's quantized values start (bytes)
DATA_BYTES = {"q4_0": 16, "q4_1": 16, "q8_0": 32}


def span_words(start: int, lanes: int) -> range:
    """Word offsets (from the group's first word) of bytes ``start`` .. ``start + lanes - 1``."""
    return range(start // 4, (start + lanes - 1) // 4 + 1)


def lane_masks(start: int, lanes: int, lane: TExpr) -> list[TExpr]:
    """For each word after the first of the span of bytes ``start`` .. ``start + lanes - 1``: all
    ones from the first lane whose byte lies in it on, else zero (the same for every step of a
    block, so a kernel computes them once per lane)."""
    boundaries = range(4 - start % 4, lanes, 4)
    return [binary("-", Const(0, "u32"), cast(binary(">=", lane, Const(b)), "u32")) for b in boundaries]


def lane_word(words: list[TExpr], masks: list[TExpr]) -> TExpr:
    """The word (of ``words``, a span of ``span_words``) holding a lane's byte: picked ^ ((picked ^
    next) & mask) word by word. Arithmetic rather than selects: gcc 12 leaves a few selects in a
    loop as branches and then vectorizes nothing."""
    picked = words[0]
    for word, mask in zip(words[1:], masks):
        picked = binary("^", picked, binary("&", binary("^", picked, word), mask))
    return picked


def lane_multiplier(start: int, lane: TExpr) -> TExpr:
    """2 ** (24 - 8 * b), b the place of byte ``start + lane`` in its word: a word times it has
    that byte in its top 8 bits, from where a shift by a constant takes the byte or a nibble.
    A multiply instead of a shift by a lane's own amount, which WASM SIMD128 and SSE lack; built
    as a product of (1 or 256) factors, without a shift or a select."""
    place = binary("&", binary("+", lane, Const(start % 4)), Const(3))
    multiplier = None
    for t in (1, 2, 3):  # 256 for each t above the byte's place
        factor = binary("+", Const(1, "u32"), binary("*", Const(255, "u32"), cast(binary("<", place, Const(t)), "u32")))
        multiplier = factor if multiplier is None else binary("*", multiplier, factor)
    return multiplier


def lane_values(fmt: str, block_start: int, lanes: int) -> list[tuple[int, int, bool]]:
    """How a loop over ``lanes`` lanes reads one block at byte ``block_start`` of its group: one
    (byte start, value index of lane 0, high nibble) per step; lane ``l`` of a step reads the byte
    at ``start + l`` and is value ``index + l`` of the block."""
    data = block_start + DATA_OFFSET[fmt]
    steps = []
    for step in range(DATA_BYTES[fmt] // lanes):
        start, first = data + step * lanes, step * lanes
        if fmt == "q8_0":
            steps.append((start, first, False))
        else:  # byte j holds value j in its low nibble and value j + 16 in its high one
            steps += [(start, first, False), (start, first + 16, True)]
    return steps


def lane_value(fmt: str, top: TExpr, high: bool) -> TExpr:
    """The quantized integer (before the block's scale) of the byte or nibble in the top 8 bits of
    ``top`` (a word times its ``lane_multiplier``), as f32: Q4_0 centred on 8, Q8_0 sign-extended."""
    # Through i32 (a signed conversion is one instruction, an unsigned one is not), and no 8-bit
    # type: a C compiler would size its vectors by the narrowest type and find 8 lanes too few.
    if fmt == "q8_0":  # (byte ^ 128) - 128 sign-extends the byte
        byte = binary(">>", top, Const(24, "u32"))
        q = cast(cast(binary("^", byte, Const(128, "u32")), "i32"), "f32")
        return binary("-", q, Const(128.0, "f32"))
    nibble = binary(">>", top, Const(28, "u32")) if high else \
        binary("&", binary(">>", top, Const(24, "u32")), Const(15, "u32"))
    q = cast(cast(nibble, "i32"), "f32")
    return binary("-", q, Const(8.0, "f32")) if fmt == "q4_0" else q
