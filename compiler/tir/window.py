"""What a sliding-window operator's legalization states about its structure, for schedule rules that
compute it by other means than its body (tir/schedule/conv.py): which buffers are the image and the
weights, and the window's geometry. Attached to the ``ComputeDef`` as ``attrs["conv2d"]`` or
``attrs["pool2d"]``; fuse_tir maps the buffers to the fused group's parameters (or drops the
statement where an operand is computed inside the group)."""

from __future__ import annotations

from dataclasses import dataclass

from .ir import Buffer


@dataclass(frozen=True, eq=False)
class Window:
    """A 2-D window over an NCHW image: kernel size, stride, dilation, and the padding before the
    first row (top) and column (left); padding after the last falls out of the output's shape."""

    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilation: tuple[int, int]
    top: int
    left: int


@dataclass(frozen=True, eq=False)
class ConvInfo:
    """out[n, o, y, x] = sum over c, i, j of w[o, c, i, j] * x[n, g * cg + c, row, col] (zero outside
    the image), g = o // (O / groups), row = y * sh + i * dh - top, col = x * sw + j * dw - left."""

    x: Buffer  # NCHW
    w: Buffer  # OIHW, I = C / groups
    window: Window
    groups: int

    operands = ("x", "w")


@dataclass(frozen=True, eq=False)
class PoolInfo:
    """out[n, c, y, x] = the combination (max, or sum before the op's finalize divides it) of x[n, c,
    row, col] over the window's taps inside the image."""

    x: Buffer  # NCHW
    window: Window
    kind: str  # "max" or "avg"

    operands = ("x",)
