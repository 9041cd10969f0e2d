"""A KV cache in pages (tessera.op.paged): RoPE-and-append and attention through a page table, as
kernels on every device, against numpy on the same sequences laid out contiguously.

Sequences own shuffled, non-contiguous pages of one pool; rows of the pool no sequence owns hold
NaN, so a kernel that reads outside its own pages (or past its own position) fails.
"""

import numpy as np
import pytest
from harness import COVERED_OPS, _record_browser_shaders, build, target_for
from tessera import op
from tessera.ir import Function, Tensor, interpret
from tessera.transform import legalize_ops
from test_attention_kernels import RULES, _rule, numpy_attention

F32 = "float32"
PAGE = 4
POOL_PAGES = 20
HEADS, KV_HEADS, D = 4, 2, 16


def lower(runner, mod, target=None):
    target = target_for(runner, target)
    lowered = legalize_ops(mod, target)
    kernels = [f for f in lowered.functions.values() if not isinstance(f, Function)]
    if target.kind == "webgpu":
        _record_browser_shaders(mod, kernels)
    return lowered, kernels


def sequences(rng, lengths, pages_each):
    """A page table (len(lengths), pages_each) of distinct shuffled pages, a pool (POOL_PAGES * PAGE,
    KV_HEADS, D) of keys and of values (NaN outside every sequence's first ``length`` positions), and
    each sequence's keys and values laid out contiguously."""
    order = rng.permutation(POOL_PAGES)[:len(lengths) * pages_each].reshape(len(lengths), pages_each)
    table = order.astype(np.int32)
    keys = np.full((POOL_PAGES * PAGE, KV_HEADS, D), np.nan, np.float32)
    values = keys.copy()
    contiguous = []
    for seq, length in enumerate(lengths):
        k = rng.standard_normal((length, KV_HEADS, D)).astype(np.float32)
        v = rng.standard_normal((length, KV_HEADS, D)).astype(np.float32)
        rows = table[seq, np.arange(length) // PAGE] * PAGE + np.arange(length) % PAGE
        keys[rows], values[rows] = k, v
        contiguous.append((k, v))
    return table, keys, values, contiguous


def attention_module(seqs):
    params = [Tensor(("n", HEADS, D), F32), Tensor((POOL_PAGES * PAGE, KV_HEADS, D), F32),
              Tensor((POOL_PAGES * PAGE, KV_HEADS, D), F32), Tensor(("n",), "int32"), Tensor((seqs, 6), "int32")]
    return build(lambda q, k, v, pos, table: op.nn.paged_attention(q, k, v, pos, table, page_size=PAGE), params)


@pytest.mark.parametrize("rules", RULES)
def test_decode_batch_attends_each_sequence_through_its_pages(runner, rules):
    """One new position per sequence (a page table row per query row), sequences of different
    lengths: 1 key, a page and a bit, a full table."""
    if RULES[rules] is not None and runner.target.serial_threads:
        pytest.skip("C kernels run a workgroup's threads one after another: attention has only the rows shape")
    COVERED_OPS.add("nn.paged_attention")
    rng = np.random.default_rng(0)
    lengths = [1, 5, 24]
    table, keys, values, contiguous = sequences(rng, lengths, 6)
    q = rng.standard_normal((3, HEADS, D)).astype(np.float32)
    positions = np.array(lengths, np.int32) - 1
    mod = attention_module("n")
    lowered, kernels = lower(runner, mod, RULES[rules])
    assert [k.attrs["rule"] for k in kernels] == [_rule(runner, rules)]
    want = np.concatenate([numpy_attention(q[i:i + 1], k, v, lengths[i]) for i, (k, v) in enumerate(contiguous)])
    np.testing.assert_allclose(interpret(mod, "main", q, keys, values, positions, table), want, rtol=1e-5, atol=1e-6)
    got = interpret(lowered, "main", q, keys, values, positions, table, kernel_runner=runner)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)
    # Two of the three rows alone: a smaller batch runs the same kernel.
    got = interpret(lowered, "main", q[1:], keys, values, positions[1:], table[1:], kernel_runner=runner)
    np.testing.assert_allclose(got, want[1:], rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("rules", RULES)
def test_prefill_chunk_attends_causally_through_one_page_table(runner, rules):
    """Consecutive positions of one sequence (one page-table row): a whole prompt, and a chunk that
    continues after cached positions across page boundaries."""
    if RULES[rules] is not None and runner.target.serial_threads:
        pytest.skip("C kernels run a workgroup's threads one after another: attention has only the rows shape")
    COVERED_OPS.add("nn.paged_attention")
    rng = np.random.default_rng(1)
    table, keys, values, ((k, v),) = sequences(rng, [23], 6)
    mod = attention_module(1)
    lowered, kernels = lower(runner, mod, RULES[rules])
    assert [kern.attrs["rule"] for kern in kernels] == [_rule(runner, rules)]
    for start, n in ((0, 23), (9, 14), (22, 1)):
        q = rng.standard_normal((n, HEADS, D)).astype(np.float32)
        positions = np.arange(start, start + n, dtype=np.int32)
        want = numpy_attention(q, k, v, start + n)
        got = interpret(lowered, "main", q, keys, values, positions, table, kernel_runner=runner)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5, err_msg=f"start {start}, n {n}")


