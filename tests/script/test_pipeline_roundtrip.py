"""The text format after every pass: a module the default pipeline produced, at any point, prints,
parses back to a structurally equal module, and prints again to the same text."""

import re
import subprocess
import sys

import numpy as np
import pytest
from modules import CATALOGUE
from tessera import nn
from tessera.ir import IRModule, assert_structural_equal, well_formed
from tessera.models import LlamaConfig, LlamaForCausalLM, export_llm
from tessera.op.lowering import LegalizeError
from tessera.script import from_source
from tessera.target import Target
from tessera.tir.ir import PrimFunc
from tessera.transform.pipeline import Pipeline

TARGET = Target.preset("webgpu")
UPPER_BOUNDS = {"n": 32, "total": 32, "m": 32, "k": 32, "batch": 32}
PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj")


def tiny_llama() -> IRModule:
    """The tiny random Llama of tests/fixtures/tiny_gguf.py (hidden 64, 4 query heads over 2 KV heads,
    FFN 128, Q4_1 layers, Q8_0 embedding and head) with one layer and 96 tokens, its random weights
    bound, exported as the chat app compiles it: prefill and decode over a KV cache, and sampling."""
    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_layers=1, num_heads=4,
                         num_kv_heads=2, head_dim=16)
    formats = {"model.embed_tokens": "q8_0", "lm_head": "q8_0"}
    formats.update({f"model.layers.0.{name}": "q4_1" for name in PROJECTIONS})
    model = LlamaForCausalLM(config, formats)
    rng = np.random.default_rng(0)
    weights = {}
    for path, param in model.named_parameters():
        shape = tuple(int(d.value) for d in param.sinfo.shape)
        if param.sinfo.dtype == "uint32":  # quantized blocks: any bits are some weights
            weights[path] = rng.integers(0, 2**32, shape, dtype=np.uint32)
        else:
            weights[path] = rng.standard_normal(shape).astype(param.sinfo.dtype)
    return nn.bind_weights(export_llm(model, 32), weights)


def assert_round_trips(mod: IRModule, after: str) -> str:
    text = mod.script()
    parsed = from_source(text)
    try:
        assert_structural_equal(parsed, mod)
    except AssertionError as error:
        raise AssertionError(f"after {after}: {error}") from None
    assert parsed.script() == text, f"after {after}: the parsed module prints differently"
    return text


def test_tiny_llama_round_trips_after_every_pass():
    mod = tiny_llama()
    assert_round_trips(mod, "export")
    for name, run in Pipeline.default(TARGET, UPPER_BOUNDS).passes:
        mod = run(mod)
        assert_round_trips(mod, name)
    kernels = [f for f in mod.functions.values() if isinstance(f, PrimFunc)]
    # Every schedule rule the model uses came through: quantized matmuls, GEMMs, row reductions...
    assert {k.attrs["rule"] for k in kernels} >= {"quantized-matmul", "attention", "row-reduction", "injective",
                                                  "vectorized-elementwise", "rope-append", "sample-token"}


# Where a catalogue module's compilation stops today, by design: the pass, the error it raises and
# the words that name the limitation. The passes before it are checked; any other error, or this pass
# succeeding (then this entry goes), fails the test.
STOPS = {
    # `logged` comes from an impure extern call that states only its ndim; a kernel needs a shape,
    # and legalize_ops asks for a match_cast rather than guessing one.
    "everything_else": ("legalize_ops", LegalizeError, "argument logged has tensor of ndim 1 int32; a kernel "
                                                       "needs a known shape and dtype"),
}


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_catalogue_modules_round_trip_after_every_pass(name):
    mod = CATALOGUE[name]()
    stop, error, words = STOPS.get(name, (None, None, None))
    passes = Pipeline.default(TARGET, UPPER_BOUNDS).passes
    assert stop is None or stop in [p for p, _ in passes], f"{name} is said to stop at {stop}, which is no pass"
    for pass_name, run in passes:
        if pass_name == stop:
            with pytest.raises(error, match=re.escape(words)):
                run(mod)
            return
        mod = run(mod)
        assert_round_trips(mod, pass_name)


def test_tessera_check_reads_a_compiled_module(tmp_path):
    mod = Pipeline.default(TARGET, UPPER_BOUNDS)(CATALOGUE["attention_demo"]())
    text = mod.script()
    path = tmp_path / "attention.py"
    path.write_text(text)
    result = subprocess.run([sys.executable, "-m", "tessera.cli", "check", str(path)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == text
    well_formed(from_source(text))
