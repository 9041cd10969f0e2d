"""Kernels in the text format: a module with call_tir kernels prints as a script that parses back
to a structurally equal module, and prints again to the same text."""

import random
import textwrap

import pytest
from tessera import arith, op
from tessera.ir import BlockBuilder, IRModule, ScriptError, Tensor, Var, assert_structural_equal, well_formed
from tessera.script import from_source
from tessera.tir.ir import (
    Assign,
    Barrier,
    Binary,
    Buffer,
    Builtin,
    Call,
    Cast,
    Const,
    Declare,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Select,
    Store,
    Unary,
)
from tessera.tir.script import print_prim_func

N = arith.Var("n")
LID, WID = Builtin("local_id", 0), Builtin("workgroup_id", 0)


def row_max() -> PrimFunc:
    """out[row] = max over the row of x * dequantized w, with a workgroup tree and a guarded store."""
    x = Buffer("x", "f16", (N, arith.IntImm(64)), storage_dtype="float16")
    w = Buffer("w", "u32", (arith.IntImm(64), arith.IntImm(8)), storage_dtype="uint32")
    out = Buffer("out", "f32", (N,), storage_dtype="float32")
    red = Buffer("red", "f32", (arith.IntImm(64),), "workgroup")
    row, k, s, acc = Local("row"), Local("k"), Local("s"), Local("acc", "f32")
    half = Binary(">>", Const(32), s, "i32")
    scale = Unary("f16_bits_to_f32", Binary("&", Load(w, k), Const(65535, "u32"), "u32"), "f32")
    product = Binary("*", Cast(Load(x, Binary("+", Binary("*", row, Const(64), "i32"), k, "i32")), "f32"), scale, "f32")
    body = (
        Declare(row, WID),
        Declare(acc, Const(0.0, "f32")),
        For(k, LID, Const(64), (Assign(acc, Binary("+", acc, product, "f32")),), step=64),
        Store(red, LID, acc),
        Barrier(),
        For(s, Const(0), Const(6), (
            IfThen(Binary("<", LID, half, "bool"),
                   (Store(red, LID, Binary("max", Load(red, LID), Load(red, Binary("+", LID, half, "i32")), "f32")),)),
            Barrier(),
        ), unroll=True),
        IfThen(Binary("&&", Binary("==", LID, Const(0), "bool"), Binary("<", row, Local("sym_n"), "bool"), "bool"),
               (Store(out, row, Select(Binary(">", Load(red, Const(0)), Const(0.0, "f32"), "bool"),
                                       Call("pow", (Load(red, Const(0)), Const(0.5, "f32")), "f32"),
                                       Unary("neg", Const(float("inf"), "f32"), "f32"), "f32")),),
               (Barrier("storage"),)),
    )
    return PrimFunc("row_max", (x, w), (out,), ("n",), body, (64, 1, 1), (N, arith.IntImm(1), arith.IntImm(1)),
                    scratch=(red,), attrs={"rule": "row-reduction", "inplace": {0: 0}, "wgsl_enable": ("subgroups",)})


ROW_MAX = '''\
@T.prim_func
def row_max(
    x: T.Input((n, 64), "f16"),
    w: T.Input((64, 8), "u32"),
    out: T.Output((n,), "f32"),
    n: T.i32,
):
    T.launch(grid=(n, 1, 1), workgroup_size=(64, 1, 1))
    T.func_attr({"rule": "row-reduction", "inplace": {0: 0}, "wgsl_enable": ("subgroups",)})
    red = T.alloc_buffer((64,), "f32", scope="workgroup")
    row: T.i32 = T.workgroup_id.x
    acc: T.f32 = 0.0
    for k in T.serial(T.local_id.x, 64, step=64):
        acc = acc + (T.cast(x[(row * 64) + k], "f32") * T.f16_bits_to_f32(w[k] & 65535, dtype="f32"))
    red[T.local_id.x] = acc
    T.barrier()
    for s in T.unroll(0, 6):
        if T.local_id.x < (32 >> s):
            red[T.local_id.x] = T.max(red[T.local_id.x], red[T.local_id.x + (32 >> s)])
        T.barrier()
    if (T.local_id.x == 0) and (row < sym_n):
        out[row] = T.select(red[0] > 0.0, T.pow(red[0], 0.5), -T.f32("inf"))
    else:
        T.barrier("storage")
'''


