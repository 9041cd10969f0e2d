"""fuse_ops_by_pattern: a match becomes one kernel (through fuse_tir) or one library call."""

import numpy as np
import pytest
import tessera
from tessera import op
from tessera.ir import BlockBuilder, Constant, Function, Tensor, Var, interpret, well_formed
from tessera.script import from_source
from tessera.target import Target
from tessera.transform import Pipeline, find_matches, fuse_ops_by_pattern, fuse_tir, legalize_ops
from tessera.transform.pattern import PatternError, is_const, is_op, wildcard
from tessera.vm import VirtualMachine

TARGET = Target.preset("llvmpipe")
X = Var("x", Tensor(("n", 16), "float32"))
W = Var("w", Tensor((16, 8), "float32"))
B = Var("b", Tensor((8,), "float32"))
DENSE = is_op("matmul")(wildcard("x"), wildcard("w")).optional(lambda mm: is_op("add")(mm, wildcard("bias")))
DENSE_RELU = is_op("nn.relu")(DENSE)


def module(build, params, outputs=1):
    bb = BlockBuilder()
    with bb.function("main", params, attrs={"tir_var_upper_bound": {"n": 64}}):
        with bb.dataflow():
            result = build(*params)
            outs = [bb.emit_output(r, f"out{i}") for i, r in enumerate(result if outputs > 1 else [result])]
        bb.emit_func_output(outs[0] if outputs == 1 else tuple(outs))
    return bb.get()


def dense_relu_twice(x, w, b):
    return op.multiply(op.nn.relu(op.add(op.matmul(x, w), b)), Constant(np.float32(2.0)))


def inputs(n=7, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 16)).astype(np.float32), rng.standard_normal((16, 8)).astype(np.float32),
            rng.standard_normal(8).astype(np.float32))


def launches(func: Function) -> list[str]:
    return [b.value.args[0].name for block in func.body.blocks for b in block.bindings
            if getattr(getattr(b.value, "op", None), "name", "") == "call_tir"]


def test_a_compiled_match_becomes_a_primitive_composite_function():
    mod = module(dense_relu_twice, [X, W, B])
    fused = fuse_ops_by_pattern(mod, [("dense_relu", DENSE_RELU)], TARGET)
    well_formed(fused)
    assert fused.script() == from_source('''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 16), dtype="float32"), w: R.Tensor((16, 8), dtype="float32"), b: R.Tensor((8,), dtype="float32")) -> R.Tensor(("n", 8), dtype="float32"):
        n = T.int64()
        R.func_attr({"tir_var_upper_bound": {"n": 64}})
        with R.dataflow():
            lv2: R.Tensor((n, 8), dtype="float32") = cls.fused_matmul_add_relu(x, w, b)
            out0: R.Tensor((n, 8), dtype="float32") = R.multiply(lv2, R.const(2.0, "float32"))
            R.output(out0)
        return out0

    @R.function
    def fused_matmul_add_relu(x: R.Tensor(("n", 16), dtype="float32"), w: R.Tensor((16, 8), dtype="float32"), b: R.Tensor((8,), dtype="float32")) -> R.Tensor(("n", 8), dtype="float32"):
        n = T.int64()
        R.func_attr({"Primitive": 1, "Composite": "dense_relu", "tir_var_upper_bound": {"n": 64}})
        with R.dataflow():
            lv0: R.Tensor((n, 8), dtype="float32") = R.matmul(x, w)
            lv1: R.Tensor((n, 8), dtype="float32") = R.add(lv0, b)
            lv2: R.Tensor((n, 8), dtype="float32") = R.nn.relu(lv1)
            R.output(lv2)
        return lv2
''').script()
    args = inputs()
    np.testing.assert_allclose(interpret(fused, "main", *args), interpret(mod, "main", *args), rtol=1e-6)
    # fuse_tir makes the group one kernel: two launches in all, the group's and the multiply's.
    lowered = legalize_ops(fuse_tir(fused, TARGET), TARGET)
    assert launches(lowered["main"]) == ["fused_matmul_add_relu1", "multiply"]


def pattern_pipeline(target, patterns):
    target = Target.preset(target) if isinstance(target, str) else target
    pipeline = Pipeline.default(target)
    pipeline.insert_before("fuse_ops", "fuse_ops_by_pattern", lambda m: fuse_ops_by_pattern(m, patterns, target))
    return pipeline


