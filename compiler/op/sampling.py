"""sample_token: the next token from a row of logits, chosen on the device.

``R.sample_token(logits, history, params, greedy=False)`` with logits (1, vocab) float32, the
token ids seen so far (m,) int32 and params (5,) float32 = [temperature, top_k, top_p,
repetition_penalty, uniform] returns the chosen id as (1,) int32. Only those four bytes go back
to the host, not the vocabulary's logits.

The semantics, which the numpy reference spells out:

1. repetition penalty (CTRL's): each id in ``history`` (ids outside the vocabulary are ignored)
   has its logit divided by the penalty when positive, multiplied when not;
2. ``greedy`` (or temperature <= 0): the arg-max, the smallest id among ties;
3. otherwise weights w = exp((logit - max) / temperature); top-k keeps the ids whose weight is at
   least the k-th largest (ties kept; k <= 0 or >= vocab keeps all); top-p then keeps the ids whose
   weight is at least the largest threshold t for which the kept mass at or above t is still
   >= top_p times the top-k mass (top_p >= 1 keeps all);
4. the draw: the first id, in vocabulary order, at which the running sum of kept weights exceeds
   ``uniform * (kept mass)``. The host supplies ``uniform`` in [0, 1) from a seeded generator, so a
   seed reproduces a reply.

The computation has no loop-nest form; its kernel, one workgroup searching the row without
sorting, is the schedule rule ``sample-token`` (tessera/tir/schedule/sampling.py).
"""

from __future__ import annotations

import numpy as np

from .. import arith
from ..ir import TensorStructInfo
from ..ir.errors import DeductionError
from ..tir.compute import OpaqueDef
from .common import operands_vdevice, tensor_input
from .registry import register_op

PARAMS = ("temperature", "top_k", "top_p", "repetition_penalty", "uniform")


def _deduce(call, ctx):
    logits, history, params = (tensor_input(call, i, ctx) for i in range(3))
    expected = ((logits, "float32", "logits"), (history, "int32", "history"), (params, "float32", "params"))
    for sinfo, dtype, what in expected:
        if sinfo.dtype and sinfo.dtype != dtype:
            raise DeductionError("dtype mismatch", f"{what} must be {dtype}, got {sinfo.dtype}")
    for sinfo, ndim, what in ((logits, 2, "logits (1, vocab)"), (history, 1, "history (m,)"),
                              (params, 1, "params (5,)")):
        if sinfo.ndim not in (-1, ndim):
            raise DeductionError("rank mismatch", f"{what} has {sinfo.ndim} dimensions")
    if logits.shape is not None and ctx.analyzer.as_int(logits.shape[0]) not in (None, 1):
        raise DeductionError("shape mismatch", f"sample_token takes one row of logits, got {logits.shape[0]} rows")
    if params.shape is not None and ctx.analyzer.as_int(params.shape[0]) not in (None, len(PARAMS)):
        raise DeductionError("shape mismatch", f"params holds {', '.join(PARAMS)}: 5 values, got {params.shape[0]}")
    return TensorStructInfo((1,), "int32", vdevice=operands_vdevice(call, ctx))


def reference(logits, history, params, greedy=False):
    """The numpy statement of the semantics above (float32 weights, like the kernel)."""
    x = np.asarray(logits, np.float32).reshape(-1).copy()
    vocab = x.size
    temperature, top_k, top_p, penalty, uniform = (float(v) for v in np.asarray(params, np.float32))
    seen = np.unique(np.asarray(history, np.int64))
    seen = seen[(seen >= 0) & (seen < vocab)]
    values = x[seen]
    x[seen] = np.where(values > 0, values / np.float32(penalty), values * np.float32(penalty))
    best = int(np.argmax(x))
    if greedy or temperature <= 0:
        return np.array([best], np.int32)
    w = np.exp((x - x[best]) * np.float32(1.0 / temperature)).astype(np.float32)
    keep = np.ones(vocab, bool)
    k = int(top_k)
    if 0 < k < vocab:
        keep = w >= np.sort(w)[-k]
    if top_p < 1.0:
        kept = np.sort(w[keep])[::-1]
        mass_at_or_above = np.cumsum(kept.astype(np.float64))
        # The largest threshold t (one of the kept weights) whose mass at or above t reaches the goal;
        # tied weights are all kept.
        goal = top_p * mass_at_or_above[-1]
        threshold = kept[min(int(np.searchsorted(mass_at_or_above, goal * (1 - 1e-7))), kept.size - 1)]
        keep &= w >= threshold
    cumulative = np.cumsum(np.where(keep, w, 0).astype(np.float64))
    above = np.nonzero(cumulative > uniform * cumulative[-1])[0]
    return np.array([int(above[0]) if above.size else best], np.int32)


def _legalize(call, ctx):
    if arith.Analyzer().as_int(ctx.inputs[0].size) is None:
        raise ctx.fail("the vocabulary size must be static")
    # A search over the row that no loop nest describes: the sample-token rule (tir.schedule) writes it.
    return OpaqueDef(ctx.kernel_name, "sample-token", tuple(ctx.inputs), ctx.output,
                     {"greedy": bool(call.attr("greedy")), "param_names": PARAMS})


register_op("sample_token", inputs=("logits", "history", "params"), attrs={"greedy": False}, deduce=_deduce,
            reference=reference, legalize=_legalize, precision="never")