def module_with(kernel: PrimFunc) -> IRModule:
    x = Var("x", Tensor(("n", 64), "float16"))
    w = Var("w", Tensor((64, 8), "uint32"))
    bb = BlockBuilder()
    bb.add_func(kernel, kernel.name)
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(op.call_tir(kernel.name, [x, w], Tensor((N,), "float32"), tir_vars=[N]), "out")
        bb.emit_func_output(out)
    return bb.get()


def round_trip(mod: IRModule) -> IRModule:
    text = mod.script()
    parsed = from_source(text)
    assert_structural_equal(parsed, mod)
    assert parsed.script() == text
    return parsed


def test_a_kernel_prints_as_tir_script():
    func = row_max()
    assert print_prim_func(func) == ROW_MAX
    assert func.script() == ROW_MAX  # one printer: the kernel's own text is the one a module holds


def test_a_module_with_a_kernel_round_trips_and_call_tir_resolves_to_it():
    mod = module_with(row_max())
    text = mod.script()
    assert text == '''\
# from tessera.script import ir as I, relax as R, tir as T


@I.ir_module
class Module:
''' + textwrap.indent(ROW_MAX, "    ") + '''
    @R.function
    def main(x: R.Tensor(("n", 64), dtype="float16"), w: R.Tensor((64, 8), dtype="uint32")) -> R.Tensor(("n",), dtype="float32"):
        n = T.int64()
        with R.dataflow():
            out: R.Tensor((n,), dtype="float32") = R.call_tir(cls.row_max, (x, w), R.shape([n]), out_sinfo=R.Tensor((n,), dtype="float32"))
            R.output(out)
        return out
'''
    parsed = round_trip(mod)
    well_formed(parsed)
    call = parsed["main"].body.blocks[0].bindings[0].value
    assert isinstance(parsed[call.args[0].name], PrimFunc)


# Every node with every field: the plain spelling when the context says it all, the explicit one
# otherwise. Each case is the value of `v: T.<its dtype> = ...` in a kernel that has declared
# i: T.i32, u: T.u32, h: T.f16, f: T.f32, b: T.bool and an f32 buffer x.
i, u, h, f, b = Local("i"), Local("u", "u32"), Local("h", "f16"), Local("f", "f32"), Local("b", "bool")
X = Buffer("x", "f32", (N,), storage_dtype="float32")
EXPRESSIONS = [
    (Binary("*", h, Const(2.0, "f16"), "f16"), "h * 2.0"),  # a literal takes its operand's dtype
    (Binary("*", Const(2.0, "f16"), Const(0.5, "f16"), "f16"), "T.f16(2.0) * T.f16(0.5)"),
    (Binary("&", u, Const(255, "u32"), "u32"), "u & 255"),
    (Binary("<<", u, Const(3), "u32"), "u << T.i32(3)"),
    (Binary("+", i, Const(1), "u32"), 'T.binary("+", i, 1, dtype="u32")'),
    (Binary("||", b, Const(False, "bool"), "bool"), "b or False"),
    (Binary("min", f, Const(1), "f32"), "T.min(f, T.i32(1))"),
    (Const(1, "f32"), "1"),  # an int constant of dtype f32 stays an int
    (Const(-0.0, "f32"), "-0.0"),
    (Const(float("nan"), "f32"), 'T.f32("nan")'),
    (Const(True, "u32"), "True"),  # the declaration gives the dtype
    (Cast(Const(True, "u32"), "f32"), 'T.cast(T.u32(True), "f32")'),  # nothing gives it
    (Unary("neg", Const(1.5, "f32"), "f32"), "T.neg(1.5)"),  # -1.5 is a literal
    (Unary("neg", f, "f32"), "-f"),
    (Unary("not", b, "bool"), "(not b)"),
    (Unary("exp", h, "f16"), "T.exp(h)"),
    (Unary("select", f, "f32"), 'T.unary("select", f)'),  # a name the format uses
    (Unary("bitcast_u32", f, "u32"), 'T.bitcast_u32(f, dtype="u32")'),
    (Call("subgroup_add", (f,), "f32"), 'T.call("subgroup_add", f)'),  # one operand, yet a Call
    (Call("clamp", (f, Const(0.0, "f32"), Const(1.0, "f32")), "f32"), "T.clamp(f, 0.0, 1.0)"),
    (Cast(i, "f32"), 'T.cast(i, "f32")'),
    (Select(b, f, Const(0.0, "f32"), "f32"), "T.select(b, f, 0.0)"),
    (Local("sym_n"), "sym_n"),
    (Local("q", "f32"), 'T.var("q", "f32")'),  # never declared
    (Local("i", "u32"), 'T.var("i", "u32")'),  # declared with another dtype
    (Builtin("subgroup_size", 0), "T.subgroup_size"),
    (Builtin("local_id", 1, "u32"), 'T.builtin("local_id", 1, "u32")'),
    (Load(X, i, 4), "x.vec4[i]"),
    (Load(X, Const(0, "u32")), "x[T.u32(0)]"),
]


