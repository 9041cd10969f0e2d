"""The reference interpreter computes with numpy and checks every annotation at run time."""

import numpy as np
import pytest
from modules import cross_level_calls, mlp_with_branch
from tessera.ir import RuntimeCheckError, ShapeValue, interpret
from tessera.script import from_source


def test_if_takes_the_branch_the_condition_selects():
    mod = mlp_with_branch()
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 16)).astype(np.float32)
    w2 = rng.standard_normal((16, 4)).astype(np.float32)
    for sign in (1.0, -1.0):
        x = (sign * np.abs(rng.standard_normal((3, 8)))).astype(np.float32)
        from math import erf, sqrt
        h = x.astype(np.float64) @ w1
        h = 0.5 * h * (1 + np.vectorize(erf)(h / sqrt(2)))
        logits = h @ w2
        if logits.sum() > 0:
            scaled = logits * 2
            want = np.exp(scaled - scaled.max(-1, keepdims=True))
            want /= want.sum(-1, keepdims=True)
        else:
            want = -logits
        out, first = interpret(mod, "mlp", x, w1, w2)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(first, logits[:, :2], rtol=1e-4, atol=1e-5)


def test_library_calls_write_into_preallocated_outputs():
    calls = []

    def double(x, out, n):
        calls.append(n)
        out[...] = 2 * x

    mod = cross_level_calls()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out, shape = interpret(mod, "dps", x, library={"tessera.test.double": double})
    np.testing.assert_array_equal(out, (2 * x).reshape(6, 2))
    assert shape == ShapeValue((3, 4)) and isinstance(shape, ShapeValue)
    assert calls == [3]  # the symbolic value n arrives as an extra argument


def test_missing_library_function_and_kernel_are_named():
    mod = cross_level_calls()
    with pytest.raises(RuntimeCheckError, match="no library function named 'tessera.test.double'"):
        interpret(mod, "dps", np.zeros((2, 4), np.float32))
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4,), dtype="float32")) -> R.Tensor((4,), dtype="float32"):
        lv0: R.Tensor((4,), dtype="float32") = R.call_tir(cls.main, (x,), out_sinfo=R.Tensor((4,), dtype="float32"))
        return lv0
'''
    with pytest.raises(RuntimeCheckError, match="call_tir to kernel 'main' needs a compiled kernel"):
        interpret(from_source(text), "main", np.zeros(4, np.float32))


def test_parameter_annotations_are_checked_with_shared_symbols():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(a: R.Tensor(("n", 4), dtype="float32"), b: R.Tensor(("n * 2",), dtype="float32"), k: R.Prim(value="n")) -> R.Tensor(("n", 4), dtype="float32"):
        n = T.int64()
        return a
'''
    mod = from_source(text)
    a = np.zeros((3, 4), np.float32)
    interpret(mod, "main", a, np.zeros(6, np.float32), 3)
    with pytest.raises(RuntimeCheckError, match=r"argument 'b' of main: expected R.Tensor\(\(n \* 2,\), "
                       r"dtype=\"float32\"\), got shape \(5,\): dimension 0 is 5, not n \* 2 = 6"):
        interpret(mod, "main", a, np.zeros(5, np.float32), 3)
    with pytest.raises(RuntimeCheckError, match=r"argument 'k' of main: expected R.Prim\(value=n\), got shape "
                       r"\(4,\): dimension 0 is 4, not n = 3"):
        interpret(mod, "main", a, np.zeros(6, np.float32), 4)
    with pytest.raises(RuntimeCheckError, match=r"argument 'a' of main: .* got rank 1"):
        interpret(mod, "main", np.zeros(3, np.float32), np.zeros(6, np.float32), 3)
    with pytest.raises(RuntimeCheckError, match="main takes 3 arguments"):
        interpret(mod, "main", a)


def test_numeric_errors_in_operators_name_the_binding():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(w: R.Tensor((4, 2), dtype="float32"), ids: R.Tensor(("n",), dtype="int32")) -> R.Tensor(("n", 2), dtype="float32"):
        n = T.int64()
        lv0: R.Tensor((n, 2), dtype="float32") = R.take(w, ids, axis=0)
        return lv0
'''
    mod = from_source(text)
    np.testing.assert_array_equal(interpret(mod, "main", np.eye(4, 2, dtype=np.float32), np.array([1, 0], np.int32)),
                                  np.array([[0, 1], [1, 0]], np.float32))
    with pytest.raises(RuntimeCheckError, match=r"IndexError: take: an index is outside \[0, 4\) \(in lv0: "):
        interpret(mod, "main", np.zeros((4, 2), np.float32), np.array([4], np.int32))
