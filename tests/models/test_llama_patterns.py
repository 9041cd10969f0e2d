"""The Llama blocks as fusion patterns (tessera.models.llama_fusion).

The compiled patterns reproduce fuse_ops's groups: a build that matches them first writes the same
kernels, byte for byte, and the same VM programs. The offloaded ones, blocks fuse_tir cannot put in
one kernel, run as library calls and compute what the model computes."""

import numpy as np
import pytest
import tessera
from conformance.cases import CASES
from tessera.ir import interpret
from tessera.models.llama_fusion import compile_patterns, offload_patterns
from tessera.op.norm import _rms_norm_reference
from tessera.target import Target
from tessera.transform import Pipeline, find_matches, fuse_ops_by_pattern
from tiny_llama import VARIANTS


def with_patterns(target: str, patterns) -> Pipeline:
    t = Target.preset(target)
    pipeline = Pipeline.default(t)
    pipeline.insert_before("fuse_ops", "fuse_ops_by_pattern", lambda m: fuse_ops_by_pattern(m, patterns, t))
    return pipeline


@pytest.mark.parametrize("variant", [*VARIANTS, "q4_1"])
def test_the_compiled_patterns_give_the_kernels_fuse_ops_gives(variant):
    mod = CASES[f"llama-{variant}"]().module
    found = find_matches(mod["decode"], compile_patterns())
    # Per layer SwiGLU (RoPE is op.rope_append's, with the KV-cache append, in a model with a cache).
    assert sorted(fp.name for fp, _ in found) == ["llama.swiglu"] * 2
    for target in ("webgpu", "wasm"):
        default, patterned = tessera.build(mod, target), tessera.build(mod, target, pipeline=with_patterns(
            target, compile_patterns(Target.preset(target))))
        assert patterned.modules == default.modules
        assert patterned.kernels == default.kernels
        assert patterned.functions == default.functions


def library(calls):
    def last_row_projection(x, g, w, out):
        calls.append("rms_norm_last_row_projection")
        out[...] = _rms_norm_reference(x, g, (-1,), 1e-5)[-1:] @ w

    def projection(x, g, w, out):
        calls.append("rms_norm_projection")
        out[...] = _rms_norm_reference(x, g, (-1,), 1e-5) @ w

    def swiglu_down(gate, up, w, out):
        calls.append("swiglu_down")
        out[...] = (gate / (1 + np.exp(-gate)) * up) @ w

    return {"llama.rms_norm_last_row_projection": last_row_projection, "llama.rms_norm_projection": projection,
            "llama.swiglu_down": swiglu_down}


@pytest.mark.parametrize("variant", ["gqa-2x", "qwen2-bias"])
def test_the_blocks_fuse_tir_cannot_compile_run_as_library_calls(variant):
    mod = CASES[f"llama-{variant}"]().module
    offloaded = fuse_ops_by_pattern(mod, offload_patterns())
    decode = offloaded["decode"]
    names = [b.value.args[0].value for block in decode.body.blocks for b in block.bindings
             if getattr(getattr(b.value, "op", None), "name", "") == "call_dps_library"]
    # The head's norm and projection, each layer's SwiGLU and down projection.
    assert sorted(names) == ["llama.rms_norm_last_row_projection", "llama.swiglu_down", "llama.swiglu_down"]
    rng = np.random.default_rng(3)
    caches = [np.zeros(tuple(int(d.value) for d in p.struct_info.shape), np.float32)
              for p in mod["prefill"].params[2:]]
    ids = rng.integers(0, 96, 6).astype(np.int32)
    calls = []
    want_caches, got_caches = [c.copy() for c in caches], [c.copy() for c in caches]
    want = interpret(mod, "prefill", ids, 6, *want_caches)
    got = interpret(offloaded, "prefill", ids, 6, *got_caches, library=library(calls))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    for w, g in zip(want_caches, got_caches):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    step = np.array([7], np.int32)
    want = interpret(mod, "decode", step, 7, *want_caches)
    got = interpret(offloaded, "decode", step, 7, *got_caches, library=library(calls))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert sorted(set(calls)) == ["rms_norm_last_row_projection", "swiglu_down"]
