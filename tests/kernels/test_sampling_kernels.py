"""sample_token on the device against its numpy statement, and that statement against plain sorting."""

import numpy as np
import pytest
from harness import build, check_op, target_for
from tessera import op
from tessera.ir import Tensor, interpret
from tessera.op.sampling import reference
from tessera.transform import legalize_ops

PARAMS = [Tensor((1, 1000), "float32"), Tensor(("m",), "int32"), Tensor((5,), "float32")]


def lowered(runner, greedy: bool, vocab: int = 1000):
    params = [Tensor((1, vocab), "float32"), Tensor(("m",), "int32"), Tensor((5,), "float32")]
    return legalize_ops(build(lambda x, h, p: op.sample_token(x, h, p, greedy=greedy), params), target_for(runner))


@pytest.mark.parametrize("greedy", [True, False])
def test_sample_token_kernel_over_history_lengths(runner, greedy):
    def inputs(env, rng):
        logits = (rng.standard_normal((1, 1000)) * 3).astype(np.float32)
        history = rng.integers(0, 1000, env["m"]).astype(np.int32)
        return [logits, history, np.array([0.8, 50, 0.9, 1.3, rng.random()], np.float32)]

    _, kernels = check_op(runner, lambda x, h, p: op.sample_token(x, h, p, greedy=greedy), PARAMS, inputs=inputs)
    assert [k.attrs["rule"] for k in kernels] == ["sample-token"]
    assert kernels[0].grid[0].value == 1  # one workgroup: nothing but the id leaves the device


SETTINGS = [  # temperature, top_k, top_p, repetition_penalty
    (1.0, 0, 1.0, 1.0), (0.7, 40, 1.0, 1.0), (1.0, 0, 0.9, 1.0), (1.3, 50, 0.5, 1.2), (1.0, 1, 1.0, 1.0),
    (0.5, 2000, 0.05, 1.0), (1.0, 0, 1.0, 1.5), (0.0, 40, 0.9, 1.1),
]


@pytest.mark.parametrize("setting", SETTINGS, ids=[str(s) for s in SETTINGS])
def test_sampled_ids_match_the_reference(runner, setting):
    mod = lowered(runner, False)
    rng = np.random.default_rng(abs(hash(setting)) % 1000)
    for _ in range(12):
        logits = (rng.standard_normal((1, 1000)) * 3).astype(np.float32)
        history = rng.integers(-5, 1005, 40).astype(np.int32)  # a few ids outside the vocabulary
        params = np.array([*setting, rng.random()], np.float32)
        got = interpret(mod, "main", logits, history, params, kernel_runner=runner)
        np.testing.assert_array_equal(got, reference(logits, history, params), err_msg=str(params))


def test_ties_masked_logits_and_the_smollm2_vocabulary(runner):
    flat = np.zeros((1, 1000), np.float32)
    greedy, sample = lowered(runner, True), lowered(runner, False)
    one = np.array([0], np.int32)
    assert interpret(greedy, "main", flat, one, np.array([0, 0, 1, 1, 0], np.float32), kernel_runner=runner)[0] == 0
    # top-k 1 with every weight tied keeps them all: the draw then spreads over the vocabulary.
    drawn = {int(interpret(sample, "main", flat, one, np.array([1, 1, 1, 1, u], np.float32),
                           kernel_runner=runner)[0]) for u in (0.0005, 0.5, 0.9995)}
    assert drawn == {0, 500, 999}
    masked = np.full((1, 1000), -3.4e38, np.float32)
    masked[0, [3, 700]] = [1.0, 2.0]
    for u in (0.01, 0.5, 0.99):
        params = np.array([1, 0, 1, 1, u], np.float32)
        got = interpret(sample, "main", masked, one, params, kernel_runner=runner)
        assert got[0] in (3, 700) and got[0] == reference(masked, one, params)[0]
    vocab = 49152
    big = legalize_ops(build(lambda x, h, p: op.sample_token(x, h, p), [Tensor((1, vocab), "float32"),
                                                                         Tensor(("m",), "int32"),
                                                                         Tensor((5,), "float32")]), target_for(runner))
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((1, vocab)) * 4).astype(np.float32)
    history = rng.integers(0, vocab, 500).astype(np.int32)
    for u in (0.1, 0.6):
        params = np.array([0.9, 40, 0.95, 1.1, u], np.float32)
        np.testing.assert_array_equal(interpret(big, "main", logits, history, params, kernel_runner=runner),
                                      reference(logits, history, params))


def test_the_reference_keeps_the_sets_sorting_would_keep():
    """Top-k then top-p by sorting, the textbook way: the same kept ids and the same draw
    frequencies as the threshold statement the kernel implements."""
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal(300) * 2).astype(np.float32)
    temperature, k, p = 0.8, 25, 0.7
    probs = np.exp((logits - logits.max()) / temperature)
    order = np.argsort(-probs)[:k]
    kept_probs = probs[order] / probs[order].sum()
    nucleus = order[: int(np.searchsorted(np.cumsum(kept_probs), p)) + 1]
    expected = np.zeros(300)
    expected[nucleus] = probs[nucleus] / probs[nucleus].sum()
    grid = (np.arange(4000) + 0.5) / 4000
    counts = np.bincount([reference(logits[None], [0], [temperature, k, p, 1.0, u])[0] for u in grid], minlength=300)
    assert set(np.nonzero(counts)[0]) == set(nucleus)
    np.testing.assert_allclose(counts / len(grid), expected, atol=1e-3)
