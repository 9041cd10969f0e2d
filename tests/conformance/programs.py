"""Whole programs for the conformance suite: branches, calls, recursion, library calls, data-dependent
shapes, coarse and tuple parameters (issue 13). Every runtime must run them, not only straight-line
kernel sequences. The texts are in the text format (docs/text-format.md) so that a reader sees the
program as the compiler does; ``cases.py`` registers them with their calls.
"""

from __future__ import annotations

import numpy as np

# A recursive power by repeated squaring: x ** n = (x ** (n // 2)) ** 2, times x when n is odd.
POWER = '''
@I.ir_module
class Module:
    @R.function
    def power(x: R.Tensor((4,), dtype="float32"), n: R.Tensor((), dtype="int32")) -> R.Tensor((4,), dtype="float32"):
        is_zero: R.Tensor((), dtype="bool") = R.equal(n, R.const(0, "int32"))
        if is_zero:
            r: R.Tensor((4,), dtype="float32") = R.ones(R.shape([4]), dtype="float32")
        else:
            half_n: R.Tensor((), dtype="int32") = R.floor_divide(n, R.const(2, "int32"))
            half: R.Tensor((4,), dtype="float32") = cls.power(x, half_n)
            square: R.Tensor((4,), dtype="float32") = R.multiply(half, half)
            twice: R.Tensor((), dtype="int32") = R.multiply(half_n, R.const(2, "int32"))
            is_even: R.Tensor((), dtype="bool") = R.equal(n, twice)
            if is_even:
                odd_part: R.Tensor((4,), dtype="float32") = square
            else:
                odd_part: R.Tensor((4,), dtype="float32") = R.multiply(square, x)
            r: R.Tensor((4,), dtype="float32") = odd_part
        return r
'''

# nonzero, then a gather by its indices: the count is known only after looking at the data.
NONZERO_GATHER = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n",), dtype="float32")) -> R.Tensor(dtype="float32", ndim=1):
        n = T.int64()
        k = T.int64()
        positive: R.Tensor((n,), dtype="bool") = R.greater(x, R.const(0.0, "float32"))
        where: R.Tensor(dtype="int64", ndim=2) = R.nonzero(positive)
        rows: R.Tensor((1, k), dtype="int64") = R.match_cast(where, R.Tensor((1, k), dtype="int64"))
        flat: R.Tensor((k,), dtype="int64") = R.reshape(rows, R.shape([k]))
        index: R.Tensor((k,), dtype="int32") = R.astype(flat, dtype="int32")
        picked: R.Tensor((k,), dtype="float32") = R.take(x, index, axis=0)
        out: R.Tensor((k,), dtype="float32") = R.multiply(picked, R.const(2.0, "float32"))
        return out
'''

MASKED_SELECT = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 3), dtype="float32"), mask: R.Tensor(("n", 3), dtype="bool")) -> R.Tensor(dtype="float32", ndim=1):
        n = T.int64()
        k = T.int64()
        picked: R.Tensor(dtype="float32", ndim=1) = R.masked_select(x, mask)
        exact: R.Tensor((k,), dtype="float32") = R.match_cast(picked, R.Tensor((k,), dtype="float32"))
        out: R.Tensor((k,), dtype="float32") = R.add(exact, R.const(1.0, "float32"))
        return out
'''

# Coarse parameters: the shape is named by match_cast, and checked again at an inner call (helper is
# kept a call: inlined, its check would be a match_cast in the caller).
COARSE = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(dtype="float32", ndim=2)) -> R.Tensor(dtype="float32", ndim=2):
        n = T.int64()
        m = T.int64()
        y: R.Tensor((n, m), dtype="float32") = R.match_cast(x, R.Tensor((n, m), dtype="float32"))
        z: R.Tensor((n, m), dtype="float32") = R.exp(y)
        return z

    @R.function
    def rows_of_four(x: R.Tensor(dtype="float32", ndim=2)) -> R.Tensor(dtype="float32", ndim=2):
        out: R.Tensor(dtype="float32", ndim=2) = cls.helper(x)
        return out

    @R.function
    def helper(y: R.Tensor(("m", 4), dtype="float32")) -> R.Tensor(("m", 4), dtype="float32"):
        m = T.int64()
        R.func_attr({"inline": False})
        z: R.Tensor((m, 4), dtype="float32") = R.add(y, y)
        return z
'''

# What an argument that breaks the callee's parameter shape must be reported with, in every runtime.
HELPER_SHAPE_ERROR = ("argument 'y' of helper", 'R.Tensor((m, 4), dtype="float32")', "(3, 5)")

# A reshape whose element count the compiler cannot prove (issue 32): to the shape of another tensor,
# or to sizes the caller passes. A call whose sizes disagree with x's must fail before the kernel
# runs (it would read past x, or leave the result half written), as the interpreter refuses it.
RESHAPE_UNPROVEN = '''
@I.ir_module
class Module:
    @R.function
    def like(x: R.Tensor(("n", "m"), dtype="float32"), y: R.Tensor(("a", "b"), dtype="float32")) -> R.Tensor(("a", "b"), dtype="float32"):
        n = T.int64()
        m = T.int64()
        a = T.int64()
        b = T.int64()
        R.func_attr({"tir_var_upper_bound": {"n": 40, "m": 40, "a": 40, "b": 40}})
        with R.dataflow():
            lv0: R.Tensor((a, b), dtype="float32") = R.reshape(x, R.shape([a, b]))
            gv: R.Tensor((a, b), dtype="float32") = R.add(lv0, y)
            R.output(gv)
        return gv

    @R.function
    def to_sizes(x: R.Tensor(("n", "m"), dtype="float32"), a: R.Prim(value="a"), b: R.Prim(value="b")) -> R.Tensor(("a", "b"), dtype="float32"):
        n = T.int64()
        m = T.int64()
        a = T.int64()
        b = T.int64()
        R.func_attr({"tir_var_upper_bound": {"n": 40, "m": 40, "a": 40, "b": 40}})
        with R.dataflow():
            gv: R.Tensor((a, b), dtype="float32") = R.reshape(x, R.shape([a, b]))
            R.output(gv)
        return gv
'''


def reshape_error(count: int) -> tuple[str, ...]:
    """What a runtime's refusal of a RESHAPE_UNPROVEN call whose sizes hold ``count`` elements (x holds
    30) must hold: the reshape as printed (the VMs' check quotes it, the interpreter its binding) and
    both counts."""
    return ("R.reshape(x, R.shape([a, b]))", "30", str(count))


def double(x: np.ndarray, out: np.ndarray, *scalars: int) -> None:
    """``tessera.test.double``, the library every conformance adapter registers (the call's tir_vars
    follow the output, unused here)."""
    out[...] = x * 2


TEST_LIBRARIES = {"tessera.test.double": double}

# arange whose end is a tensor the program computes: its length is known only at run time.
ARANGE_DYNAMIC = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n",), dtype="int32")) -> R.Tensor(dtype="float32", ndim=1):
        n = T.int64()
        k = T.int64()
        total: R.Tensor((), dtype="int32") = R.sum(x)
        steps: R.Tensor(dtype="int64", ndim=1) = R.arange_dynamic(total, start=1, step=2)
        exact: R.Tensor((k,), dtype="int64") = R.match_cast(steps, R.Tensor((k,), dtype="int64"))
        values: R.Tensor((k,), dtype="float32") = R.astype(exact, dtype="float32")
        out: R.Tensor((k,), dtype="float32") = R.sqrt(values)
        return out
'''
