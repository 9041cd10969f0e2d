"""A Llama with every block format the loader reads (tests/models/test_kquants.py's tiny random one)
built for the cpu target with decode's GEMVs on q8 activations: each format's decode GEMV takes the
integer micro-kernel rule (codegen/c/microkernels.c, microkernels_kquant.c), and the decode logits
equal transformers' on the same GGUF file, within what rounding x to 8 bits moves them."""

import numpy as np
import tessera
from fixtures.quantized_blocks import GGML_TYPES
from tessera import nn
from tessera.frontend import load_gguf
from tessera.models import export_llm, model_from_gguf
from tessera.vm import VirtualMachine
from test_kquants import LAYER_FORMATS, transformers_logits, write_kquant_llama


def test_decode_of_every_format_through_the_integer_micro_kernels(tmp_path):
    path = write_kquant_llama(str(tmp_path / "kquants.gguf"))
    model, weights = model_from_gguf(load_gguf(path))
    assert {f for layer in LAYER_FORMATS for f in layer.values()} == set(GGML_TYPES)
    mod = nn.bind_weights(export_llm(model, 32, quantized_activations="q8"), weights)
    decode = [dict(call.attrs) for call in _quantized_matmuls(mod["decode"])]
    assert {call["format"] for call in decode} == set(GGML_TYPES)
    assert all(call["activations"] == "q8" for call in decode)
    executable = tessera.build(mod, "cpu")
    # Decode's 15 GEMVs (7 projections of each of 2 layers, all formats, and the Q6_K head).
    rules = [kernel["rule"] for kernel in executable.kernels]
    assert rules.count("quantized-gemv-q8") == 15, rules
    vm = VirtualMachine(executable)
    ids = np.array([5, 17, 3, 288, 41, 2, 60, 199, 7], np.int32)
    want = transformers_logits(path, ids)
    vm["prefill"](ids[:-1], len(ids) - 1)
    got = vm["decode"](ids[-1:], len(ids))[0]
    scale = np.abs(want[-1]).max()
    error = np.abs(got - want[-1]).max()
    # Rounding x to 8 bits moves these logits by about 0.9% of the largest; Q6_K's offset off by one
    # in a quarter of its values (a wrong bit) moves them by 4%.
    assert error < 0.02 * scale, (error, scale)
    assert got.argmax() == want[-1].argmax()


def _quantized_matmuls(func):
    for block in func.body.blocks:
        for binding in block.bindings:
            if getattr(getattr(binding.value, "op", None), "name", "") == "quantized_matmul":
                yield binding.value
