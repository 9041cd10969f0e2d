"""SmolLM2 split across devices, small enough for `make test`: the form of test_gpu_layers.py's `long`
test (all 30 layers, split after 15 on WebGPU + WASM: about a minute of compiling a split, more of
llvmpipe's, left out of `make test`).

The tiny random-weight Llamas of test_gpu_layers.py split at every layer count in `make test`; what
they lack is SmolLM2 itself: its Q4_1 layers, its Q8_0 embedding tied to the head (so the table
lives on both devices: the embedding gather on the GPU, the head on the CPU), 576-wide hidden
states crossing devices, 49,152 logits. Here are SmolLM2's first two layers with its real weights
(the rest of the GGUF dropped), split two ways:

- after 0 layers on WebGPU (llvmpipe) + WASM, the long test's devices: only the embedding on the
  GPU, every other operation the all-WASM build's (q8 activations in decode), so every step's
  logits must equal that build's exactly;
- after 1 layer on OpenCL (PoCL) + the native CPU kernels: a decoder layer with its KV cache on each
  side. Prefill reads activations as they are on both devices (no q8 rounding), so its logits must
  equal the unsplit PoCL build's to float32 rounding, after a first chunk and after a second chunk
  that continues over the cache. (A decoder layer of SmolLM2's size on llvmpipe costs about a
  minute of Mesa's compile on 2 cores, cold: that stays in the long test.)
"""

import dataclasses

import numpy as np
import pytest
import tessera
from tessera import nn
from tessera.frontend import bundled_smollm2_path, load_gguf
from tessera.models import export_llm, model_from_gguf
from tessera.vm import VirtualMachine

LAYERS = 2
CONTEXT = 32
# SmolLM2's tokens for "The history of the printing press begins in the fifteenth century, when" cut
# to 14; ids, not text, so that no tokenizer is loaded.
PROMPT = np.array([504, 2365, 282, 260, 7116, 1915, 3359, 281, 260, 1761, 9658, 1147, 28, 1130], np.int32)
STEPS = 8


@pytest.fixture(scope="module")
def smollm2_first_layers():
    """(model, weights) of SmolLM2's first LAYERS decoder layers, its embedding, final norm and head."""
    gguf = load_gguf(bundled_smollm2_path())
    assert gguf.config.num_layers > LAYERS
    gguf.config = dataclasses.replace(gguf.config, num_layers=LAYERS)
    gguf.tensors = {name: t for name, t in gguf.tensors.items()
                    if not (name.startswith("blk.") and int(name.split(".")[1]) >= LAYERS)}
    model, weights = model_from_gguf(gguf)
    assert model.config.tie_word_embeddings and model.config.hidden_size == 576
    return model, weights


def build(smollm2, target, **export):
    model, weights = smollm2
    return tessera.build(nn.bind_weights(export_llm(model, CONTEXT, **export), weights), target)


def greedy_logits(vm) -> tuple[list[int], np.ndarray]:
    """Prefill PROMPT, then greedy decode: the tokens and the logits of every step."""
    logits = [vm["prefill"](PROMPT, len(PROMPT))[0]]
    tokens = [int(logits[-1].argmax())]
    while len(tokens) < STEPS:
        logits.append(vm["decode"](np.array([tokens[-1]], np.int32), len(PROMPT) + len(tokens))[0])
        tokens.append(int(logits[-1].argmax()))
    return tokens, np.array(logits)


def test_smollm2_split_after_0_layers_decodes_as_the_all_wasm_build(smollm2_first_layers):
    wasm_tokens, wasm_logits = greedy_logits(VirtualMachine(
        build(smollm2_first_layers, "wasm", quantized_activations="q8")))
    exe = build(smollm2_first_layers, "llvmpipe", gpu_layers=0)
    assert {k["device"] for k in exe.kernels} == {0, 1}
    # The tied table is read on both sides: gathered on the GPU, the head's GEMV on the CPU.
    assert set(exe.constant_devices["model.embed_tokens.weight"]) == {0, 1}
    vm = VirtualMachine(exe)
    tokens, logits = greedy_logits(vm)
    assert tokens == wasm_tokens
    np.testing.assert_array_equal(logits, wasm_logits)
    assert vm.copies == STEPS  # the hidden state, once a step


def test_smollm2_split_after_1_layer_prefills_as_the_unsplit_build(smollm2_first_layers):
    whole = VirtualMachine(build(smollm2_first_layers, "pocl"))
    exe = build(smollm2_first_layers, "pocl", gpu_layers=1, devices=("pocl", "cpu"))
    assert [d["target"]["backend"] for d in exe.devices] == ["opencl", "c-native"]
    split = VirtualMachine(exe)
    first, second = PROMPT[:9], PROMPT[9:]
    for chunk, total in ((first, len(first)), (second, len(PROMPT))):
        want = whole["prefill"](chunk, total)[0]
        got = split["prefill"](chunk, total)[0]
        assert want.shape == (49152,)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()),
                                   err_msg=f"prefill of {len(chunk)} tokens to {total}")
    assert split.copies == 2
