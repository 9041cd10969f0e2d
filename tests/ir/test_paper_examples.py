"""The Relax paper's deduction examples and the architecture overview's shape_example.

Each program is written in the text format, parsed (which deduces every
binding's struct info through the BlockBuilder) and compared, annotation by
annotation, with what the paper shows. Then it runs in the interpreter.
"""

import numpy as np
import pytest
from modules import FIGURE_3, FIGURE_4, FIGURE_4_CALLABLE, SHAPE_EXAMPLE
from tessera.ir import RuntimeCheckError, assert_structural_equal, interpret, print_sinfo, well_formed
from tessera.script import from_source


def annotations(mod, func="main") -> dict[str, str]:
    """name -> printed struct info of every binding of a function (dataflow blocks included)."""
    out = {}
    for block in mod[func].body.blocks:
        for binding in block.bindings:
            out[binding.var.name_hint] = print_sinfo(binding.var.struct_info)
    return out


def strip_annotations(text: str) -> str:
    """Drop `: R.Tensor(...)` from bindings so that the parser has to deduce them."""
    lines = []
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("lv") and ": R." in line and " = " in line:
            indent = line[: len(line) - len(stripped)]
            name = stripped.split(":", 1)[0]
            lines.append(indent + name + " = " + line.split(" = ", 1)[1])
        else:
            lines.append(line)
    return "\n".join(lines)


def test_figure_3_exp_unique_match_cast():
    mod = from_source(strip_annotations(FIGURE_3))
    assert annotations(mod) == {
        "lv0": 'R.Tensor((n, 4), dtype="float32")',         # exp keeps the symbolic shape
        "lv1": 'R.Tensor(dtype="float32", ndim=1)',         # data-dependent: rank only
        "lv2": 'R.Tensor((m,), dtype="float32")',           # match_cast introduces m
        "lv3": 'R.Tensor((m,), dtype="float32")',           # and m flows on
    }
    # m is local to the body, so the signature can only promise a 1-D tensor.
    assert print_sinfo(mod["main"].ret_struct_info) == 'R.Tensor(dtype="float32", ndim=1)'
    well_formed(mod)
    x = np.array([[0, 1, 1, 2], [2, 0, 3, 3]], np.float32)
    np.testing.assert_allclose(interpret(mod, "main", x), np.exp(np.unique(np.exp(x))), rtol=1e-6)


def test_figure_4_deduced_annotations_of_lv0_to_lv3():
    mod = from_source(strip_annotations(FIGURE_4))
    deduced = annotations(mod)
    assert {k: deduced[k] for k in ("lv0", "lv1", "lv2", "lv3")} == {
        "lv0": 'R.Tensor((n, 4), dtype="float32")',   # operator deduction
        "lv1": 'R.Tensor((n * 4,), dtype="float32")',  # flatten keeps the relation n * 4
        "lv2": 'R.Tensor((n * 4,), dtype="float32")',  # from subfn's signature: k := n
        "lv3": 'R.Tensor(dtype="float32", ndim=1)',    # coarse, not an error
    }
    # lv1 and lv2 are provably the same shape, so adding them keeps (n * 4,).
    assert deduced["gv"] == 'R.Tensor((n * 4,), dtype="float32")'
    well_formed(mod)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(interpret(mod, "main", x, y), np.exp(x).reshape(-1) + y.reshape(-1), rtol=1e-6)


