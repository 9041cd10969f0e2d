"""Float16 builds (target ``webgpu-f16``): activations and the KV cache in float16, float32
accumulation in every reduction, run on llvmpipe (which has shader-f16) and compared with the
float32 build and with transformers."""

import numpy as np
import pytest
import tessera
from model_helpers import greedy, prompt_ids
from tessera import nn
from tessera.frontend import bundled_smollm2_path, load_gguf
from tessera.ir import Constant
from tessera.models import LlamaForCausalLM, export_llm, model_from_gguf
from tessera.transform import fold_constants, to_mixed_precision
from tessera.transform.rewrite import walk_bindings
from tessera.vm import VirtualMachine
from test_generation import PROMPTS, hf_greedy
from test_llama_vs_transformers import reference as tiny_reference


def test_the_pass_keeps_signatures_positions_and_logits_in_float32():
    """The KV cache (state) becomes float16; inputs and the logits stay float32 (the head reads
    the final norm's float32 output, so the logits owe nothing to float16 rounding there); RoPE is computed in
    float32 (from float32 positions: float16 holds integers exactly only up to 2048) and so is
    the residual stream, which adds the projections' float16 results to float32 sums."""
    _, config, weights = tiny_reference("qwen2-bias")
    mod = to_mixed_precision(fold_constants(nn.bind_weights(export_llm(LlamaForCausalLM(config), 32), weights)))
    decode = mod["decode"]
    dtypes = {p.name_hint: p.struct_info.dtype for p in decode.params if hasattr(p.struct_info, "dtype")}
    assert dtypes["input_ids"] == "int32"
    assert {dtypes[f"cache_{kind}_{i}"] for kind in "kv" for i in range(2)} == {"float16"}
    assert decode.ret_struct_info.dtype == "float32"
    calls = [b.value for b in walk_bindings(decode.body) if hasattr(b.value, "op") and hasattr(b.value.op, "name")]
    head = calls[-1]
    assert head.op.name == "matmul" and head.args[0].struct_info.dtype == "float32"
    cos = next(c for c in calls if c.op.name == "cos")
    assert cos.struct_info.dtype == "float32"
    attention = [c for c in calls if c.op.name == "nn.attention"]
    assert attention and all(a.args[i].struct_info.dtype == "float16" for a in attention for i in range(3))
    # Weights met in float16 are converted once, at compile time, under a name of their own; the
    # norms read the float32 residual stream with float32 weights.
    constants = {a.name: a.data.dtype for c in calls for a in c.args if isinstance(a, Constant) and a.name}
    assert all(isinstance(c.args[1], Constant) and c.args[1].data.dtype == np.float16
               for c in calls[:-1] if c.op.name == "matmul")
    assert constants["model.layers.0.self_attn.q_proj.bias_f16"] == np.float16
    assert constants["model.norm.weight"] == np.float32
    norms = [c for c in calls if c.op.name == "nn.rms_norm"]
    assert {c.args[0].struct_info.dtype for c in norms} == {"float32"}
    # prefill and sample are functions of the same module: sample keeps reading float32 logits.
    assert mod["sample"].params[0].struct_info.dtype == "float32"


@pytest.mark.parametrize("variant", ["gqa-2x", "mha", "mqa", "qwen2-bias"])
def test_tiny_models_in_float16_decode_like_float32(variant):
    """Prefill of 5 tokens then 11 decode steps on llvmpipe: the float16 build's logits stay
    within 1e-2 of the float32 build's (logits of about 1 here) and the greedy tokens are equal."""
    model, config, weights = tiny_reference(variant)
    mod = nn.bind_weights(export_llm(LlamaForCausalLM(config), 32), weights)
    runs = {}
    for target in ("llvmpipe", "webgpu-f16"):
        exe = tessera.build(mod, target)
        vm = VirtualMachine(exe)
        prompt = np.array([5, 17, 3, 88, 41], np.int32)
        logits = [vm["prefill"](prompt, len(prompt))]
        tokens = [int(logits[-1][0].argmax())]
        for _ in range(11):
            logits.append(vm["decode"](np.array([tokens[-1]], np.int32), len(prompt) + len(tokens)))
            tokens.append(int(logits[-1][0].argmax()))
        runs[target] = (np.concatenate(logits), tokens, exe)
    (wide, wide_tokens, _), (half, half_tokens, exe) = runs["llvmpipe"], runs["webgpu-f16"]
    assert half.dtype == np.float32
    np.testing.assert_allclose(half, wide, atol=1e-2)
    assert half_tokens == wide_tokens
    state = [p for p in exe.functions["decode"]["params"] if p.get("state")]
    assert state and {p["sinfo"]["dtype"] for p in state} == {"float16"}


@pytest.fixture(scope="module")
def smollm2_f16_vm():
    model, weights = model_from_gguf(load_gguf(bundled_smollm2_path()))
    return VirtualMachine(tessera.build(nn.bind_weights(export_llm(model, 256), weights), "webgpu-f16"))


def test_smollm2_in_float16_keeps_transformers_logits_and_the_float32_tokens(reference, smollm2_f16_vm):
    """Issue 16's bar for the f16 build: on each test prompt its greedy tokens match the f32
    build's for at least 24 of 32 tokens (the first difference is where float16 rounding tips a
    near tie; every later token then continues another text), and its final-position logits are
    within 5e-2 of transformers' (float32). The f32 build's tokens are transformers' on these
    prompts (test_generation.py asserts it), which are taken here: they cost a second, not a
    minute of llvmpipe."""
    tokenizer, model, torch_ = reference
    report = []
    for prompt in PROMPTS:
        ids = prompt_ids(tokenizer, prompt)
        smollm2_f16_vm.reset_state()
        logits = smollm2_f16_vm["prefill"](ids, len(ids))[0]
        with torch_.no_grad():
            want = model(torch_.tensor(ids[None].astype(np.int64))).logits[0, -1].numpy()
        error = float(np.abs(logits - want).max())
        half, wide = greedy(smollm2_f16_vm, ids, 32), hf_greedy(model, torch_, ids, 32)
        same = next((i for i, (a, b) in enumerate(zip(half, wide)) if a != b), 32)
        report.append(f"{prompt!r:.40}: logits within {error:.4f}, tokens equal for {same}/32")
        assert error <= 5e-2, "\n".join(report)
        assert same >= 24, "\n".join(report)
    print("\n".join(report))
