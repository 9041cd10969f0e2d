"""fuse_ops + fuse_tir: fewer launches, the same numbers on WebGPU."""

import numpy as np
import pytest
from llama_layer import build_layer, layer_inputs
from tessera import arith, op
from tessera.ir import BlockBuilder, Function, PrimStructInfo, Tensor, Var, interpret, print_sinfo, well_formed
from tessera.script import from_source
from tessera.target import Target
from tessera.transform import fuse_ops, fuse_tir, legalize_ops
from tessera.vm.kernel_runner import default_runner

TARGET = Target.preset("llvmpipe")


def launches(mod) -> int:
    return sum(1 for f in mod.functions.values() if isinstance(f, Function)
               for block in f.body.blocks for b in block.bindings
               if getattr(b.value, "op", None) is not None and getattr(b.value.op, "name", "") == "call_tir")


def lower(mod, fuse: bool):
    if fuse:
        mod = fuse_tir(fuse_ops(mod, TARGET), TARGET)
    return legalize_ops(mod, TARGET)


def test_fused_functions_take_symbolic_values_they_cannot_bind():
    """As in the Relax paper's Figure 5: shapes of (n * 2,) need n passed in."""
    x = Var("x", Tensor(("n * 2",), "float32"))
    y = Var("y", Tensor(("n",), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            out = bb.emit_output(op.exp(op.add(x, x)), "out")
        bb.emit_func_output((out, y))
    fused = fuse_ops(bb.get(), TARGET)
    (name,) = [n for n, f in fused.functions.items() if isinstance(f, Function) and f.attr("Primitive")]
    func = fused[name]
    assert name == "fused_add_exp"
    assert [print_sinfo(p.struct_info, signature=True) for p in func.params] == [
        'R.Tensor(("n * 2",), dtype="float32")', 'R.Shape(["n"])']
    assert "cls.fused_add_exp(x, R.shape([n]))" in fused.script()
    well_formed(fused)
    lowered = legalize_ops(fuse_tir(fused, TARGET), TARGET)
    assert launches(lowered) == 1
    xs, ys = np.linspace(-1, 1, 8, dtype=np.float32), np.zeros(4, np.float32)
    got, _ = interpret(lowered, "main", xs, ys, kernel_runner=default_runner())
    np.testing.assert_allclose(got, np.exp(xs + xs), rtol=1e-6)


def test_fused_functions_keep_the_bounds_their_shapes_were_deduced_under():
    """strided_slice(cache, end=[total]) on 32 rows is (total, 4) only because total <= 32: the fused
    function carries that bound (and no others), so that its printed text parses back."""
    total = arith.Var("total")
    cache = Var("cache", Tensor((32, 4), "float32"))
    bounds = {"tir_var_upper_bound": {"total": 32, "unused": 8}, "tir_var_lower_bound": {"total": 1}}
    bb = BlockBuilder()
    with bb.function("main", [cache, Var("t", PrimStructInfo("int64", total))], attrs=bounds):
        with bb.dataflow():
            out = bb.emit_output(op.exp(op.strided_slice(cache, axes=[0], begin=[0], end=[total])), "out")
        bb.emit_func_output(out)
    fused = fuse_ops(bb.get(), TARGET)
    assert fused["fused_strided_slice_exp"].attrs == (
        ("Primitive", 1), ("tir_var_upper_bound", {"total": 32}), ("tir_var_lower_bound", {"total": 1}))
    assert from_source(fused.script()).script() == fused.script()


def test_llama_layer_fusion_cuts_launches_by_at_least_40_percent():
    mod = build_layer()
    unfused, fused = launches(lower(mod, False)), launches(lower(mod, True))
    assert fused <= 0.6 * unfused, (fused, unfused)


@pytest.mark.parametrize("n", [1, 7, 64])
def test_fused_llama_layer_matches_the_interpreter_on_webgpu(n):
    mod = build_layer()
    fused = fuse_ops(mod, TARGET)
    well_formed(fused)
    lowered = legalize_ops(fuse_tir(fused, TARGET), TARGET)
    well_formed(lowered)
    args = layer_inputs(n)
    want = interpret(mod, "layer", *args)
    got = interpret(lowered, "layer", *args, kernel_runner=default_runner())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_matmul_epilogues_and_injective_prologues_are_one_kernel():
    x = Var("x", Tensor(("n", 8), "float32"))
    w = Var("w", Tensor((8, 16), "float32"))
    b = Var("b", Tensor((16,), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            y = op.nn.silu(op.add(op.matmul(x, w), b))          # matmul + bias + silu: one kernel
            z = bb.emit_output(op.sum(op.exp(y), axis=[1]), "z")  # exp computed inside the sum: one kernel
        bb.emit_func_output(z)
    mod = bb.get()
    lowered = lower(mod, True)
    assert launches(lowered) == 2
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(5, 8), (8, 16), (16,)]]
    np.testing.assert_allclose(interpret(lowered, "main", *args, kernel_runner=default_runner()),
                               interpret(mod, "main", *args), rtol=1e-4)


def _two_layers_alike(bb_inputs):
    """Identical layers, h = exp(h + w) @ w, one per weight variable, all of one shape."""
    bb = BlockBuilder()
    with bb.function("main", bb_inputs):
        with bb.dataflow():
            h = bb_inputs[0]
            for w in bb_inputs[1:]:
                h = bb.emit(op.exp(op.add(h, w)))
                h = bb.emit(op.matmul(h, w))
            out = bb.emit_output(h, "out")
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("fuse", [False, True])
def test_alike_calls_are_scheduled_once(monkeypatch, fuse):
    """Calls alike but for their variables (one per decoder layer) share one scheduled kernel: the
    schedule rule runs once per distinct call, and the module is the one scheduling each would give."""
    import tessera.transform.legalize as legalize

    inputs = [Var(name, Tensor((4, 4), "float32")) for name in ("x", "w1", "w2", "w3", "w4")]
    mod = _two_layers_alike(inputs)
    calls = []
    real = legalize.schedule

    def counting(defn, target, name):
        calls.append(name)
        return real(defn, target, name)

    monkeypatch.setattr(legalize, "schedule", counting)
    lowered = lower(mod, fuse)
    kernels = [f for f in lowered.functions.values() if not isinstance(f, Function)]
    # Fused: exp(x + w1), then exp(h @ w + w') three times (one kernel), then the last matmul.
    assert len(calls) == len(kernels) == 3
    assert launches(lowered) == (5 if fuse else 12)
    rng = np.random.default_rng(0)
    values = [rng.uniform(-0.5, 0.5, (4, 4)).astype(np.float32) for _ in inputs]
    expected = values[0]
    for w in values[1:]:
        expected = np.exp(expected + w) @ w
    got = interpret(lowered, "main", *values, kernel_runner=default_runner())
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_call_signatures_tell_apart_what_prints_alike():
    from tessera.ir.expr import Call, Constant
    from tessera.transform.legalize import call_signature

    x, y = Var("x", Tensor((4,), "float32")), Var("y", Tensor((4,), "float32"))
    add = op.add(x, y)

    def by_sinfo(var):
        return var.struct_info

    def with_attrs(call, attrs):
        return Call(call.op, call.args, attrs, call.sinfo_args, call.struct_info)

    assert call_signature(add, by_sinfo) == call_signature(op.add(y, x), by_sinfo)
    assert call_signature(with_attrs(add, (("a", 1),)), by_sinfo) != call_signature(with_attrs(add, (("a", 1.0),)),
                                                                                    by_sinfo)
    assert call_signature(with_attrs(add, (("a", 0.0),)), by_sinfo) != call_signature(
        with_attrs(add, (("a", -0.0),)), by_sinfo)
    one, two = Constant(np.float32(1)), Constant(np.float32(2))  # scalars are written into fused kernels
    assert call_signature(op.add(x, one), by_sinfo) != call_signature(op.add(x, two), by_sinfo)
    assert call_signature(add, {x: "param 0"}.get) is None  # y, outside a fused group: not shared


def test_a_gathers_computed_indices_read_a_computed_table():
    """take(exp(data), idx + 1) fused: the read of exp's value is at indices that read the group's
    other member, which resolve in the take's terms (ONNX's GatherElements, its losses)."""
    from tessera.ir.expr import Constant

    data = Var("data", Tensor((6,), "float32"))
    idx = Var("idx", Tensor((2, 2), "int64"))
    bb = BlockBuilder()
    with bb.function("main", [data, idx]):
        with bb.dataflow():
            y = bb.emit_output(op.take(op.exp(data), op.add(idx, Constant(np.int64(1)))), "y")
        bb.emit_func_output(y)
    mod = bb.get()
    lowered = lower(mod, True)
    assert launches(lowered) == 1
    args = [np.linspace(-1, 1, 6).astype(np.float32), np.array([[0, 4], [2, 1]], np.int64)]
    np.testing.assert_allclose(interpret(lowered, "main", *args, kernel_runner=default_runner()),
                               interpret(mod, "main", *args), rtol=1e-5)


def test_a_matmul_rounded_to_integers_accumulates_in_float():
    """astype(matmul(a, b), int32) fused: the sum runs in the matmul's float32, and only the result is
    rounded (QLinearMatMul's last step); an int32 accumulator truncated every product."""
    a, b = Var("a", Tensor((2, 4), "float32")), Var("b", Tensor((4, 3), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [a, b]):
        with bb.dataflow():
            y = bb.emit_output(op.astype(op.matmul(a, b), dtype="int32"), "y")
        bb.emit_func_output(y)
    mod = bb.get()
    lowered = lower(mod, True)
    assert launches(lowered) == 1
    args = [np.full((2, 4), 0.3, np.float32), np.ones((4, 3), np.float32)]
    np.testing.assert_array_equal(interpret(lowered, "main", *args, kernel_runner=default_runner()),
                                  np.full((2, 3), 1, np.int32))