@pytest.mark.parametrize("target", ["webgpu", "wasm"])
def test_a_compiled_match_runs_as_one_kernel_in_the_vm(target):
    mod = module(dense_relu_twice, [X, W, B])
    exe = tessera.build(mod, target, pipeline=pattern_pipeline(target, [("dense_relu", DENSE_RELU)]))
    assert [k["name"] for k in exe.kernels] == ["fused_matmul_add_relu1", "multiply"]
    vm = VirtualMachine(exe, device="wasm" if target == "wasm" else "webgpu")
    for n in (1, 7, 64):
        x, w, b = inputs(n, seed=n)
        want = np.maximum(x.astype(np.float64) @ w + b, 0) * 2
        np.testing.assert_allclose(np.asarray(vm["main"](x, w, b)), want, rtol=1e-4, atol=1e-5)


def test_the_optional_part_may_be_absent_and_constants_become_parameters():
    scale = Constant(np.linspace(0.5, 1.5, 8, dtype=np.float32))
    mod = module(lambda x, w: op.nn.relu(op.multiply(op.matmul(x, w), scale)), [X, W])
    pattern = is_op("nn.relu")(is_op("multiply")(DENSE, is_const("scale")))
    fused = fuse_ops_by_pattern(mod, [("scaled", pattern)], TARGET)
    (name,) = [n for n, f in fused.functions.items() if isinstance(f, Function) and f.attr("Composite")]
    assert [p.name_hint for p in fused[name].params] == ["x", "w", "const2"]
    exe = tessera.build(mod, "wasm", pipeline=pattern_pipeline("wasm", [("scaled", pattern)]))
    assert [k["name"] for k in exe.kernels] == [name + "1"]
    x, w, _ = inputs(5)
    want = np.maximum((x.astype(np.float64) @ w) * scale.data, 0)
    np.testing.assert_allclose(np.asarray(VirtualMachine(exe, device="wasm")["main"](x, w)), want, rtol=1e-4, atol=1e-5)


def test_a_match_whose_intermediate_value_is_used_outside_it_is_rejected():
    mod = module(lambda x, w, b: (op.nn.relu(op.add(op.matmul(x, w), b)), op.matmul(x, w)), [X, W, B], 2)
    assert len(find_matches(mod["main"], [("dense_relu", DENSE_RELU)])) == 1  # the matmul in out1 is another
    shared = module(lambda x, w, b: _shared_matmul(x, w, b), [X, W, B], 2)
    (found,) = find_matches(shared["main"], [("dense_relu", DENSE_RELU), ("dense", DENSE)])
    # relu(add(mm, b)) and add(mm, b) cannot take mm, which exp(mm) reads too: only mm alone matches.
    assert found[0].name == "dense" and [b.value.op.name for b in found[1].members] == ["matmul"]
    fused = fuse_ops_by_pattern(shared, [("dense_relu", DENSE_RELU)], TARGET)
    assert fused.script() == shared.script()


def _shared_matmul(x, w, b):
    mm = op.matmul(x, w)
    return op.nn.relu(op.add(mm, b)), op.exp(mm)


def test_patterns_claim_in_order_and_a_check_can_refuse():
    mod = module(dense_relu_twice, [X, W, B])
    found = find_matches(mod["main"], [("dense", DENSE), ("dense_relu", DENSE_RELU)])
    assert [(fp.name, len(m.members)) for fp, m in found] == [("dense", 2)]
    refuse = ("dense_relu", DENSE_RELU, lambda m: m["w"].struct_info.shape[1].value > 8)
    assert find_matches(mod["main"], [refuse, ("dense", DENSE)])[0][0].name == "dense"


def test_a_library_match_becomes_call_dps_library():
    mod = module(dense_relu_twice, [X, W, B])
    offloaded = fuse_ops_by_pattern(mod, [("dense_relu", DENSE_RELU, None, "blas.dense_relu")], TARGET)
    well_formed(offloaded)
    assert 'lv2: R.Tensor((n, 8), dtype="float32") = R.call_dps_library("blas.dense_relu", (x, w, b), ' \
           'out_sinfo=R.Tensor((n, 8), dtype="float32"))' in offloaded.script()
    assert [n for n, f in offloaded.functions.items() if isinstance(f, Function)] == ["main"]
    calls = []

    def dense_relu(x, w, b, out):
        calls.append(out.shape)
        out[...] = np.maximum(x @ w + b, 0)

    args = inputs()
    got = interpret(offloaded, "main", *args, library={"blas.dense_relu": dense_relu})
    np.testing.assert_allclose(got, interpret(mod, "main", *args), rtol=1e-6)
    assert calls == [(7, 8)]


