"""tir -> tir lowering (tessera.tir.lower): each pass shown on a small kernel before and after, as
printed tir, then run through the WebGPU and WASM runners (which lower as a backend does) against numpy."""

import numpy as np
import pytest
from tessera import arith
from tessera.codegen import c, wgsl
from tessera.ir.struct_info import TensorStructInfo
from tessera.tir.ir import (
    Barrier,
    Buffer,
    Builtin,
    Const,
    Declare,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Store,
    binary,
    from_prim,
    select,
)
from tessera.tir.lower import (
    LoweringNeeds,
    element_bytes,
    host_dtype,
    legalize_storage,
    lower_kernel,
    split_workgroups,
    unroll_loops,
)
from tessera.tir.verify import verify_kernel
from tessera.transform.plan_memory import device_bytes

LID, WID = Builtin("local_id", 0), Builtin("workgroup_id", 0)
ONE = arith.IntImm(1)
WORDS = {"float32", "int32", "uint32"}  # a language whose buffers hold 32-bit words only


@pytest.fixture(scope="module")
def webgpu():
    from tessera.vm.kernel_runner import default_runner

    return default_runner()


@pytest.fixture(scope="module")
def wasm():
    from tessera.vm.wasm_runner import WasmKernelRunner

    return WasmKernelRunner()


def text(func: PrimFunc) -> str:
    return func.script().strip()


# -- legalize_storage ------------------------------------------------------------------------------


