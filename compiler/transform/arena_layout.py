"""arena_layout: offsets in an arena for tensors of known size and lifetime (plan_memory's arena).

Two tensors whose lifetimes overlap must not overlap in memory; the arena should be as small as
possible. That is dynamic storage allocation, NP-hard in general, and the liveness lower bound
(the most bytes live at any one step) is what no layout can beat. The greedy placers of TFLite's
arena planner come close on neural networks: take the tensors in some order and put each in the
smallest gap between the already placed tensors it coexists with (best fit), or above them all.
No one order wins everywhere: by size is TFLite's default, by start is how a program runs, and
by size times lifetime favours the tensors that constrain most. Each is tried and the smallest
arena kept (ties: the first order listed), so the layout is deterministic.

Every offset is a multiple of the alignment (WebGPU's minStorageBufferOffsetAlignment, 256
bytes), so each tensor occupies its size rounded up to the alignment. The arena is split into
buffers of at most ``max_buffer_size`` bytes with no tensor across two: a placement that would
cross a multiple of ``max_buffer_size`` moves up to that multiple.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lifetime:
    """A tensor in the arena: live from step ``start`` to step ``end``, both included; ``size`` bytes."""

    start: int
    end: int
    size: int


@dataclass(frozen=True)
class ArenaLayout:
    placements: list[tuple[int, int]]  # per lifetime: (buffer, offset in it)
    buffers: list[int]  # byte size of each buffer, a multiple of the alignment
    order: str  # the order that produced it

    @property
    def total(self) -> int:
        return sum(self.buffers)


ORDERS = {
    "size": lambda t: (-t.size, t.start, t.end),
    "size*lifetime": lambda t: (-t.size * (t.end - t.start + 1), -t.size, t.start),
    "start": lambda t: (t.start, -t.size, t.end),
    "lifetime": lambda t: (-(t.end - t.start), -t.size, t.start),
}


def layout(lifetimes: list[Lifetime], alignment: int, max_buffer_size: int, orders=None) -> ArenaLayout:
    """The smallest of the greedy layouts over ``orders`` (name -> sort key; ``ORDERS`` by default).
    A tensor larger than ``max_buffer_size`` (once aligned) is the caller's to report."""
    # An empty tensor is still bound as one word, and every tensor starts at an aligned offset.
    sizes = [_align(max(t.size, 4), alignment) for t in lifetimes]
    region = max(max_buffer_size // alignment * alignment, alignment)  # buffers begin at aligned offsets
    coexisting = _coexisting(lifetimes)
    best = ArenaLayout([], [], "")
    for name, key in (orders or ORDERS).items():
        order = sorted(range(len(lifetimes)), key=lambda i: (key(lifetimes[i]), i))
        candidate = _buffers(_greedy(order, sizes, coexisting, region), sizes, region, name)
        if not best.order or candidate.total < best.total:
            best = candidate
    return best


def _buffers(offsets: list[int], sizes: list[int], region: int, order: str) -> ArenaLayout:
    """Cut the address space into buffers at multiples of ``region``; empty ones are dropped."""
    ends: dict[int, int] = {}
    for offset, size in zip(offsets, sizes):
        k = offset // region
        ends[k] = max(ends.get(k, 0), offset + size - k * region)
    number = {k: i for i, k in enumerate(sorted(ends))}
    placements = [(number[o // region], o - o // region * region) for o in offsets]
    return ArenaLayout(placements, [ends[k] for k in sorted(ends)], order)


def peak_bytes(lifetimes: list[Lifetime], size=lambda t: t.size) -> int:
    """The most bytes live at any one step: no layout is smaller (the liveness lower bound)."""
    events = sorted([(t.start, size(t)) for t in lifetimes] + [(t.end + 1, -size(t)) for t in lifetimes],
                    key=lambda e: (e[0], e[1]))  # at one step, frees before allocations
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


def _coexisting(lifetimes: list[Lifetime]) -> list[list[int]]:
    """For each lifetime, the others that overlap it (a sweep over starts)."""
    result: list[list[int]] = [[] for _ in lifetimes]
    active: list[int] = []
    for i in sorted(range(len(lifetimes)), key=lambda i: lifetimes[i].start):
        start = lifetimes[i].start
        active = [j for j in active if lifetimes[j].end >= start]
        for j in active:
            result[i].append(j)
            result[j].append(i)
        active.append(i)
    return result


def _greedy(order: list[int], sizes: list[int], coexisting: list[list[int]], max_buffer_size: int) -> list[int]:
    offsets: list[int | None] = [None] * len(sizes)
    for i in order:
        size = sizes[i]
        busy = sorted((offsets[j], offsets[j] + sizes[j]) for j in coexisting[i] if offsets[j] is not None)
        best_gap, best_offset = None, None
        cursor = 0
        for low, high in busy:
            candidate = _within_buffer(cursor, size, max_buffer_size)
            if candidate + size <= low and (best_gap is None or low - cursor < best_gap):
                best_gap, best_offset = low - cursor, candidate
            cursor = max(cursor, high)
        offsets[i] = best_offset if best_offset is not None else _within_buffer(cursor, size, max_buffer_size)
    return offsets


def _within_buffer(offset: int, size: int, max_buffer_size: int) -> int:
    """``offset``, or the start of the next buffer if the tensor would cross into it there."""
    if offset // max_buffer_size != (offset + size - 1) // max_buffer_size and size <= max_buffer_size:
        return (offset // max_buffer_size + 1) * max_buffer_size
    return offset


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment
