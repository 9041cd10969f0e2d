"""split_oversized_weights: a weight over the binding limit is read in row chunks, and the build then
binds nothing over the limit (or names what it cannot fit). Small weights and a small limit stand in
for a 144 MiB embedding and WebGPU's 128 MiB (tests/models/test_large_vocabulary.py has the real size)."""

import numpy as np
import pytest
import tessera
from tessera import op
from tessera.ir import BindingLimitError, BlockBuilder, Constant, Tensor, Var, interpret
from tessera.target import Target
from tessera.transform.split_weights import row_chunks, split_oversized_weights
from tessera.vm import VirtualMachine

ROWS, K = 1000, 64
LIMIT = 40_000  # bytes: a (1000, 17) Q8_0 table (68,000 bytes) needs two chunks, a (1000, 64) f32 one seven


def small_bindings(limit: int = LIMIT) -> Target:
    base = Target.preset("llvmpipe")
    return Target(base.kind, base.features, dict(base.limits) | {"maxStorageBufferBindingSize": limit}, "small",
                  base.cpu_adapter)


def q8_0_table(rng) -> np.ndarray:
    blocks = np.empty((ROWS, K // 32, 34), np.uint8)
    blocks[:, :, :2] = rng.uniform(0.005, 0.02, (ROWS, K // 32)).astype(np.float16)[..., None].view(np.uint8)
    blocks[:, :, 2:] = rng.integers(-127, 128, (ROWS, K // 32, 32), dtype=np.int8).view(np.uint8)
    return blocks.reshape(ROWS, -1).view(np.uint32)


def module(reader: str):
    """main(ids (n,)): an embedding's gather from a large table, then a head over the same table."""
    rng = np.random.default_rng(0)
    ids = Var("ids", Tensor(("n",), "int32"))
    bb = BlockBuilder()
    with bb.function("main", [ids], attrs={"tir_var_upper_bound": {"n": 8}}):
        with bb.dataflow():
            if reader == "q8_0":
                table = Constant(q8_0_table(rng), name="embedding")
                x = bb.emit(op.quantized_take(table, ids, format="q8_0", k=K))
                y = bb.emit_output(op.quantized_matmul(x, table, format="q8_0", k=K), "y")
            elif reader == "transposed":  # a tied float head: x @ W^T
                table = Constant(rng.standard_normal((ROWS, K)).astype(np.float32), name="embedding")
                x = bb.emit(op.take(table, ids, axis=0))
                y = bb.emit_output(op.matmul(x, op.permute_dims(table)), "y")
            else:  # x @ W with W of (in, out): the head's columns
                table = Constant(rng.standard_normal((ROWS, K)).astype(np.float32), name="embedding")
                head = Constant(rng.standard_normal((K, ROWS)).astype(np.float32), name="head")
                x = bb.emit(op.take(table, ids, axis=0))
                y = bb.emit_output(op.matmul(x, head), "y")
        bb.emit_func_output(y)
    return bb.get()


IDS = np.array([0, 1, 999, 500, 142, 143, 857, 858], np.int32)


def test_row_chunks_are_near_equal_and_each_fits():
    assert row_chunks(1000, 68, 40_000) == [(0, 500), (500, 1000)]
    assert row_chunks(7, 10, 30) == [(0, 3), (3, 6), (6, 7)]
    assert row_chunks(151_936, 952, 128 << 20) == [(0, 75_968), (75_968, 151_936)]
    assert row_chunks(5, 100, 99) == []  # one row is over the limit: no chunking fits


@pytest.mark.parametrize("reader", ["q8_0", "transposed", "columns"])
def test_split_module_computes_what_the_whole_one_does(reader):
    mod = module(reader)
    split = split_oversized_weights(mod, LIMIT)
    big = [c for f in split.functions.values() for c in _constants(f) if c.data.nbytes > LIMIT]
    assert big == []
    np.testing.assert_allclose(interpret(split, "main", IDS), interpret(mod, "main", IDS), rtol=1e-5, atol=1e-4)
    exe = tessera.build(mod, small_bindings(), upper_bounds={"n": 8})
    assert max(a.nbytes for a in exe.constants.values()) <= LIMIT
    got = VirtualMachine(exe)["main"](IDS)
    np.testing.assert_allclose(got, interpret(mod, "main", IDS), rtol=1e-4, atol=1e-3)


def test_chunks_are_named_after_the_weight_and_shared_by_its_readers():
    exe = tessera.build(module("q8_0"), small_bindings(), upper_bounds={"n": 8})
    assert sorted(exe.constants) == ["embedding.rows0-500", "embedding.rows500-1000"]


def test_an_arena_storage_over_the_limit_is_named_before_anything_is_written():
    """The output (8 x 1000 float32, 32,000 bytes) is over a 30,000-byte limit; the weights are split."""
    with pytest.raises(BindingLimitError, match=r"arena storage holding .*\by\b.* of function main is 32000 bytes "
                                                r"\(0\.03052 MiB\), more than the target's maxStorageBufferBindingSize "
                                                r"30000"):
        tessera.build(module("q8_0"), small_bindings(30_000), upper_bounds={"n": 8})


def test_a_reader_that_cannot_read_in_chunks_is_named():
    x = Var("x", Tensor((ROWS, K), "float32"))
    table = Constant(np.ones((ROWS, K), np.float32), name="scale")
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(op.multiply(x, table), "y")
        bb.emit_func_output(y)
    with pytest.raises(BindingLimitError, match=r"weight scale is 256000 bytes, more than the target's "
                                                r"maxStorageBufferBindingSize 40000, and multiply in function main "
                                                r"reads it whole"):
        split_oversized_weights(bb.get(), LIMIT)


def _constants(func):
    from tessera.transform.rewrite import walk_bindings

    for binding in walk_bindings(func.body):
        value = binding.value
        for arg in getattr(value, "args", ()):
            if isinstance(arg, Constant):
                yield arg
            for inner in getattr(arg, "args", ()):
                if isinstance(inner, Constant):
                    yield inner