def test_paged_rope_append_writes_each_row_into_its_sequences_page(runner):
    """q rotated; each row's rotated key and value land in the row of the pool its page table names,
    and nothing else in the pool changes."""
    COVERED_OPS.add("paged_rope_append")
    width = (HEADS + 2 * KV_HEADS) * D
    pool = (POOL_PAGES * PAGE, KV_HEADS, D)
    params = [Tensor(("n", width), F32), Tensor(("n", 1, D), F32), Tensor(("n", 1, D), F32), Tensor(pool, F32),
              Tensor(pool, F32), Tensor(("n",), "int32"), Tensor(("n", 3), "int32")]
    mod = build(lambda qkv, cos, sin, k, v, pos, table: op.paged_rope_append(qkv, cos, sin, k, v, pos, table,
                                                                             page_size=PAGE), params)
    lowered, kernels = lower(runner, mod)
    assert [k.attrs["rule"] for k in kernels] == ["rope-append"] and kernels[0].attrs["inplace"] == {1: 3, 2: 4}
    rng = np.random.default_rng(2)
    qkv = rng.standard_normal((3, width)).astype(np.float32)
    angles = rng.standard_normal((3, 1, D)).astype(np.float32)
    table = np.array([[5, 0, 0], [2, 9, 0], [7, 1, 11]], np.int32)
    positions = np.array([3, 6, 8], np.int32)  # page 0 row 3; page 1 row 2; page 2 row 0
    keys, values = np.full(pool, 7, np.float32), np.full(pool, 9, np.float32)
    q, got_keys, got_values = interpret(lowered, "main", qkv, np.cos(angles), np.sin(angles), keys.copy(),
                                        values.copy(), positions, table, kernel_runner=runner)
    half = D // 2

    def rope(x):
        return x * np.cos(angles) + np.concatenate((-x[..., half:], x[..., :half]), axis=-1) * np.sin(angles)

    want_keys, want_values = keys.copy(), values.copy()
    rows = [5 * PAGE + 3, 9 * PAGE + 2, 11 * PAGE + 0]
    want_keys[rows] = rope(qkv[:, HEADS * D:(HEADS + KV_HEADS) * D].reshape(3, KV_HEADS, D))
    want_values[rows] = qkv[:, (HEADS + KV_HEADS) * D:].reshape(3, KV_HEADS, D)
    np.testing.assert_allclose(q, rope(qkv[:, :HEADS * D].reshape(3, HEADS, D)), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_keys, want_keys, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got_values, want_values)
    reference = interpret(mod, "main", qkv, np.cos(angles), np.sin(angles), keys.copy(), values.copy(), positions,
                          table)
    np.testing.assert_allclose(reference[1], want_keys, rtol=1e-6, atol=1e-6)


def test_a_bad_page_table_stays_inside_the_pool(runner):
    """Entries past the pool and negative positions are clamped in the kernels: the wrong rows, never
    memory outside the buffers (the engine's page allocator never writes such a table)."""
    rng = np.random.default_rng(3)
    table, keys, values, _ = sequences(rng, [5], 6)
    keys, values = np.nan_to_num(keys), np.nan_to_num(values)
    bad = np.array([[10 ** 6, -7, 2 ** 30, 3, 4, 5]], np.int32)
    q = rng.standard_normal((2, HEADS, D)).astype(np.float32)
    lowered, _ = lower(runner, attention_module(1))
    got = interpret(lowered, "main", q, keys, values, np.array([-3, 7], np.int32), bad, kernel_runner=runner)
    assert np.isfinite(got).all()