def kernel_around(*stmts, name: str = "k") -> PrimFunc:
    prelude = (Declare(i, Const(0)), Declare(u, Const(0, "u32")), Declare(h, Const(0.0, "f16")),
               Declare(f, Const(0.0, "f32")), Declare(b, Const(False, "bool")))
    return PrimFunc(name, (X,), (), ("n",), prelude + stmts, (1, 1, 1), (arith.IntImm(1),) * 3)


@pytest.mark.parametrize("expr, text", EXPRESSIONS, ids=[t for _, t in EXPRESSIONS])
def test_every_expression_reads_back_with_every_field(expr, text):
    func = kernel_around(Declare(Local("v", expr.dtype), expr))
    printed = print_prim_func(func)
    assert printed.splitlines()[-1] == f"    v: T.{expr.dtype} = {text}"
    assert_structural_equal(round_trip(IRModule({"k": func}))["k"], func)


STATEMENTS = [
    (Assign(Local("h", "f32"), f), 'T.assign(T.var("h", "f32"), f)'),
    (Declare(Local("in"), Const(0)), 'T.declare("in", "i32", 0)'),
    (For(Local("j", "u32"), Const(0, "u32"), Const(4, "u32"), (), step=2), 'for j in T.serial(0, 4, step=2, dtype="u32"):'),
    (IfThen(b, (), (Barrier(),)), "if b:"),
    (Store(X, i, Const(0.0, "f32x4"), 4), "x.vec4[i] = 0.0"),
]


@pytest.mark.parametrize("stmt, first_line", STATEMENTS, ids=[t for _, t in STATEMENTS])
def test_every_statement_reads_back_with_every_field(stmt, first_line):
    func = kernel_around(stmt)
    assert f"    {first_line}" in print_prim_func(func).splitlines()
    assert_structural_equal(round_trip(IRModule({"k": func}))["k"], func)


