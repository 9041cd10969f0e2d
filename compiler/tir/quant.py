"""Reading GGUF blocks in kernels: the scales and values of every block format Tessera runs.

A row of N x K weights is its blocks laid end to end (padded to a whole word) and viewed as
uint32 words; ``word_at(i)`` reads word ``i`` of the row. ``FORMATS`` describes each format as
kernels read it; op/quantized.py documents the block layouts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .ir import Buffer, Const, TExpr, Unary, binary, cast, select

BLOCK_VALUES = 32  # values per block of the 32-value formats, and per block of q8 activations


@dataclass(frozen=True, eq=False)
class QuantizedMatmulInfo:
    """What the quantized matmul rule needs: the activation and block buffers, the format, K and
    how x is read (``activations``: "" as it is, "q8" rounded to 8 bits in blocks, op/quantized.py)."""

    x: Buffer
    w: Buffer
    format: str
    k: int
    activations: str = ""


def _e(v) -> TExpr:
    return v if isinstance(v, TExpr) else Const(v)


def _ix(op: str, a, b):
    """Index arithmetic that stays a Python int while both operands are ints, so that a byte at a
    constant offset of an aligned block is read at a constant word and shift."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b if op == "+" else a * b if op == "*" else a // b if op == "/" else a % b
    return binary(op, _e(a), _e(b))


def _bits(value: TExpr, shift, mask: int) -> TExpr:
    """(value >> shift) & mask of a u32; ``shift`` an int or an i32 expression."""
    if isinstance(shift, int):
        shifted = binary(">>", value, Const(shift, "u32")) if shift else value
    else:
        shifted = binary(">>", value, cast(shift, "u32"))
    return binary("&", shifted, Const(mask, "u32"))


def _f32(value: TExpr) -> TExpr:
    """A small u32 as f32, through i32: a signed conversion is one instruction, an unsigned one is not."""
    return cast(cast(value, "i32"), "f32")


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


