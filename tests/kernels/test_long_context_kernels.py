"""Attention over a 3,072-position cache on every device: the kernel-sized form of the `long` test
tests/models/test_long_prompt.py (SmolLM2 prefilling a 3,000-token prompt on llvmpipe in chunks of
1,024 and decoding after it, against transformers: half an hour on 2 cores, left out of `make test`).

That test once caught Mesa cutting loops short: llvmpipe and lavapipe silently end an invocation's
loops after 65,535 iterations in all (Target.loop_budget), so a kernel whose loop walks every key of
a long cache stops early and weighs only the first keys, with no error. Here the attention kernels
of that prompt (the chat session's chunks over a cache of 3,072 rows, then decode) run against
numpy's float64 attention. The keys and values are random, so every key counts, and the rows past
``total`` are NaN, so a kernel that reads past the sequence fails too. The heads are SmolLM2's
grouping (3 query heads a KV head) at a head size of 16, not 64: the loops that a budget cuts run
over keys, and the head-size loops, unrolled, are what makes Mesa's compile of SmolLM2's kernels
take minutes (test_attention_kernels.py runs that shape at 2,048 keys). The prompt's other kernels
(matmuls, norms, RoPE from host-computed tables) do not loop over positions.
"""

from harness import target_for
from tessera import arith
from tessera.tir.schedule.attention import lanes_loop_iterations
from test_attention_kernels import attention_module, run_attention

CONTEXT = 3072  # the long test's context: SmolLM2 compiled for 3,072 positions
SHAPE = (6, 2, 16)  # query heads, KV heads, head size
# (rows, keys): the chat session's chunks of a 3,000-token prompt (1,024, 1,024 and 952, the long
# test's ``chunks``), the last two over the cached rows before them, and 5 rows that end at the
# cache's last row.
PREFILL_CHUNKS = [(1024, 1024), (1024, 2048), (952, 3000), (5, CONTEXT)]


def test_prefill_chunks_of_a_3000_token_prompt_over_a_3072_key_cache(runner):
    kernels = run_attention(runner, attention_module(*SHAPE, CONTEXT), PREFILL_CHUNKS, CONTEXT, SHAPE)
    (kernel,) = kernels
    target = target_for(runner)
    if target.loop_budget:
        # Mesa's drivers get the lanes rule: one invocation walks all of a row's keys in one loop, the
        # loop a budget cuts short; at this context it is within it (a cache past the budget is
        # refused by name: test_attention_kernels.py).
        assert kernel.attrs["rule"] == "attention-lanes"
        assert lanes_loop_iterations(CONTEXT) <= target.loop_budget


def test_decode_after_a_3000_token_prompt(runner):
    """One position over 3,001 to 3,072 keys: the decode kernel splits the cache into shares and
    merges them; every share is full, the last one partly."""
    kernels = run_attention(runner, attention_module(*SHAPE, CONTEXT, rows=1), [(1, 3001), (1, 3016), (1, CONTEXT)],
                            CONTEXT, SHAPE)
    assert [k.attrs["rule"] for k in kernels][-1] == "attention-merge"
    assert arith.Analyzer().as_int(kernels[0].outputs[0].shape[0]) > 1  # several shares


def test_decode_after_a_3000_token_prompt_in_float16(runner):
    """What a webgpu-f16 build (a bundle's first choice) runs after the same prompt: a float16 cache,
    float32 scores and sums (every device holds float16 tensors; PoCL's OpenCL computes in float32)."""
    run_attention(runner, attention_module(*SHAPE, CONTEXT, rows=1, dtype="float16"), [(1, 3000), (1, CONTEXT)],
                  CONTEXT, SHAPE, dtype="float16")