def test_buffers_and_names_carry_every_field():
    scratch = Buffer("tmp", "i32", (arith.IntImm(4),), "private", "int32")
    odd = Buffer("flags", "u32", (N * 2,), storage_dtype="bool")
    plain = Buffer("raw", "f32x4", (N,), scope="workgroup")
    func = PrimFunc("inner_name", (odd, plain), (), ("n",), (), (1, 1, 1), (N // 4, arith.IntImm(1), arith.IntImm(1)),
                    scratch=(scratch,), attrs={"rows": N * 4, "axes": [-1], "eps": 1e-05, "none": None})
    printed = print_prim_func(func, "module_name")
    assert printed == '''\
@T.prim_func(name="inner_name")
def module_name(
    flags: T.Input((n * 2,), "u32", storage="bool"),
    raw: T.Input((n,), "f32x4", scope="workgroup", storage=""),
    n: T.i32,
):
    T.launch(grid=(n // 4, 1, 1), workgroup_size=(1, 1, 1))
    T.func_attr({"rows": T.prim_expr("n * 4"), "axes": [-1], "eps": 1e-05, "none": None})
    tmp = T.alloc_buffer((4,), "i32", scope="private", storage="int32")
    pass
'''
    assert_structural_equal(round_trip(IRModule({"module_name": func}))["module_name"], func)


# -- any tree of nodes, however odd, reads back ------------------------------------------------------

ODD_VALUES = [0, 1, -1, 2**31 - 1, -2**31, 0.0, -0.0, 1.5, -2.25, 1e-300, 1e300, float("inf"), float("-inf"),
              float("nan"), True, False]
ODD_DTYPES = ["i32", "u32", "f32", "f16", "bool", "f32x4"]
BINARY_OPS = ["+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>", "<", "<=", ">", ">=", "==", "!=", "&&", "||",
              "min", "max", "pow?"]


class RandomKernel:
    """Random trees of every node type, with dtypes that often disagree with their context and names
    that collide with the format's own (a buffer called T, intrinsics called select or min)."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.buffers = [Buffer("x", "f32", (N,), storage_dtype="float32"),
                        Buffer("w", "u32", (N * 2,), storage_dtype="bool"),
                        Buffer("T", "f16", (arith.IntImm(4),), "workgroup")]
        self.names = {"sym_n": "i32"}

    def dtype(self, natural: str) -> str:
        return natural if self.r.random() < 0.75 else self.r.choice(ODD_DTYPES)

    def expr(self, depth: int):
        r, kind = self.r, self.r.randrange(10 if depth > 0 else 3)
        if kind == 0:
            return Const(r.choice(ODD_VALUES), r.choice(ODD_DTYPES))
        if kind == 1:
            name, dtype = r.choice(list(self.names.items()) + [("q", "f32"), ("in", "i32")])
            return Local(name, self.dtype(dtype))
        if kind == 2:
            kinds = ["local_id", "workgroup_id", "num_workgroups", "subgroup_size", "subgroup_invocation_id", "odd"]
            return Builtin(r.choice(kinds), r.randrange(4), self.dtype("i32"))
        if kind == 3:
            return Load(r.choice(self.buffers), self.expr(depth - 1), r.choice([1, 4]))
        a, b = self.expr(depth - 1), self.expr(depth - 1)
        if kind in (4, 5):
            op = r.choice(BINARY_OPS)
            logical = op in ("<", "<=", ">", ">=", "==", "!=", "&&", "||")
            return Binary(op, a, b, self.dtype("bool" if logical else a.dtype))
        if kind == 6:
            return Unary(r.choice(["neg", "not", "exp", "select", "f32", "an op", "Input"]), a, self.dtype(a.dtype))
        if kind == 7:
            args = [a, b, self.expr(depth - 1)][:r.randrange(4)]
            return Call(r.choice(["pow", "clamp", "subgroup_add", "min", "T", "call", "f16", "a b"]), tuple(args),
                        self.dtype(args[0].dtype if args else "i32"))
        if kind == 8:
            return Cast(a, r.choice(ODD_DTYPES))
        return Select(self.expr(depth - 1), a, b, self.dtype(a.dtype))

    def block(self, depth: int, count: int) -> tuple:
        r, out = self.r, []
        for _ in range(count):
            kind = r.randrange(6 if depth > 0 else 4)
            if kind == 0:
                var = Local(r.choice(["a", "acc", "in"]), r.choice(ODD_DTYPES))
                out.append(Declare(var, self.expr(3)))
                self.names[var.name] = var.dtype
            elif kind == 1:
                name, dtype = r.choice(list(self.names.items()))
                out.append(Assign(Local(name, self.dtype(dtype)), self.expr(3)))
            elif kind == 2:
                out.append(Store(r.choice(self.buffers), self.expr(2), self.expr(3), r.choice([1, 4])))
            elif kind == 3:
                out.append(Barrier(r.choice(["workgroup", "storage"])))
            elif kind == 4:
                then, otherwise = self.block(depth - 1, r.randrange(3)), self.block(depth - 1, r.randrange(3))
                out.append(IfThen(self.expr(2), then, otherwise))
            else:
                var, start, stop = Local(r.choice(["i", "j"]), self.dtype("i32")), self.expr(2), self.expr(2)
                self.names[var.name] = var.dtype
                body = self.block(depth - 1, r.randrange(3))
                out.append(For(var, start, stop, body, r.choice([1, 2, -1]), r.random() < 0.5))
        return tuple(out)

    def kernel(self) -> PrimFunc:
        x, w, scratch = self.buffers
        return PrimFunc("k", (x,), (w,), ("n",), self.block(3, 6), (64, 1, 1), (N, arith.IntImm(1), arith.IntImm(1)),
                        (scratch,), {"tuple": (1, [2.5, None], {"x": float("nan")}), "zero": -0.0})


@pytest.mark.parametrize("seeds", [range(0, 100), range(100, 200)])
def test_random_kernels_round_trip(seeds):
    for seed in seeds:
        func = RandomKernel(seed).kernel()
        assert_structural_equal(round_trip(IRModule({"k": func}))["k"], func)


# -- errors: the line, the column and the offending line quoted ------------------------------------

def kernel_text(*body: str) -> str:
    lines = ["@I.ir_module", "class Module:", "    @T.prim_func", "    def k(x: T.Input((n,), \"f32\"), n: T.i32):",
             "        T.launch(grid=(1, 1, 1), workgroup_size=(64, 1, 1))"]
    return "\n".join(lines + [f"        {line}" for line in body]) + "\n"


@pytest.mark.parametrize("body, message", [
    (["y[0] = 1.0"], r"^line 6, column 9: unknown buffer 'y' in `y\[0\] = 1.0`"),
    (["x[0] = acc"], r"^line 6, column 16: 'acc' is not declared in `x\[0\] = acc`"),
    (["acc = 1.0"], r"^line 6, column 9: 'acc' is not declared; declare it with `acc: T.i32 = ...`"),
    (["a: T.f128 = 0.0"], r"^line 6, column 12: a local's annotation is its dtype"),
    (["x[0] = T.cast(1, \"float32\")"], r"^line 6, column 26: unknown dtype 'float32'; kernel dtypes are f32"),
    (["if 0 < n < 4:", "    pass"], r"^line 6, column 12: compare two values at a time"),
    (["x[0] = n"], r"^line 6, column 16: 'n' is not declared"),  # the scalar is sym_n in the body
    (["a: T.i32 = 0", "T.func_attr({})"], r"^line 7, column 9: T.launch, T.func_attr and T.alloc_buffer come first in a kernel"),
    (["while True:", "    pass"], r"^line 6, column 9: unexpected statement in a kernel \(While\)"),
])
def test_kernel_errors_quote_the_line(body, message):
    with pytest.raises(ScriptError, match=message):
        from_source(kernel_text(*body))


def test_a_kernel_must_launch_first():
    text = kernel_text().replace("        T.launch(grid=(1, 1, 1), workgroup_size=(64, 1, 1))\n", "        pass\n")
    with pytest.raises(ScriptError, match=r"^line 5, column 9: a kernel starts with T.launch"):
        from_source(text)


def test_a_kernel_that_calls_micro_kernels_round_trips():
    """The cpu target's q8 GEMV: T.evaluate(T.call_extern(...)) with T.address_of spans."""
    from tessera.target import Target
    from tessera.transform import legalize_ops

    mod = legalize_ops(build_module(lambda x, w: op.quantized_matmul(x, w, format="q4_1", k=64, activations="q8"),
                                    [Tensor((1, 64), "float32"), Tensor((40, 10), "uint32")]), Target.preset("cpu"))
    text = round_trip(mod).script()
    assert 'T.evaluate(T.call_extern("void", "tsr_quantize_q8", T.address_of(in0, 0, 64), 64,' in text
    assert 'T.call_extern("f32", "tsr_dot_q4_1_q8", T.address_of(in1, col * 10, 10),' in text


def build_module(fn, params) -> IRModule:
    vars_ = [Var(name, p) for name, p in zip("xw", params)]
    bb = BlockBuilder()
    with bb.function("main", vars_):
        bb.emit_func_output(bb.emit(fn(*vars_)))
    return bb.get()
