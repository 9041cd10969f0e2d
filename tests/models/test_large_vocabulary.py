"""Weights over a binding limit (issue 32): a 151,936-token vocabulary at hidden size 896 runs on llvmpipe
within WebGPU's default 128 MiB maxStorageBufferBindingSize, its embedding and tied head read in row
chunks, and its logits match the reference interpreter's on the unsplit module."""

import numpy as np
import pytest
import tessera
from large_vocabulary import CONFIG, CONTEXT, PROMPT, VOCAB, large_vocabulary_module
from tessera.ir import BindingLimitError, interpret
from tessera.target import Target
from tessera.vm import VirtualMachine

LIMIT = 128 << 20


@pytest.fixture(scope="module")
def module():
    return large_vocabulary_module()


@pytest.fixture(scope="module")
def exe(module):
    return tessera.build(module, "llvmpipe")


def caches():
    return [np.zeros((CONTEXT, CONFIG.num_kv_heads, CONFIG.head_dim), np.float32)
            for _ in range(2 * CONFIG.num_layers)]


def test_the_embedding_is_stored_in_row_chunks_that_each_fit_one_binding(exe):
    embedding = "model.embed_tokens.weight"
    assert embedding not in exe.constants
    chunks = sorted((name for name in exe.constants if name.startswith(embedding + ".rows")),
                    key=lambda name: int(name.rsplit("rows", 1)[1].split("-")[0]))
    assert len(chunks) == 2
    assert sum(exe.constants[name].shape[0] for name in chunks) == VOCAB
    assert all(exe.constants[name].nbytes <= LIMIT for name in chunks)
    assert exe.required_limits["maxStorageBufferBindingSize"] <= LIMIT
    assert exe.required_limits["maxStorageBufferBindingSize"] == max(a.nbytes for a in exe.constants.values())


def test_prefill_and_decode_match_the_interpreter_on_llvmpipe(module, exe):
    vm = VirtualMachine(exe)
    assert vm.device.kind == "webgpu"
    want_caches = caches()
    want = interpret(module, "prefill", PROMPT, len(PROMPT), *want_caches)
    got = vm["prefill"](PROMPT, len(PROMPT))
    assert got.shape == (1, VOCAB)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # The decode step gathers one row from the second chunk and scores every row of both.
    step = np.array([VOCAB - 2], np.int32)
    want = interpret(module, "decode", step, len(PROMPT) + 1, *want_caches)
    np.testing.assert_allclose(vm["decode"](step, len(PROMPT) + 1), want, rtol=1e-4, atol=1e-4)


def test_a_weight_no_chunking_can_fit_is_named_before_anything_is_written():
    """A binding limit smaller than one row of the embedding: the compiler names the weight and the limit."""
    small = Target("webgpu", limits={"maxStorageBufferBindingSize": 512}, name="tiny-bindings")
    with pytest.raises(BindingLimitError, match=r"weight model\.embed_tokens\.weight: one row of it is 952 bytes, "
                                                r"more than the target's maxStorageBufferBindingSize 512"):
        tessera.build(large_vocabulary_module(), small)