def test_figure_4_calls_a_global_function_through_a_variable():
    """The paper writes `f0 = cls.subfn; lv2 = f0(y)`: deduction goes through f0's callable
    signature, the printed `f0: R.Callable(...)` parses back, and the call runs."""
    bare = strip_annotations(FIGURE_4_CALLABLE).replace(
        'f0: R.Callable((R.Tensor((k, 2, 2), dtype="float32"),), R.Tensor((k * 4,), dtype="float32")) =', "f0 =")
    deduced = annotations(from_source(bare))
    assert deduced["f0"] == ('R.Callable((R.Tensor((k, 2, 2), dtype="float32"),), '
                             'R.Tensor((k * 4,), dtype="float32"))')
    assert deduced["lv2"] == 'R.Tensor((n * 4,), dtype="float32")'  # k := n through the variable too
    mod = from_source(FIGURE_4_CALLABLE)
    text = mod.script()
    assert "f0: R.Callable((R.Tensor((k, 2, 2)" in text and "= f0(y)" in text
    reparsed = from_source(text)
    assert_structural_equal(reparsed, mod)
    assert reparsed.script() == text
    well_formed(reparsed)
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((5, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(interpret(reparsed, "main", x, y), np.exp(x).reshape(-1) + y.reshape(-1),
                               rtol=1e-6)


def test_architecture_overview_shape_example():
    mod = from_source(strip_annotations(SHAPE_EXAMPLE))
    assert annotations(mod, "shape_example") == {
        "lv0": 'R.Tensor((n, 4), dtype="float32")',
        "lv1": 'R.Tensor((n * 4,), dtype="float32")',
        "lv2": "R.Shape([n * 4])",
        "lv3": 'R.Tensor(dtype="float32", ndim=1)',
        "lv4": 'R.Tensor((m,), dtype="float32")',
        "gv0": 'R.Tensor((m,), dtype="float32")',
    }
    well_formed(mod)

    def myfunc(flat, shape):  # an opaque runtime function: keeps the positive values
        assert shape == (flat.shape[0],)
        return flat[flat > 0]

    x = np.array([[[1, -1], [2, -2]], [[3, 0], [-4, 5]]], np.float32)
    got = interpret(mod, "shape_example", x, library={"myfunc": myfunc})
    np.testing.assert_allclose(got, np.exp(np.array([1, 2, 3, 5], np.float32)), rtol=1e-6)


def test_call_deduction_uses_expressions_in_the_callee_signature():
    text = '''
@I.ir_module
class Module:
    @R.function
    def pairs(x: R.Tensor(("k", "k * 2"), dtype="float32")) -> R.Tensor(("k * 2", "k"), dtype="float32"):
        k = T.int64()
        with R.dataflow():
            lv0: R.Tensor((k * 2, k), dtype="float32") = R.permute_dims(x)
            R.output(lv0)
        return lv0

    @R.function
    def main(a: R.Tensor(("n", "n * 2"), dtype="float32"), b: R.Tensor(("p", "q"), dtype="float32")) -> R.Tensor(dtype="float32", ndim=2):
        n = T.int64()
        p = T.int64()
        q = T.int64()
        lv0: R.Tensor((n * 2, n), dtype="float32") = cls.pairs(a)
        lv1: R.Tensor((p * 2, p), dtype="float32") = cls.pairs(b)
        return lv1
'''
    mod = from_source(text)
    deduced = annotations(mod)
    assert deduced["lv0"] == 'R.Tensor((n * 2, n), dtype="float32")'
    # q cannot be proven equal to 2p: deduction still gives the callee's promise, and the
    # callee checks its parameter annotation when it runs.
    assert deduced["lv1"] == 'R.Tensor((p * 2, p), dtype="float32")'
    well_formed(mod)
    a = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(interpret(mod, "main", a, np.ones((3, 6), np.float32)), np.ones((6, 3)))
    with pytest.raises(RuntimeCheckError, match=r"argument 'x' of pairs: expected R.Tensor\(\(k, k \* 2\), "
                       r"dtype=\"float32\"\), got shape \(3, 5\): dimension 1 is 5, not k \* 2 = 6"):
        interpret(mod, "main", a, np.ones((3, 5), np.float32))
    static = text.replace('R.Tensor(("p", "q"), dtype="float32")', 'R.Tensor((3, 5), dtype="float32")')
    static = static.replace("        p = T.int64()\n        q = T.int64()\n", "")
    static = static.replace('lv1: R.Tensor((p * 2, p), dtype="float32") = cls.pairs(b)', "lv1 = cls.pairs(b)")
    from tessera.ir import ScriptError
    with pytest.raises(ScriptError, match=r"argument mismatch in lv1 = cls.pairs\(b\): argument 0 of "
                       r"cls.pairs: b has \(3, 5\) float32, the parameter needs \(k, k \* 2\) float32 "
                       r"\(dimension 1 is 5, not 6\)"):
        from_source(static)