def _static_half(word_at, base: TExpr, offset: int) -> TExpr:
    """The f16 at constant byte ``offset`` after word ``base``."""
    word = word_at(binary("+", base, Const(offset // 4)))  # blocks are of even size: offset is even
    bits = binary("&", word, Const(0xFFFF, "u32")) if offset % 4 == 0 else binary(">>", word, Const(16, "u32"))
    return Unary("f16_bits_to_f32", bits, "f32")


class Block:
    """The bytes of one block of a row. Aligned (``base`` given): the block starts ``start`` bytes
    (an int) after word ``base``, so a byte at a constant offset is one load and a constant shift.
    Otherwise the block starts at byte ``start`` (an expression) and every byte is addressed."""

    def __init__(self, word_at, start, base: TExpr | None = None):
        self.word_at, self.start, self.base = word_at, start, base

    def byte(self, offset, words=0) -> TExpr:
        """Byte ``offset`` after the block's first ``4 * words`` bytes. ``words`` carries the part
        of an offset that steps in whole words (a sub-block's), so that an aligned block still reads
        at a constant shift while ``offset`` is an int."""
        if self.base is not None and isinstance(offset, int):
            at = self.start + offset
            word = self.word_at(binary("+", binary("+", self.base, _e(words)), Const(at // 4)))
            return _bits(word, (at % 4) * 8, 255)
        start = _e(self.start) if self.base is None else \
            binary("+", binary("*", self.base, Const(4)), Const(self.start))
        return _byte(self.word_at, binary("+", binary("+", start, _e(_ix("*", words, 4))), _e(offset)))

    def half(self, offset: int) -> TExpr:
        """The f16 at constant byte ``offset`` (even), as f32."""
        if self.base is not None:
            return _static_half(self.word_at, self.base, self.start + offset)
        return _half(self.word_at, binary("+", _e(self.start), Const(offset)))


def _nibble(byte: TExpr, high) -> TExpr:
    """The low (``high`` 0) or high (1) 4 bits of a byte; ``high`` an int or an i32 expression."""
    return _bits(byte, _ix("*", high, 4), 15)


def _neg(x: TExpr) -> TExpr:
    return binary("-", Const(0.0, "f32"), x)


# -- 32-value formats: one scale per block, value j (0..31) ---------------------------------------
# The 4- and 5-bit ones hold value j in the low nibble of data byte j % 16 for j < 16, in its high
# nibble for j >= 16; the fifth bits are bit j of a 32-bit field.


def _low4(b: Block, j, data: int) -> TExpr:
    return _nibble(b.byte(_ix("+", data, _ix("%", j, 16))), _ix("/", j, 16))


def _q5(b: Block, j, high_bits: int, data: int) -> TExpr:
    fifth = _bits(b.byte(_ix("+", high_bits, _ix("/", j, 8))), _ix("%", j, 8), 1)
    return binary("|", _low4(b, j, data), binary("<<", fifth, Const(4, "u32")))


def _q8_0(b: Block, s, j) -> TExpr:
    return cast(Unary("sign_extend8", b.byte(_ix("+", 2, j)), "i32"), "f32")


# -- K-quants: 256-value super-blocks of 16 sub-blocks of 16 values (Q2_K, Q3_K, Q6_K) or 8 of 32
# (Q4_K, Q5_K), value j of sub-block s. The data of a sub-block starts a whole number of words
# into the block, which ``Block.byte``'s ``words`` carries.


def _k_scale_min(b: Block, s, at: int) -> tuple[TExpr, TExpr]:
    """Q4_K and Q5_K: the 6-bit scale and minimum of sub-block s (0..7), packed in 12 bytes at
    ``at`` (ggml's get_scale_min_k4): s < 4 in the low 6 bits of bytes s and s + 4; s >= 4 in the
    nibbles of byte s + 4 and the top 2 bits of bytes s - 4 and s."""
    low = _ix("%", s, 4)
    a, c, e = (b.byte(_ix("+", at + i, low)) for i in (0, 4, 8))
    scale_high = binary("|", binary("&", e, Const(15, "u32")), binary("<<", _bits(a, 6, 3), Const(4, "u32")))
    min_high = binary("|", _bits(e, 4, 15), binary("<<", _bits(c, 6, 3), Const(4, "u32")))
    scale_low, min_low = binary("&", a, Const(63, "u32")), binary("&", c, Const(63, "u32"))
    if isinstance(s, int):
        return (scale_low, min_low) if s < 4 else (scale_high, min_high)
    first = binary("<", s, Const(4))
    return select(first, scale_low, scale_high), select(first, min_low, min_high)


def _q4_k_scale(b: Block, s):
    scale, minimum = _k_scale_min(b, s, 4)
    return binary("*", b.half(0), _f32(scale)), binary("*", _neg(b.half(2)), _f32(minimum))


def _q4_k(b: Block, s, j) -> TExpr:
    """Sub-blocks 2c and 2c + 1 are the low and high nibbles of the 32 bytes at 16 + 32c."""
    return _f32(_nibble(b.byte(_ix("+", 16, j), _ix("*", 8, _ix("/", s, 2))), _ix("%", s, 2)))


def _q5_k(b: Block, s, j) -> TExpr:
    """Q4_K's nibbles (at 48), plus bit s of byte j of the 32 bytes at 16 as the fifth bit."""
    low = _nibble(b.byte(_ix("+", 48, j), _ix("*", 8, _ix("/", s, 2))), _ix("%", s, 2))
    return _f32(binary("|", low, binary("<<", _bits(b.byte(_ix("+", 16, j)), s, 1), Const(4, "u32"))))


def _two_bit_words(s):
    """Q2_K and Q3_K: the 32 bytes of 2-bit values of sub-blocks 8h .. 8h + 7 start 32h bytes in,
    odd sub-blocks 16 bytes after even ones; sub-block s uses bits 2 * ((s / 2) % 4)."""
    return _ix("+", _ix("*", 8, _ix("/", s, 8)), _ix("*", 4, _ix("%", s, 2)))


def _two_bits(b: Block, s, j, at: int) -> TExpr:
    return _bits(b.byte(_ix("+", at, j), _two_bit_words(s)), _ix("*", 2, _ix("%", _ix("/", s, 2), 4)), 3)


def _q2_k_scale(b: Block, s):
    """A byte per sub-block: its scale in the low nibble, its minimum in the high one."""
    packed = b.byte(s)
    return (binary("*", b.half(80), _f32(binary("&", packed, Const(15, "u32")))),
            binary("*", _neg(b.half(82)), _f32(_bits(packed, 4, 15))))


def _q3_k_scale(b: Block, s):
    """6-bit scales centred on 32: the low 4 bits in the nibbles of bytes 96..103 (s % 8, high
    nibble for s >= 8), the top 2 bits in bytes 104..107 (s % 4, bits 2 * (s / 4))."""
    low = _bits(b.byte(_ix("+", 96, _ix("%", s, 8))), _ix("*", 4, _ix("/", s, 8)), 15)
    high = _bits(b.byte(_ix("+", 104, _ix("%", s, 4))), _ix("*", 2, _ix("/", s, 4)), 3)
    scale = binary("-", _f32(binary("|", low, binary("<<", high, Const(4, "u32")))), Const(32.0, "f32"))
    return binary("*", b.half(108), scale), None


def _q3_k(b: Block, s, j) -> TExpr:
    """2 bits at 32, minus 4 unless bit s / 2 of byte 16 * (s % 2) + j of the mask at 0 is set."""
    mask = _bits(b.byte(j, _ix("*", 4, _ix("%", s, 2))), _ix("/", s, 2), 1)
    return binary("-", _f32(binary("|", _two_bits(b, s, j, 32), binary("<<", mask, Const(2, "u32")))),
                  Const(4.0, "f32"))


def _q6_k_scale(b: Block, s):
    """A signed byte per sub-block at 192."""
    return binary("*", b.half(208), cast(Unary("sign_extend8", b.byte(_ix("+", 192, s)), "i32"), "f32")), None


def _q6_k(b: Block, s, j) -> TExpr:
    """6 bits centred on 32: 4 in the nibbles of the 128 bytes at 0, 2 in the 64 bytes at 128. Each
    half (s / 8) of the block has 64 and 32 of those bytes; within it, sub-block pairs 0-1, 2-3,
    4-5, 6-7 read the low nibbles of bytes 0..31, of 32..63, the high nibbles of 0..31, of 32..63,
    and bits 0-1, 2-3, 4-5, 6-7 of the 32 high-bit bytes; odd sub-blocks 16 bytes after even ones."""
    half, odd, pair = _ix("/", s, 8), _ix("%", s, 2), _ix("%", _ix("/", s, 2), 4)
    low_words = _ix("+", _ix("+", _ix("*", 16, half), _ix("*", 4, odd)), _ix("*", 8, _ix("%", pair, 2)))
    low = _nibble(b.byte(j, low_words), _ix("/", pair, 2))
    high = _bits(b.byte(_ix("+", 128, j), _ix("+", _ix("*", 8, half), _ix("*", 4, odd))), _ix("*", 2, pair), 3)
    return binary("-", _f32(binary("|", low, binary("<<", high, Const(4, "u32")))), Const(32.0, "f32"))


@dataclass(frozen=True, eq=False)
class BlockFormat:
    """A GGUF block format as kernels read it: ``values`` weights in ``bytes`` bytes, each run of
    ``sub_values`` sharing a scale d and minimum m: value = d * q + m, q a small integer.
    ``scale(block, s)`` is (d, m or None) of sub-block ``s``; ``quant(block, s, j)`` the q of its
    value ``j`` as f32. ``s`` and ``j`` are ints or i32 expressions; ``block`` is a ``Block``."""

    name: str
    values: int
    bytes: int
    sub_values: int
    scale: Callable
    quant: Callable

    @property
    def sub_blocks(self) -> int:
        return self.values // self.sub_values

    @property
    def group_blocks(self) -> int:
        """Blocks in the shortest run that fills whole words (two 18-byte Q4_0 blocks are 9 words)."""
        return 4 // math.gcd(self.bytes, 4)

    @property
    def group_words(self) -> int:
        return self.group_blocks * self.bytes // 4

    def row_words(self, k: int) -> int:
        """The words of a row of K values: its blocks, padded to a whole word where they end
        inside one (an odd number of Q3_K, Q6_K, Q4_0, Q5_0 or Q8_0 blocks)."""
        return -(-(k // self.values * self.bytes) // 4)


FORMATS = {f.name: f for f in (
    BlockFormat("q4_0", 32, 18, 32, lambda b, s: (b.half(0), None),
                lambda b, s, j: binary("-", _f32(_low4(b, j, 2)), Const(8.0, "f32"))),
    BlockFormat("q4_1", 32, 20, 32, lambda b, s: (b.half(0), b.half(2)), lambda b, s, j: _f32(_low4(b, j, 4))),
    BlockFormat("q5_0", 32, 22, 32, lambda b, s: (b.half(0), None),
                lambda b, s, j: binary("-", _f32(_q5(b, j, 2, 6)), Const(16.0, "f32"))),
    BlockFormat("q5_1", 32, 24, 32, lambda b, s: (b.half(0), b.half(2)), lambda b, s, j: _f32(_q5(b, j, 4, 8))),
    BlockFormat("q8_0", 32, 34, 32, lambda b, s: (b.half(0), None), _q8_0),
    BlockFormat("q2_k", 256, 84, 16, _q2_k_scale, lambda b, s, j: _f32(_two_bits(b, s, j, 16))),
    BlockFormat("q3_k", 256, 110, 16, _q3_k_scale, _q3_k),
    BlockFormat("q4_k", 256, 144, 32, _q4_k_scale, _q4_k),
    BlockFormat("q5_k", 256, 176, 32, _q4_k_scale, _q5_k),
    BlockFormat("q6_k", 256, 210, 16, _q6_k_scale, _q6_k),
)}


def dequantized(fmt: str, block: Block, s, j, scale: tuple[TExpr, TExpr | None]) -> TExpr:
    """d * q + m of value ``j`` of sub-block ``s``, ``scale`` its (d, m)."""
    d, m = scale
    value = binary("*", d, FORMATS[fmt].quant(block, s, j))
    return value if m is None else binary("+", value, m)


def value_at(fmt: str, word_at, k: TExpr) -> TExpr:
    """Value ``k`` of a row (an expression), as f32: every byte addressed as it is read."""
    f = FORMATS[fmt]
    within = binary("%", k, Const(f.values))
    block = Block(word_at, binary("*", binary("/", k, Const(f.values)), Const(f.bytes)))
    s = 0 if f.sub_blocks == 1 else binary("/", within, Const(f.sub_values))
    j = binary("%", within, Const(f.sub_values))
    return dequantized(fmt, block, s, j, f.scale(block, s))


# -- lanes: one block read by a loop over 8 consecutive bytes at a time ---------------------------
# (tir/schedule/quantized_gemv.py) for the formats of LANE_FORMATS, whose values are whole bytes
# or nibbles. A loop whose iteration ``lane`` handles byte ``start + lane`` of a block: ``start``
# is a constant offset from a word-aligned group, so the bytes span two or three whole words,
# loaded once before the loop; each lane picks its word with masks and moves its byte to the top by a multiply.
# Every operand is then either the same for all lanes or a lane-wise mask or multiply, which a
# C compiler turns into vector instructions (broadcast, and, xor, multiply) across the lanes.

LANE_FORMATS = ("q4_0", "q4_1", "q8_0")
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
