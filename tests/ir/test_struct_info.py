"""Relations between struct infos: base-of, unification, erasure."""

from tessera.arith import Analyzer
from tessera.ir import (
    FuncStructInfo,
    ObjectStructInfo,
    PrimStructInfo,
    Shape,
    Tensor,
    TupleStructInfo,
    is_base_of,
)
from tessera.ir.struct_info import describe, erase_to_ndim, sinfo_vars, unify

F32 = "float32"


def test_is_base_of_follows_precision():
    assert is_base_of(ObjectStructInfo(), Tensor((2,), F32))
    assert is_base_of(Tensor(dtype=F32, ndim=2), Tensor(("n", 4), F32))
    assert is_base_of(Tensor(ndim=-1), Tensor(("n", 4), F32))
    assert not is_base_of(Tensor(("n", 4), F32), Tensor(dtype=F32, ndim=2))
    assert is_base_of(Tensor(("n * 4",), F32), Tensor(("4 * n",), F32))
    assert not is_base_of(Tensor(("n",), F32), Tensor(("m",), F32))
    assert not is_base_of(Tensor((2,), "float16"), Tensor((2,), F32))
    assert is_base_of(Shape(ndim=2), Shape(["n", 3]))
    assert is_base_of(PrimStructInfo("int64"), PrimStructInfo("int64", Tensor(("n",)).shape[0]))
    assert is_base_of(TupleStructInfo((Tensor(ndim=1),)), TupleStructInfo((Tensor((3,), F32),)))
    # Callables are contravariant in their parameters.
    wide = FuncStructInfo((Tensor(ndim=1, dtype=F32),), Tensor((3,), F32))
    narrow = FuncStructInfo((Tensor((3,), F32),), Tensor(ndim=1, dtype=F32))
    assert is_base_of(narrow, wide) and not is_base_of(wide, narrow)


def test_unify_keeps_what_both_share():
    assert unify(Tensor(("n", 4), F32), Tensor(("n", 4), F32)) == Tensor(("n", 4), F32)
    assert unify(Tensor(("n", 4), F32), Tensor(("m", 4), F32)) == Tensor(dtype=F32, ndim=2)
    assert unify(Tensor((4,), F32), Tensor((4, 4), F32)) == Tensor(dtype=F32, ndim=-1)
    assert unify(Tensor((4,), F32), Shape([4])) == ObjectStructInfo()
    assert unify(Tensor((4,), F32), Tensor((4,), "int32")) == Tensor(ndim=1)


def test_erasure_and_variables():
    sinfo = TupleStructInfo((Tensor(("n", "m"), F32), Tensor(("n",), F32)))
    assert [v.name for v in sinfo_vars(sinfo)] == ["n", "m"]
    erased = erase_to_ndim(sinfo, keep=lambda v: v.name == "n")
    assert erased == TupleStructInfo((Tensor(dtype=F32, ndim=2), Tensor(("n",), F32)))
    callable_sinfo = FuncStructInfo((Tensor(("k",), F32),), Tensor(("k * 2", "n"), F32))
    assert [v.name for v in sinfo_vars(callable_sinfo)] == ["n"]  # k is the callable's own


def test_describe_is_short_and_readable():
    assert describe(Tensor(("n", 4), F32)) == "(n, 4) float32"
    assert describe(Tensor(dtype=F32, ndim=2)) == "tensor of ndim 2 float32"
    assert describe(Shape(["n"])) == "shape [n]"
    assert Analyzer().prove_equal(Tensor(("n * 4",)).shape[0], Tensor(("4 * n",)).shape[0])
