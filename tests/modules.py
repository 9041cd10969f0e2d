"""A catalogue of modules used across the IR tests; every one must round-trip through text."""

from __future__ import annotations

import numpy as np
from tessera import op
from tessera.app.demo import build_attention
from tessera.arith import Var as SymVar
from tessera.ir import (
    BlockBuilder,
    Call,
    Constant,
    ExternFunc,
    FuncStructInfo,
    GlobalVar,
    IRModule,
    PrimStructInfo,
    PrimValue,
    StringImm,
    Tensor,
    TupleGetItem,
    TupleStructInfo,
    Var,
    VDevice,
)
from tessera.script import from_source

F32 = "float32"


def mlp_with_branch() -> IRModule:
    """Non-dataflow bindings, an If with bindings in one arm, tuples and tuple indexing."""
    x = Var("x", Tensor(("batch", 8), F32))
    w1 = Var("w1", Tensor((8, 16), F32))
    w2 = Var("w2", Tensor((16, 4), F32))
    bb = BlockBuilder()
    with bb.function("mlp", [x, w1, w2]):
        with bb.dataflow():
            h = bb.emit(op.nn.gelu(op.matmul(x, w1)), "h")
            logits = bb.emit_output(op.matmul(h, w2), "logits")
            parts = bb.emit_output(op.split(logits, indices_or_sections=2, axis=1), "parts")
        total = bb.emit(op.sum(logits), "total")
        positive = bb.emit(op.greater(total, Constant(np.float32(0.0))), "positive")
        with bb.branch() as arm:
            scaled = bb.emit(op.multiply(logits, Constant(np.float32(2.0))), "scaled")
            arm.result = op.nn.softmax(scaled)
        then = arm.seq
        with bb.branch() as arm:
            arm.result = op.negative(logits)
        out = bb.emit_if(positive, then, arm.seq, "out")
        first = bb.emit(TupleGetItem(parts, 0), "first")
        bb.emit_func_output((out, first))
    return bb.get()


def cross_level_calls() -> IRModule:
    """call_tir to a kernel-less name is still printable; call_dps_library; a symbolic tir var."""
    n = SymVar("n")
    x = Var("x", Tensor(("n", 4), F32))
    bb = BlockBuilder()
    with bb.function("dps", [x], attrs={"tir_var_upper_bound": {"n": 1024}}):
        with bb.dataflow():
            doubled = bb.emit(op.call_dps_library("tessera.test.double", [x], Tensor((n, 4), F32), tir_vars=[n]),
                              "doubled")
            shape = bb.emit_output(op.shape_of(doubled), "shape")
            out = bb.emit_output(op.reshape(doubled, [n * 2, 2]), "out")
        bb.emit_func_output((out, shape))
    return bb.get()


def everything_else() -> IRModule:
    """Constants of several dtypes, prim values, strings, packed calls, vdevices, impure functions."""
    bb = BlockBuilder()
    bb.set_global_infos("vdevice", [VDevice("webgpu", 0), VDevice("cpu", 0)])
    x = Var("x", Tensor(("n",), "int32", vdevice="webgpu:0"))
    k = Var("k", PrimStructInfo("int64", SymVar("k")))
    f = Var("f", FuncStructInfo((Tensor(("m",), F32),), Tensor(("m",), F32)))
    with bb.function("misc", [x, k, f], pure=False):
        c = bb.emit(op.add(x, Constant(np.array([1, -2, 3], np.int32)[:1])), "c")
        bb.emit(Constant(np.array([[1.5, float("inf")], [-0.0, 2e-9]], np.float16)), "half")
        bb.emit(Constant(np.zeros((2, 0), np.float32)), "empty")
        bb.emit(Constant(np.array([True, False])), "flags")
        bb.emit(PrimValue(SymVar("k") * 2 + 1), "odd")
        bb.emit(StringImm('quote " and newline \n'), "text")
        bb.emit(c, "alias")
        printed = bb.emit(op.call_pure_packed("vm.print", c, sinfo_args=Tensor(("n",), "int32")), "printed")
        impure = bb.emit(Call(ExternFunc("vm.builtin.log"), (printed,), (), (Tensor(ndim=1, dtype="int32"),)),
                         "logged")
        floats = bb.emit(op.astype(impure, dtype=F32), "floats")
        applied = bb.emit(Call(f, (floats,)), "applied")
        bb.emit(op.strided_slice(c, axes=[0], begin=[0], end=[SymVar("n") - 1]), "head")
        bb.emit(op.arange(start=0, end=SymVar("k"), step=1), "indices")
        bb.emit(op.zeros([SymVar("k"), 2], dtype="float16"), "zeros")
        bb.emit_func_output(applied)
    return bb.get()


