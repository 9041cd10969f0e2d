"""arena_layout: offsets for tensors by lifetime, against the liveness lower bound."""

import random

from tessera.transform.arena_layout import ORDERS, Lifetime, layout, peak_bytes

UNIT = 256  # WebGPU's storage alignment: every size below is a whole number of it
NO_LIMIT = 1 << 40


def test_greedy_by_start_is_worse_than_the_optimum_which_by_size_finds():
    # a: steps 0-1, one unit; b: steps 1-3, two; c: steps 2-3, two. At most four units live at once.
    # In program order a goes at 0 and b above it at 1; when c comes, a's freed unit is too small,
    # so c goes above b: five units. By size, b and c take units 0-3 and a fits beside b: four.
    lifetimes = [Lifetime(0, 1, UNIT), Lifetime(1, 3, 2 * UNIT), Lifetime(2, 3, 2 * UNIT)]
    assert peak_bytes(lifetimes) == 4 * UNIT
    by_start = layout(lifetimes, UNIT, NO_LIMIT, orders={"start": ORDERS["start"]})
    assert by_start.buffers == [5 * UNIT]
    best = layout(lifetimes, UNIT, NO_LIMIT)
    assert best.buffers == [4 * UNIT] and best.order == "size"
    assert best.placements == [(0, 2 * UNIT), (0, 0), (0, 2 * UNIT)]


def test_every_tensor_is_aligned_and_sizes_round_up_to_the_alignment():
    lifetimes = [Lifetime(0, 2, 100), Lifetime(1, 2, 4), Lifetime(2, 3, 300)]
    result = layout(lifetimes, UNIT, NO_LIMIT)
    assert all(offset % UNIT == 0 for _, offset in result.placements)
    assert result.buffers == [4 * UNIT]  # 100 + 4 + 300 bytes live at step 2, one, one and two units
    assert peak_bytes(lifetimes, lambda t: -(-t.size // UNIT) * UNIT) == 4 * UNIT


def test_no_tensor_crosses_a_buffer_boundary():
    # Three tensors live at once, 3, 3 and 2 units, in buffers of at most 4 units: one buffer each.
    lifetimes = [Lifetime(0, 1, 3 * UNIT), Lifetime(0, 1, 3 * UNIT), Lifetime(0, 1, 2 * UNIT)]
    result = layout(lifetimes, UNIT, 4 * UNIT)
    assert all(size <= 4 * UNIT for size in result.buffers)
    for (buffer, offset), t in zip(result.placements, lifetimes):
        assert offset + t.size <= result.buffers[buffer]
    assert sum(result.buffers) == 8 * UNIT


def test_random_lifetimes_never_share_bytes_while_both_live():
    rng = random.Random(16)
    for _ in range(20):
        lifetimes = []
        for _ in range(60):
            start = rng.randrange(100)
            lifetimes.append(Lifetime(start, start + rng.randrange(12), rng.choice([4, 100, 256, 1000, 4096, 9000])))
        result = layout(lifetimes, UNIT, 64 * UNIT)
        spans = [(b, o, o + -(-max(t.size, 4) // UNIT) * UNIT) for (b, o), t in zip(result.placements, lifetimes)]
        for i, (a, sa) in enumerate(zip(lifetimes, spans)):
            assert sa[1] % UNIT == 0 and sa[2] <= result.buffers[sa[0]] <= 64 * UNIT
            for b, sb in zip(lifetimes[:i], spans[:i]):
                if a.start <= b.end and b.start <= a.end and sa[0] == sb[0]:
                    assert sa[2] <= sb[1] or sb[2] <= sa[1], (a, b, sa, sb)
        assert sum(result.buffers) >= peak_bytes(lifetimes)