@pytest.mark.parametrize("target", ["llvmpipe", "wasm"])
def test_a_library_match_runs_in_the_vm_through_call_builtin(target):
    """The offload path end to end: the pass in the pipeline, the group a call_builtin, the library the
    user registers with the VM."""
    mod = module(dense_relu_twice, [X, W, B])
    pipeline = Pipeline.default(Target.preset(target), {"n": 64})
    pipeline.insert_before("fuse_ops", "fuse_ops_by_pattern", lambda m: fuse_ops_by_pattern(
        m, [("dense_relu", DENSE_RELU, None, "blas.dense_relu")], Target.preset(target)))
    exe = tessera.build(mod, target, {"n": 64}, pipeline=pipeline)
    assert exe.libraries == ["blas.dense_relu"]
    assert [op["name"] for op in exe.functions["main"]["code"] if op["op"] == "call_builtin"] == ["blas.dense_relu"]
    calls = []

    def dense_relu(x, w, b, out):
        calls.append(out.shape)
        out[...] = np.maximum(x @ w + b, 0)

    args = inputs()
    got = VirtualMachine(exe, libraries={"blas.dense_relu": dense_relu})["main"](*args)
    np.testing.assert_allclose(got, interpret(mod, "main", *args), rtol=1e-5, atol=1e-5)
    assert calls == [(7, 8)]


def test_a_library_receives_the_constants_the_group_reads():
    mod = module(lambda x: op.multiply(op.exp(x), Constant(np.float32(3.0))), [X])
    pattern = is_op("multiply")(is_op("exp")(wildcard()), is_const())
    offloaded = fuse_ops_by_pattern(mod, [("scaled_exp", pattern, None, "lib.scaled_exp")])
    x = inputs()[0]
    got = interpret(offloaded, "main", x, library={"lib.scaled_exp": lambda x, c, out: np.copyto(out, np.exp(x) * c)})
    np.testing.assert_allclose(got, np.exp(x) * 3, rtol=1e-6)


def test_a_group_fuse_tir_cannot_compile_is_refused_with_the_reason():
    g = Var("g", Tensor((16,), "float32"))
    mod = module(lambda x, g, w: op.matmul(op.nn.rms_norm(x, g), w), [X, g, W])
    norm_matmul = is_op("matmul")(is_op("nn.rms_norm")(wildcard(), wildcard()), wildcard())
    with pytest.raises(PatternError, match="pattern 'norm_matmul' matched .* R.nn.rms_norm is a row operator"):
        fuse_ops_by_pattern(mod, [("norm_matmul", norm_matmul)], TARGET)
    mod = module(lambda x, w: op.matmul(op.exp(x), w), [X, W])
    with pytest.raises(PatternError, match="R.matmul reads its operands from memory"):
        fuse_ops_by_pattern(mod, [("exp_matmul", is_op("matmul")(is_op("exp")(wildcard()), wildcard()))], TARGET)
    # The same group offloaded is fine: a library kernel may do what fuse_tir cannot.
    offloaded = fuse_ops_by_pattern(mod, [("exp_matmul", is_op("matmul")(is_op("exp")(wildcard()), wildcard()),
                                           None, "lib.exp_matmul")])
    x, w, _ = inputs()
    got = interpret(offloaded, "main", x, w, library={"lib.exp_matmul": lambda x, w, out: np.copyto(out, np.exp(x) @ w)})
    np.testing.assert_allclose(got, np.exp(x) @ w, rtol=1e-5)


def test_symbolic_values_the_parameters_cannot_bind_come_as_a_shape():
    x = Var("x", Tensor(("n * 2",), "float32"))
    y = Var("y", Tensor(("n",), "float32"))
    mod = module(lambda x, y: (op.exp(op.add(x, x)), y), [x, y], 2)
    fused = fuse_ops_by_pattern(mod, [("exp_add", is_op("exp")(is_op("add")(wildcard(), wildcard())))], TARGET)
    assert "cls.fused_add_exp(x, R.shape([n]))" in fused.script()
    lowered = legalize_ops(fuse_tir(fused, TARGET), TARGET)
    assert launches(lowered["main"]) == ["fused_add_exp1"]