def calls_between_functions() -> IRModule:
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32")) -> R.Tensor(("n", 4), dtype="float32"):
        n = T.int64()
        with R.dataflow():
            lv0: R.Tensor((n, 4), dtype="float32") = cls.helper(x)
            R.output(lv0)
        return lv0

    @R.function
    def helper(y: R.Tensor(("m", 4), dtype="float32")) -> R.Tensor(("m", 4), dtype="float32"):
        m = T.int64()
        return y
'''
    return from_source(text)


def tuple_params() -> IRModule:
    t = Var("t", TupleStructInfo((Tensor(("n",), F32), Tensor(("n", 2), F32))))
    bb = BlockBuilder()
    with bb.function("pick", [t]):
        a = bb.emit(TupleGetItem(t, 0), "a")
        b = bb.emit(TupleGetItem(t, 1), "b")
        bb.emit_func_output(op.add(op.expand_dims(a, axis=1), b))
    return bb.get()


def _global_call_module() -> IRModule:
    bb = BlockBuilder(calls_between_functions())
    x = Var("x", Tensor((3, 4), F32))
    with bb.function("static_caller", [x]):
        out = bb.emit(Call(GlobalVar("helper"), (x,)), "out")
        bb.emit_func_output(out)
    return bb.get()


CLOSURES = '''
@I.ir_module
class Module:
    @R.function
    def apply(f: R.Callable((R.Tensor(("m",), dtype="float32"),), R.Tensor(("m",), dtype="float32")), v: R.Tensor(("m",), dtype="float32")) -> R.Tensor(("m",), dtype="float32"):
        m = T.int64()
        out: R.Tensor((m,), dtype="float32") = f(v)
        return out

    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32"), w: R.Tensor((4,), dtype="float32")) -> R.Tensor(("n * 4",), dtype="float32"):
        n = T.int64()
        flat: R.Tensor((n * 4,), dtype="float32") = R.flatten(x)

        @R.function
        def scale(y: R.Tensor(("n * 4",), dtype="float32")) -> R.Tensor(("n", 4), dtype="float32"):
            n = T.int64()
            rows: R.Tensor((n, 4), dtype="float32") = R.reshape(y, R.shape([n, 4]))
            scaled: R.Tensor((n, 4), dtype="float32") = R.multiply(rows, w)
            return scaled

        @R.function
        def double(z: R.Tensor(("k",), dtype="float32")) -> R.Tensor(("k",), dtype="float32"):
            k = T.int64()
            twice: R.Tensor((k,), dtype="float32") = R.add(z, z)
            return twice

        lv0: R.Tensor((n, 4), dtype="float32") = scale(flat)
        lv1: R.Tensor((n * 4,), dtype="float32") = R.reshape(lv0, R.shape([n * 4]))
        lv2: R.Tensor((n * 4,), dtype="float32") = cls.apply(double, lv1)
        return lv2
'''


def closures() -> IRModule:
    """Nested functions: one captures a tensor (w) and a symbolic variable (n) that its parameter
    `(n * 4,)` does not define; one captures nothing and is passed to another function as a value."""
    return from_source(CLOSURES)


# A module split across two devices (docs/vdevice.md, docs/format.md "Devices"): exp((x + y) * z) - x,
# the product on WASM and the rest on WebGPU. The Python VM (tests/vm/test_split_execution.py), both
# loaders (tests/js/test_hostile_files_js.py) and Chromium (tests/browser/split.test.mjs) run it.
SPLIT_ACROSS_DEVICES = '''
@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("webgpu", 0), I.vdevice("wasm", 0)]})

    @R.function
    def main(x: R.Tensor((n, 8), "float32"), y: R.Tensor((n, 8), "float32"),
             z: R.Tensor((n, 8), "float32", vdevice="wasm")):
        R.func_attr({"tir_var_upper_bound": {"n": 16}})
        with R.dataflow():
            a = R.add(x, y)
            b = R.to_vdevice(a, "wasm:0")
            c = R.multiply(b, z)
            d = R.exp(c)
            e = R.to_vdevice(d, "webgpu:0")
            f = R.subtract(e, x)
            R.output(f)
        return f
'''


CATALOGUE = {
    "attention_demo": build_attention,
    "mlp_with_branch": mlp_with_branch,
    "cross_level_calls": cross_level_calls,
    "everything_else": everything_else,
    "calls_between_functions": calls_between_functions,
    "static_caller": _global_call_module,
    "tuple_params": tuple_params,
    "closures": closures,
}


# The Relax paper's examples as scripts (tests/ir/test_paper_examples.py explains each).

FIGURE_3 = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32")) -> R.Tensor(dtype="float32", ndim=1):
        n = T.int64()
        m = T.int64()
        with R.dataflow():
            lv0: R.Tensor((n, 4), dtype="float32") = R.exp(x)
            lv1: R.Tensor(dtype="float32", ndim=1) = R.unique(lv0)
            lv2: R.Tensor((m,), dtype="float32") = R.match_cast(lv1, R.Tensor((m,), dtype="float32"))
            lv3: R.Tensor((m,), dtype="float32") = R.exp(lv2)
            R.output(lv3)
        return lv3
'''

