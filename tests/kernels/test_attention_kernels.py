"""Fused causal attention (tessera.op.attention) as kernels on every device, against numpy's softmax.

The expected values come from a plain numpy statement of attention (scores, a causal mask, a
softmax, a weighted sum), not from the operator's reference, which is checked against the same.
"""

import dataclasses

import numpy as np
import pytest
from harness import COVERED_OPS, _record_browser_shaders, build, target_for
from tessera import arith, op
from tessera.ir import Function, PrimStructInfo, PrimValue, Tensor, interpret
from tessera.target import Target
from tessera.tir.schedule import attention as attention_rules
from tessera.tir.schedule.attention import heads_per_lane, lanes_loop_iterations
from tessera.tir.verify import verify_kernel
from tessera.transform import legalize_ops

F32 = "float32"
TOTAL = arith.Var("total")
# Each device runs both shapes of the kernel: its own preset's (a CPU adapter here: the rows rule)
# and a real GPU's (spec-default WebGPU, not a CPU adapter: workgroup tiles), so the GPU rule is
# checked on this machine too.
RULES = {"cpu": None, "gpu": Target.preset("webgpu")}


def numpy_attention(q, keys, values, total):
    """Softmax attention of q (n, heads, d) at positions total - n .. total - 1 over keys 0 .. total - 1,
    (n, heads * d)."""
    n, heads, d = q.shape
    group = heads // keys.shape[1]
    out = np.zeros(q.shape, np.float64)
    for h in range(heads):
        k = keys[:total, h // group].astype(np.float64)
        scores = q[:, h].astype(np.float64) @ k.T / np.sqrt(d)
        for i in range(n):
            scores[i, total - n + i + 1:] = -np.inf  # causal: nothing after the row's own position
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[:, h] = (p / p.sum(axis=1, keepdims=True)) @ values[:total, h // group].astype(np.float64)
    return out.reshape(n, heads * d)


def attention_module(heads, kv_heads, d, capacity, rows="n", dtype=F32):
    params = [Tensor((rows, heads, d), dtype), Tensor((capacity, kv_heads, d), dtype),
              Tensor((capacity, kv_heads, d), dtype), PrimStructInfo("int64", TOTAL)]
    return build(lambda q, k, v, total: op.nn.attention(q, k, v, PrimValue(TOTAL)), params)


def run_attention(runner, mod, cases, capacity, shape, target=None, seed=0, dtype=F32):
    """Legalize ``mod`` for the runner's device, run it for each (n, total) and compare with numpy.
    In float16 the inputs are float16 values and the result is rounded to float16 once (the
    kernels accumulate in float32): within 2e-3 of numpy's float64 on the same values."""
    if target is not None and not target.cpu_adapter and runner.target.serial_threads:
        pytest.skip("C kernels run a workgroup's threads one after another: attention has only the rows shape")
    target = target_for(runner, target)
    COVERED_OPS.add("nn.attention")
    lowered = legalize_ops(mod, target)
    kernels = [f for f in lowered.functions.values() if not isinstance(f, Function)]
    if target.kind == "webgpu":
        _record_browser_shaders(mod, kernels)
    heads, kv_heads, d = shape
    rng = np.random.default_rng(seed)
    for n, total in cases:
        for kernel in kernels:
            verify_kernel(kernel, {name: {"n": n, "total": total}[name] for name in kernel.scalars})
        q = rng.standard_normal((n, heads, d)).astype(dtype)
        keys = rng.standard_normal((capacity, kv_heads, d)).astype(dtype)
        values = rng.standard_normal((capacity, kv_heads, d)).astype(dtype)
        keys[total:] = values[total:] = np.nan  # rows past ``total`` must never be read
        want = numpy_attention(q, keys, values, total)
        tolerance = {"rtol": 1e-4, "atol": 2e-5} if dtype == F32 else {"rtol": 2e-3, "atol": 2e-3}
        if dtype == F32:
            np.testing.assert_allclose(interpret(mod, "main", q, keys, values, total), want, rtol=1e-5, atol=1e-6)
        got = interpret(lowered, "main", q, keys, values, total, kernel_runner=runner)
        assert got.dtype == np.dtype(dtype) and got.shape == (n, heads * d)
        np.testing.assert_allclose(got, want, **tolerance, err_msg=f"n = {n}, total = {total}")
    return kernels


@pytest.mark.parametrize("rules", RULES)
def test_prefill_attention_over_a_cache(runner, rules):
    """Prompts from the first position and continued after cached ones (chunks), grouped-query heads,
    a last workgroup with fewer positions than it holds, and key tiles cut short by the causal bound."""
    kernels = run_attention(runner, attention_module(4, 2, 16, 80), [(1, 1), (5, 5), (3, 37), (40, 40), (17, 80)],
                            80, (4, 2, 16), target=RULES[rules])
    assert [k.attrs["rule"] for k in kernels] == [_rule(runner, rules)]


@pytest.mark.parametrize("rules", RULES)
def test_decode_attention_splits_the_keys_across_workgroups(runner, rules):
    """One position over a long cache: partial shares of the keys, then the merge (split-K). Shares
    past a short sequence are empty and must not count."""
    mod = attention_module(9, 3, 64, 2048, rows=1)
    kernels = run_attention(runner, mod, [(1, 1), (1, 37), (1, 2048)], 2048, (9, 3, 64), target=RULES[rules])
    assert [k.attrs["rule"] for k in kernels] == [_rule(runner, rules), "attention-merge"]
    assert arith.Analyzer().as_int(kernels[0].outputs[0].shape[0]) > 1  # several shares per KV head
    COVERED_OPS.update({"nn.attention_partial", "nn.attention_merge"})


@pytest.mark.parametrize("rules", RULES)
@pytest.mark.parametrize("shape", [(6, 3, 8), (2, 1, 6)])
def test_decode_attention_small_heads(runner, shape, rules):
    """A short cache is not split; a head size that is no multiple of the CPU rule's dot lanes."""
    heads, kv_heads, d = shape
    kernels = run_attention(runner, attention_module(heads, kv_heads, d, 64, rows=1), [(1, 1), (1, 40), (1, 64)], 64,
                            shape, target=RULES[rules])
    assert [k.attrs["rule"] for k in kernels] == [_rule(runner, rules)]


def test_heads_per_lane():
    """The lanes rule gives an invocation as many of a KV head's query heads as divide the group
    and fit LANE_VALUES (256) values of q: SmolLM2's 3 heads of 64, 2 of Llama 3's 4 of 128."""
    assert [heads_per_lane(group, d) for group, d in ((3, 64), (4, 128), (3, 128), (1, 64), (8, 8))] == [3, 2, 1, 1, 8]


@pytest.mark.parametrize("shape", [(8, 2, 32), (6, 2, 32), (4, 4, 32)])
def test_attention_lanes_with_part_of_a_group(runner, shape, monkeypatch):
    """Lanes that take part of a KV head's query heads: with room for 64 values of q, 2 of 4 heads
    of 32, 1 of 3, and 1 of 1 (no grouped queries); prefill and decode. (The same shapes at head
    size 128 would test the real bound, at minutes of Mesa's compile time per kernel.)"""
    if not target_for(runner).cpu_adapter or target_for(runner).serial_threads:
        pytest.skip("the lanes rule is for GPU languages on a CPU adapter")
    monkeypatch.setattr(attention_rules, "LANE_VALUES", 64)
    heads, kv_heads, d = shape
    assert heads_per_lane(heads // kv_heads, d) == {(8, 2, 32): 2, (6, 2, 32): 1, (4, 4, 32): 1}[shape]
    run_attention(runner, attention_module(heads, kv_heads, d, 300), [(3, 3), (20, 300)], 300, shape)
    run_attention(runner, attention_module(heads, kv_heads, d, 300, rows=1), [(1, 1), (1, 299)], 300, shape)


def test_partial_shares_and_merge_as_operators(runner):
    """nn.attention_partial's (output, m, l) per share and nn.attention_merge, each against the reference."""
    target = target_for(runner)
    params = [Tensor((2, 4, 8), F32), Tensor((30, 2, 8), F32), Tensor((30, 2, 8), F32), PrimStructInfo("int64", TOTAL)]
    mod = build(lambda q, k, v, total: op.nn.attention_partial(q, k, v, PrimValue(TOTAL), splits=3, scale=0.25),
                params)
    COVERED_OPS.update({"nn.attention_partial", "nn.attention_merge"})
    lowered = legalize_ops(mod, target)
    rng = np.random.default_rng(1)
    q, keys, values = (rng.standard_normal(shape).astype(np.float32) for shape in
                       ((2, 4, 8), (30, 2, 8), (30, 2, 8)))
    for total in (2, 29):
        want = interpret(mod, "main", q, keys, values, total)
        got = interpret(lowered, "main", q, keys, values, total, kernel_runner=runner)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        merge = build(lambda p: op.nn.attention_merge(p), [Tensor(want.shape, F32)])
        merged = interpret(legalize_ops(merge, target), "main", want, kernel_runner=runner)
        expected = numpy_attention(q * np.float32(0.25 * np.sqrt(8)), keys, values, total)
        np.testing.assert_allclose(merged, expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(interpret(merge, "main", want), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rules", RULES)
def test_attention_in_float16(runner, rules):
    """What a webgpu-f16 build runs: float16 queries and cache, float32 scores, softmax and sums;
    prefill over a chunk after cached rows, and decode split across workgroups."""
    gpu = RULES[rules] and Target("webgpu", {"shader-f16"})
    prefill = run_attention(runner, attention_module(4, 2, 16, 80, dtype="float16"), [(5, 5), (17, 80)], 80,
                            (4, 2, 16), target=gpu, dtype="float16")
    assert [k.attrs["rule"] for k in prefill] == [_rule(runner, rules)]
    decode = run_attention(runner, attention_module(6, 2, 32, 1024, rows=1, dtype="float16"), [(1, 3), (1, 1024)],
                           1024, (6, 2, 32), target=gpu, dtype="float16")
    assert [k.attrs["rule"] for k in decode] == [_rule(runner, rules), "attention-merge"]


def test_prefill_attention_over_a_long_cache(runner):
    """A prompt's chunk over a cache of 2,048 keys: what a rule that walks a row's keys in one
    invocation must get right within Mesa's loop budget (65,535 loop iterations an invocation,
    Target.loop_budget); a cache the budget cannot cover is refused by name, not cut short."""
    target = target_for(runner)
    run_attention(runner, attention_module(9, 3, 64, 2048), [(64, 2048), (5, 1900), (3, 3)], 2048, (9, 3, 64))
    if target.loop_budget:
        assert lanes_loop_iterations(2048) <= target.loop_budget
        tight = dataclasses.replace(target, loop_budget=lanes_loop_iterations(1024))
        with pytest.raises(ValueError, match="cache of 2048 keys in 1 share.* loop budget of 129 iterations"):
            legalize_ops(attention_module(9, 3, 64, 2048), tight)


def _rule(runner, rules: str) -> str:
    """The rule attention gets: rows for C and WASM, lanes for GPU languages on a CPU adapter
    (llvmpipe, lavapipe, PoCL), tiles of workgroup memory for GPUs (tir/schedule/attention.py)."""
    target = target_for(runner, RULES[rules])
    if not target.cpu_adapter:
        return "attention"
    return "attention-rows" if target.serial_threads else "attention-lanes"
