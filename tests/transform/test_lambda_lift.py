"""lambda_lift: nested functions become private module functions; captures become parameters."""

import numpy as np
import pytest
from modules import CLOSURES, closures
from tessera.ir import assert_structural_equal, interpret, well_formed
from tessera.script import from_source
from tessera.transform import lambda_lift
from tessera.transform.lambda_lift import LambdaLiftError


def bindings(func) -> list[str]:
    return [line.strip() for line in func.splitlines() if " = " in line and "T.int64()" not in line]


def expected(x, w):
    return (x * w).reshape(-1) * 2


@pytest.mark.parametrize("n", [1, 7])
def test_closure_capturing_a_tensor_and_a_shape_variable(n):
    before = closures()
    rng = np.random.default_rng(n)
    x, w = rng.standard_normal((n, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(interpret(before, "main", x, w), expected(x, w), rtol=1e-6)

    after = lambda_lift(before)
    well_formed(after)
    assert list(after.functions) == ["apply", "main", "main_scale", "main_double"]
    # w is captured as a tensor; n as a value, since scale's parameter (n * 4,) does not define it.
    assert after["main_scale"].params[-1].struct_info.value.name == "n"
    text = after.script()
    assert ('def main_scale(y: R.Tensor(("n * 4",), dtype="float32"), w: R.Tensor((4,), dtype="float32"), '
            'n: R.Prim(value="n")) -> R.Tensor(("n", 4), dtype="float32"):') in text
    assert bindings(text.split("def main(")[1].split("@R.function")[0]) == [
        'flat: R.Tensor((n * 4,), dtype="float32") = R.flatten(x)',
        'lv0: R.Tensor((n, 4), dtype="float32") = cls.main_scale(flat, w, R.prim_value(n))',
        'lv1: R.Tensor((n * 4,), dtype="float32") = R.reshape(lv0, R.shape([n * 4]))',
        'lv2: R.Tensor((n * 4,), dtype="float32") = cls.apply(cls.main_double, lv1)',  # no captures: a value
    ]
    assert after["main_scale"].attr("private") and after["main_double"].attr("private")
    reparsed = from_source(text)
    assert_structural_equal(reparsed, after)
    assert reparsed.script() == text
    np.testing.assert_allclose(interpret(after, "main", x, w), expected(x, w), rtol=1e-6)


def test_functions_nested_two_deep_pass_their_captures_outwards():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n",), dtype="float32"), b: R.Tensor(("n",), dtype="float32")) -> R.Tensor(("n",), dtype="float32"):
        n = T.int64()

        @R.function
        def outer(y: R.Tensor(("n",), dtype="float32")) -> R.Tensor(("n",), dtype="float32"):
            n = T.int64()

            @R.function
            def inner(z: R.Tensor(("n",), dtype="float32")) -> R.Tensor(("n",), dtype="float32"):
                n = T.int64()
                zb: R.Tensor((n,), dtype="float32") = R.multiply(z, b)
                return zb

            yy: R.Tensor((n,), dtype="float32") = inner(y)
            return yy

        out: R.Tensor((n,), dtype="float32") = outer(x)
        return out
'''
    before = from_source(text)
    after = lambda_lift(before)
    well_formed(after)
    assert list(after.functions) == ["main", "main_outer_inner", "main_outer"]
    # b, captured by inner, is captured by outer in turn, since outer's call of inner passes it.
    assert [p.name_hint for p in after["main_outer"].params] == ["y", "b"]
    assert "cls.main_outer_inner(y, b)" in after.script() and "cls.main_outer(x, b)" in after.script()
    assert_structural_equal(from_source(after.script()), after)
    x, b = np.arange(5, dtype=np.float32), np.full(5, 3, np.float32)
    np.testing.assert_allclose(interpret(after, "main", x, b), interpret(before, "main", x, b))
    np.testing.assert_allclose(interpret(after, "main", x, b), x * b)


def test_lifted_names_are_unique_in_the_module():
    text = CLOSURES.replace("    @R.function\n    def apply(", "    @R.function\n    def main_scale(z: R.Tensor((1,), "
                            "dtype=\"float32\")) -> R.Tensor((1,), dtype=\"float32\"):\n        return z\n\n"
                            "    @R.function\n    def apply(")
    after = lambda_lift(from_source(text))
    assert "main_scale_1" in after and not after["main_scale"].attr("private")
    well_formed(after)


def test_a_capturing_local_used_as_a_value_is_an_error():
    text = CLOSURES.replace("cls.apply(double, lv1)", "cls.apply(scale2, lv1)").replace(
        "        lv0: R.Tensor((n, 4)", '''        @R.function
        def scale2(z: R.Tensor(("k",), dtype="float32")) -> R.Tensor(("k",), dtype="float32"):
            k = T.int64()
            zw: R.Tensor((k,), dtype="float32") = R.add(z, R.sum(w))
            return zw

        lv0: R.Tensor((n, 4)''')
    mod = from_source(text)
    with pytest.raises(LambdaLiftError, match=r"nested function 'scale2' captures w and is used as a value; only "
                       r"calls of a capturing nested function can be lifted \(in lv2: .* = cls.apply\(scale2, lv1\)\)"):
        lambda_lift(mod)