FIGURE_4 = '''
@I.ir_module
class Module:
    @R.function
    def subfn(s: R.Tensor(("k", 2, 2), dtype="float32")) -> R.Tensor(("k * 4",), dtype="float32"):
        k = T.int64()
        with R.dataflow():
            lv0: R.Tensor((k * 4,), dtype="float32") = R.reshape(s, R.shape([k * 4]))
            R.output(lv0)
        return lv0

    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32"), y: R.Tensor(("n", 2, 2), dtype="float32")) -> R.Tensor(("n * 4",), dtype="float32"):
        n = T.int64()
        with R.dataflow():
            lv0: R.Tensor((n, 4), dtype="float32") = R.exp(x)
            lv1: R.Tensor((n * 4,), dtype="float32") = R.flatten(lv0)
            lv2: R.Tensor((n * 4,), dtype="float32") = cls.subfn(y)
            lv3: R.Tensor(dtype="float32", ndim=1) = R.unique(lv1)
            gv: R.Tensor((n * 4,), dtype="float32") = R.add(lv1, lv2)
            R.output(gv)
        return gv
'''

# The paper's own Figure 4 binds the global function to a variable and calls it through that
# variable. The variable's annotation is a callable whose parameters define their own `k`.
FIGURE_4_CALLABLE = '''
@I.ir_module
class Module:
    @R.function
    def subfn(s: R.Tensor(("k", 2, 2), dtype="float32")) -> R.Tensor(("k * 4",), dtype="float32"):
        k = T.int64()
        with R.dataflow():
            lv0: R.Tensor((k * 4,), dtype="float32") = R.reshape(s, R.shape([k * 4]))
            R.output(lv0)
        return lv0

    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32"), y: R.Tensor(("n", 2, 2), dtype="float32")) -> R.Tensor(("n * 4",), dtype="float32"):
        n = T.int64()
        with R.dataflow():
            lv0: R.Tensor((n, 4), dtype="float32") = R.exp(x)
            lv1: R.Tensor((n * 4,), dtype="float32") = R.flatten(lv0)
            f0: R.Callable((R.Tensor((k, 2, 2), dtype="float32"),), R.Tensor((k * 4,), dtype="float32")) = cls.subfn
            lv2: R.Tensor((n * 4,), dtype="float32") = f0(y)
            lv3: R.Tensor(dtype="float32", ndim=1) = R.unique(lv1)
            gv: R.Tensor((n * 4,), dtype="float32") = R.add(lv1, lv2)
            R.output(gv)
        return gv
'''

SHAPE_EXAMPLE = '''
@I.ir_module
class Module:
    @R.function
    def shape_example(x: R.Tensor(("n", 2, 2), dtype="float32")) -> R.Tensor(dtype="float32", ndim=1):
        n = T.int64()
        m = T.int64()
        with R.dataflow():
            lv0: R.Tensor((n, 4), dtype="float32") = R.reshape(x, R.shape([n, 4]))
            lv1: R.Tensor((n * 4,), dtype="float32") = R.flatten(lv0)
            lv2: R.Shape([n * 4]) = R.shape_of(lv1)
            lv3: R.Tensor(dtype="float32", ndim=1) = R.call_pure_packed("myfunc", lv1, lv2, sinfo_args=R.Tensor(dtype="float32", ndim=1))
            lv4: R.Tensor((m,), dtype="float32") = R.match_cast(lv3, R.Tensor((m,), dtype="float32"))
            gv0: R.Tensor((m,), dtype="float32") = R.exp(lv4)
            R.output(gv0)
        return gv0
'''

PAPER_TEXTS = {"figure_3": FIGURE_3, "figure_4": FIGURE_4, "figure_4_callable": FIGURE_4_CALLABLE,
               "shape_example": SHAPE_EXAMPLE}

# The Relax paper's Figure 4 shape that a caller hands in: x reshaped to the shape s, whose variables a
# and b the function learns from s alone (tests/vm: passing an R.Shape from Python, and checking its count).
RESHAPE_TO_SHAPE_ARGUMENT = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", "m"), dtype="float32"), s: R.Shape(["a", "b"])) -> R.Tensor(("a", "b"), dtype="float32"):
        n = T.int64()
        m = T.int64()
        a = T.int64()
        b = T.int64()
        with R.dataflow():
            lv0: R.Tensor((a, b), dtype="float32") = R.reshape(x, s)
            gv: R.Tensor((a, b), dtype="float32") = R.exp(lv0)
            R.output(gv)
        return gv
'''