def where_positive() -> PrimFunc:
    """y = where(mask, x, 0) and positive = x > 0, for a bool mask and int64 x and y."""
    n = arith.Var("n")
    mask, positive = Buffer("mask", "bool", (n,), "global", "bool"), Buffer("positive", "bool", (n,), "global", "bool")
    x, y = Buffer("x", "i32", (n,), "global", "int64"), Buffer("y", "i32", (n,), "global", "int64")
    tid = Local("tid")
    body = (Declare(tid, WID * 64 + LID),
            IfThen(tid < from_prim(n), (Store(y, tid, select(Load(mask, tid), Load(x, tid), Const(0))),
                                        Store(positive, tid, binary(">", Load(x, tid), Const(0))))))
    return PrimFunc("where_positive", (mask, x), (y, positive), ("n",), body, (64, 1, 1),
                    (arith.simplify((n + 63) // 64), ONE, ONE))


def test_bool_and_int64_tensors_become_words():
    before = where_positive()
    assert text(before) == """\
@T.prim_func
def where_positive(
    mask: T.Input((n,), "bool"),
    x: T.Input((n,), "i32", storage="int64"),
    y: T.Output((n,), "i32", storage="int64"),
    positive: T.Output((n,), "bool"),
    n: T.i32,
):
    T.launch(grid=((n + 63) // 64, 1, 1), workgroup_size=(64, 1, 1))
    tid: T.i32 = (T.workgroup_id.x * 64) + T.local_id.x
    if tid < sym_n:
        y[tid] = T.select(mask[tid], x[tid], 0)
        positive[tid] = x[tid] > 0"""
    after = legalize_storage(before, WORDS)
    # bool: one u32 word, 0 or 1. int64: two i32 words, the low word (the value) and then its sign.
    assert text(after) == """\
@T.prim_func
def where_positive(
    mask: T.Input((n,), "u32"),
    x: T.Input((n, 2), "i32"),
    y: T.Output((n, 2), "i32"),
    positive: T.Output((n,), "u32"),
    n: T.i32,
):
    T.launch(grid=((n + 63) // 64, 1, 1), workgroup_size=(64, 1, 1))
    tid: T.i32 = (T.workgroup_id.x * 64) + T.local_id.x
    if tid < sym_n:
        y_value: T.i32 = T.select(mask[tid] != 0, x[tid * 2], 0)
        y[tid * 2] = y_value
        y[(tid * 2) + 1] = T.select(y_value < 0, -1, 0)
        positive[tid] = T.select(x[tid * 2] > 0, T.u32(1), T.u32(0))"""
    assert [b.storage_dtype for b in after.params] == ["uint32", "int32", "int32", "uint32"]
    verify_kernel(after, {"n": 7})


def test_what_the_target_holds_is_left_alone_and_what_it_cannot_is_an_error():
    before = where_positive()
    assert legalize_storage(before, WORDS | {"bool", "int64"}) is before
    double = Buffer("h", "f64", (ONE,), "global", "float64")
    kernel = PrimFunc("copy", (double,), (double,), (), (), (1, 1, 1), (ONE, ONE, ONE))
    with pytest.raises(NotImplementedError, match="h holds float64 tensors, which the target cannot store"):
        legalize_storage(kernel, wgsl.LOWERING.storage_types)


def test_vector_access_to_bool_words():
    mask = Buffer("mask", "bool", (arith.IntImm(8),), "global", "bool")
    out = Buffer("out", "bool", (arith.IntImm(8),), "global", "bool")
    body = (Store(out, LID, Load(mask, LID, 4), 4),)
    after = legalize_storage(PrimFunc("copy4", (mask,), (out,), (), body, (2, 1, 1), (ONE, ONE, ONE)), WORDS)
    (store,) = after.body
    assert (store.value.dtype, store.value.cond.dtype, store.value.cond.a.dtype) == ("u32x4", "boolx4", "u32x4")
    assert ('out.vec4[T.local_id.x] = T.select(T.binary("!=", mask.vec4[T.local_id.x], 0, dtype="boolx4"), '
            'T.u32x4(1), T.u32x4(0))') in text(after)


@pytest.mark.parametrize("size", [1, 7, 64, 1000])
def test_bool_and_int64_kernel_computes_like_numpy(webgpu, wasm, size):
    rng = np.random.default_rng(size)
    mask = rng.random(size) > 0.5
    x = rng.integers(-1000, 1000, size).astype(np.int64)
    for runner in (webgpu, wasm):
        y, positive = runner.run(where_positive(), [mask, x], {"n": size})
        assert y.dtype == np.int64 and positive.dtype == np.bool_
        np.testing.assert_array_equal(y, np.where(mask, x, 0))
        np.testing.assert_array_equal(positive, x > 0)


def test_device_sizes_and_host_layout_come_from_the_storage_rule():
    n = arith.Var("n")
    assert (element_bytes("bool"), element_bytes("int64"), element_bytes("float16")) == (4, 8, 2)
    assert (host_dtype("bool"), host_dtype("int64"), host_dtype("float32")) == ("uint32", "int64", "float32")
    assert arith.to_source(device_bytes(TensorStructInfo((n,), "bool"))) == "n * 4"


# -- unroll_loops ----------------------------------------------------------------------------------


def scale() -> PrimFunc:
    x = Buffer("x", "f32", (arith.IntImm(16),), "global", "float32")
    y = Buffer("y", "f32", (arith.IntImm(16),), "global", "float32")
    j, v = Local("j"), Local("v", "f32")
    index = binary("+", binary("*", LID, Const(4)), j)
    body = (For(j, Const(0), Const(4), (Declare(v, Load(x, index)), Store(y, index, binary("*", v, Const(2.0, "f32")))),
                unroll=True),)
    return PrimFunc("scale", (x,), (y,), (), body, (4, 1, 1), (ONE, ONE, ONE))


def test_an_unrolled_loop_becomes_one_copy_of_its_body_per_iteration():
    before = scale()
    assert text(before) == """\
@T.prim_func
def scale(
    x: T.Input((16,), "f32"),
    y: T.Output((16,), "f32"),
):
    T.launch(grid=(1, 1, 1), workgroup_size=(4, 1, 1))
    for j in T.unroll(0, 4):
        v: T.f32 = x[(T.local_id.x * 4) + j]
        y[(T.local_id.x * 4) + j] = v * 2.0"""
    # The loop variable is a constant in each copy; each copy declares its own v.
    assert text(unroll_loops(before)) == """\
@T.prim_func
def scale(
    x: T.Input((16,), "f32"),
    y: T.Output((16,), "f32"),
):
    T.launch(grid=(1, 1, 1), workgroup_size=(4, 1, 1))
    v_0: T.f32 = x[T.local_id.x * 4]
    y[T.local_id.x * 4] = v_0 * 2.0
    v_1: T.f32 = x[(T.local_id.x * 4) + 1]
    y[(T.local_id.x * 4) + 1] = v_1 * 2.0
    v_2: T.f32 = x[(T.local_id.x * 4) + 2]
    y[(T.local_id.x * 4) + 2] = v_2 * 2.0
    v_3: T.f32 = x[(T.local_id.x * 4) + 3]
    y[(T.local_id.x * 4) + 3] = v_3 * 2.0"""


def test_loops_with_symbolic_bounds_or_many_iterations_stay_loops():
    x = Buffer("x", "f32", (arith.Var("n"),), "global", "float32")
    i = Local("i")
    for stop in (from_prim(arith.Var("n")), Const(65)):
        loop = For(i, Const(0), stop, (Store(x, i, Const(0.0, "f32")),), unroll=True)
        kernel = PrimFunc("zero", (), (x,), ("n",), (loop,), (1, 1, 1), (ONE, ONE, ONE))
        assert text(unroll_loops(kernel)) == text(kernel)


def test_unrolled_kernel_computes_like_numpy(webgpu, wasm):
    x = np.arange(16, dtype=np.float32) - 5
    for runner in (webgpu, wasm):
        (y,) = runner.run(scale(), [x], {})
        np.testing.assert_array_equal(y, 2 * x)


# -- split_workgroups ------------------------------------------------------------------------------


def row_sum() -> PrimFunc:
    """Each row of 4 summed by a tree in workgroup memory: y = sum(row) - x + x * x, where x (a local)
    and x * x (in private memory) live across the barriers."""
    rows = arith.Var("rows")
    x = Buffer("x", "f32", (rows, arith.IntImm(4)), "global", "float32")
    y = Buffer("y", "f32", (rows, arith.IntImm(4)), "global", "float32")
    red = Buffer("red", "f32", (arith.IntImm(4),), "workgroup")
    pair = Buffer("pair", "f32", (arith.IntImm(2),), "private")
    mine, s, half = Local("mine", "f32"), Local("s"), Local("half")
    at = binary("+", binary("*", WID, Const(4)), LID)
    body = (Declare(mine, Load(x, at)),
            Store(pair, Const(1), binary("*", mine, mine)),
            Store(red, LID, mine),
            Barrier(),
            For(s, Const(1), Const(3), (
                Declare(half, binary("/", Const(4), binary("*", s, Const(2)))),
                IfThen(binary("<", LID, half),
                       (Store(red, LID, binary("+", Load(red, LID), Load(red, binary("+", LID, half)))),)),
                Barrier())),
            Store(y, at, binary("+", binary("-", Load(red, Const(0)), mine), Load(pair, Const(1)))))
    return PrimFunc("row_sum", (x,), (y,), ("rows",), body, (4, 1, 1), (rows, ONE, ONE), scratch=(red, pair))


def test_a_workgroup_becomes_thread_loops_between_its_barriers():
    before = row_sum()
    assert text(before) == """\
@T.prim_func
def row_sum(
    x: T.Input((rows, 4), "f32"),
    y: T.Output((rows, 4), "f32"),
    rows: T.i32,
):
    T.launch(grid=(rows, 1, 1), workgroup_size=(4, 1, 1))
    red = T.alloc_buffer((4,), "f32", scope="workgroup")
    pair = T.alloc_buffer((2,), "f32", scope="private")
    mine: T.f32 = x[(T.workgroup_id.x * 4) + T.local_id.x]
    pair[1] = mine * mine
    red[T.local_id.x] = mine
    T.barrier()
    for s in T.serial(1, 3):
        half: T.i32 = 4 / (s * 2)
        if T.local_id.x < half:
            red[T.local_id.x] = red[T.local_id.x] + red[T.local_id.x + half]
        T.barrier()
    y[(T.workgroup_id.x * 4) + T.local_id.x] = (red[0] - mine) + pair[1]"""
    # The uniform loop that holds a barrier stays at the workgroup level; each stretch between
    # barriers is a loop over the threads. mine, read after a barrier, gets a slot per thread, and
    # so does pair; half lives within one thread loop and stays a local. local_id.x is `lid % 4`,
    # the x coordinate of the flat thread index.
    assert text(split_workgroups(before)) == """\
@T.prim_func
def row_sum(
    x: T.Input((rows, 4), "f32"),
    y: T.Output((rows, 4), "f32"),
    rows: T.i32,
):
    T.launch(grid=(rows, 1, 1), workgroup_size=(4, 1, 1))
    mine = T.alloc_buffer((4,), "f32", scope="workgroup")
    red = T.alloc_buffer((4,), "f32", scope="workgroup")
    pair = T.alloc_buffer((8,), "f32", scope="workgroup")
    for lid in T.threads(4):
        mine[lid] = x[(T.workgroup_id.x * 4) + (lid % 4)]
        pair[(lid * 2) + 1] = mine[lid] * mine[lid]
        red[lid % 4] = mine[lid]
    for s in T.serial(1, 3):
        for lid in T.threads(4):
            half: T.i32 = 4 / (s * 2)
            if (lid % 4) < half:
                red[lid % 4] = red[lid % 4] + red[(lid % 4) + half]
    for lid in T.threads(4):
        y[(T.workgroup_id.x * 4) + (lid % 4)] = (red[0] - mine[lid]) + pair[(lid * 2) + 1]"""


def test_uniform_control_flow_reads_thread_0s_copy_and_never_the_thread_index():
    out = Buffer("out", "i32", (ONE,), "global", "int32")
    count, i = Local("count"), Local("i")
    body = (Declare(count, Const(3)), Barrier(), For(i, Const(0), count, (Barrier(),)), Store(out, Const(0), count))
    kernel = PrimFunc("uniform", (), (out,), (), body, (2, 1, 1), (ONE, ONE, ONE))
    assert "    for i in T.serial(0, count[0]):" in text(split_workgroups(kernel))
    divergent = PrimFunc("divergent", (), (out,), (), (For(i, Const(0), LID, (Barrier(),)),), (2, 1, 1),
                         (ONE, ONE, ONE))
    with pytest.raises(ValueError, match="local_id decides control flow around a barrier"):
        split_workgroups(divergent)


@pytest.mark.parametrize("rows", [1, 7, 64])
def test_split_kernel_computes_like_numpy(webgpu, wasm, rows):
    x = np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32)
    verify_kernel(row_sum(), {"rows": rows})
    want = x.sum(axis=1, keepdims=True) - x + x * x
    for runner in (webgpu, wasm):
        (y,) = runner.run(row_sum(), [x], {"rows": rows})
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


# -- lower_kernel and the renderers ----------------------------------------------------------------


def test_each_language_declares_what_it_needs():
    assert wgsl.LOWERING == LoweringNeeds({"float32", "float16", "int32", "uint32"}, unroll=True,
                                          split_workgroups=False)
    assert c.LOWERING == LoweringNeeds({"float32", "float64", "float16", "int32", "uint32"}, unroll=True,
                                       split_workgroups=True)


def test_renderers_only_spell_lowered_kernels():
    with pytest.raises(ValueError, match="mask holds bool tensors, which WGSLRenderer cannot store: lower the kernel"):
        wgsl.emit_wgsl(where_positive())
    with pytest.raises(ValueError, match="C renders kernels split into thread loops"):
        c.emit_c(lower_kernel(row_sum(), LoweringNeeds(c.LOWERING.storage_types)))
    source = wgsl.emit_wgsl(lower_kernel(where_positive(), wgsl.LOWERING)).source
    assert "var<storage, read_write> mask: array<u32>;" in source and "var<storage, read_write> y: array<i32>;" in source
    source = c.emit_c(lower_kernel(row_sum(), c.LOWERING))
    assert "static float pair[8];" in source and "for (int32_t lid = 0; lid < 4; lid++) {" in source
