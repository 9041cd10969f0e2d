"""inline_functions: small helpers become their callers' bindings; numbers stay the same."""

import numpy as np
import pytest
import tessera
from modules import FIGURE_4, calls_between_functions
from tessera.ir import Call, GlobalVar, RuntimeCheckError, assert_structural_equal, interpret, well_formed
from tessera.script import from_source
from tessera.transform import Pipeline, inline_functions, lambda_lift
from tessera.vm import VirtualMachine

HELPER_TWICE = '''
@I.ir_module
class Module:
    @R.function
    def scale_shift(a: R.Tensor(("k", 4), dtype="float32"), s: R.Tensor((4,), dtype="float32")) -> R.Tensor(("k", 4), dtype="float32"):
        k = T.int64()
        R.func_attr({"private": True})
        with R.dataflow():
            lv0: R.Tensor((k, 4), dtype="float32") = R.multiply(a, s)
            lv1: R.Tensor((k, 4), dtype="float32") = R.add(lv0, s)
            R.output(lv1)
        return lv1

    @R.function
    def big(a: R.Tensor(("k", 4), dtype="float32")) -> R.Tensor(("k", 4), dtype="float32"):
        k = T.int64()
        with R.dataflow():
            lv0: R.Tensor((k, 4), dtype="float32") = R.exp(a)
            lv1: R.Tensor((k, 4), dtype="float32") = R.add(lv0, a)
            lv2: R.Tensor((k, 4), dtype="float32") = R.multiply(lv1, a)
            lv3: R.Tensor((k, 4), dtype="float32") = R.negative(lv2)
            lv4: R.Tensor((k, 4), dtype="float32") = R.exp(lv3)
            R.output(lv4)
        return lv4

    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32"), s: R.Tensor((4,), dtype="float32")) -> R.Tensor(("n", 4), dtype="float32"):
        n = T.int64()
        R.func_attr({"tir_var_upper_bound": {"n": 16}})
        with R.dataflow():
            h: R.Tensor((n, 4), dtype="float32") = cls.scale_shift(x, s)
            h2: R.Tensor((n, 4), dtype="float32") = cls.scale_shift(h, s)
            gv: R.Tensor((n, 4), dtype="float32") = R.exp(h2)
            R.output(gv)
        return gv

    @R.function
    def with_big(x: R.Tensor(("n", 4), dtype="float32"), s: R.Tensor((4,), dtype="float32")) -> R.Tensor(("n", 4), dtype="float32"):
        n = T.int64()
        h: R.Tensor((n, 4), dtype="float32") = cls.scale_shift(x, s)
        out: R.Tensor((n, 4), dtype="float32") = cls.big(h)
        return out
'''


def calls(func) -> list[str]:
    return [b.value.op.name for block in func.body.blocks for b in block.bindings
            if isinstance(b.value, Call) and isinstance(b.value.op, GlobalVar)]


def body_lines(mod, name) -> list[str]:
    text = mod.script().split(f"def {name}(")[1].split("@R.function")[0]
    return [line.strip() for line in text.splitlines()[1:] if line.strip() and "T.int64()" not in line]


def check_round_trip(mod):
    well_formed(mod)
    reparsed = from_source(mod.script())
    assert_structural_equal(reparsed, mod)
    assert reparsed.script() == mod.script()


def test_a_small_helper_called_twice_is_inlined_and_removed_a_large_one_stays():
    before = from_source(HELPER_TWICE)
    after = inline_functions(before, max_size=4)
    check_round_trip(after)
    assert body_lines(after, "main") == [
        'R.func_attr({"tir_var_upper_bound": {"n": 16}})',
        "with R.dataflow():",
        'lv0: R.Tensor((n, 4), dtype="float32") = R.multiply(x, s)',
        'h: R.Tensor((n, 4), dtype="float32") = R.add(lv0, s)',      # the helper's result takes the call's name
        'lv1: R.Tensor((n, 4), dtype="float32") = R.multiply(h, s)',  # a fresh name for the second copy
        'h2: R.Tensor((n, 4), dtype="float32") = R.add(lv1, s)',
        'gv: R.Tensor((n, 4), dtype="float32") = R.exp(h2)',
        "R.output(gv)",
        "return gv",
    ]
    assert calls(after["main"]) == []
    assert calls(after["with_big"]) == ["big"]  # five bindings > max_size 4
    assert "scale_shift" not in after  # private, inlined everywhere, unused
    assert "big" in after  # an entry point, and still called
    rng = np.random.default_rng(0)
    for n in (1, 7):
        x, s = rng.standard_normal((n, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
        for name in ("main", "with_big"):
            np.testing.assert_allclose(interpret(after, name, x, s), interpret(before, name, x, s), rtol=1e-6)
    # With the default threshold the five-binding helper is small too.
    assert calls(inline_functions(before)["with_big"]) == []


def test_entry_points_stay_even_when_nothing_calls_them():
    after = inline_functions(calls_between_functions())
    check_round_trip(after)
    assert calls(after["main"]) == [] and "helper" in after
    assert body_lines(after, "main")[1] == 'lv0: R.Tensor((n, 4), dtype="float32") = x'  # helper returns y
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(interpret(after, "main", x), x)


def test_callee_symbolic_variables_map_to_the_caller_expressions():
    before = from_source(FIGURE_4)
    after = inline_functions(before)
    check_round_trip(after)
    # subfn(s: (k, 2, 2)) reshapes to [k * 4]; called with y: (n, 2, 2), k is n.
    assert 'lv2: R.Tensor((n * 4,), dtype="float32") = R.reshape(y, R.shape([n * 4]))' in body_lines(after, "main")
    x, y = np.ones((3, 4), np.float32), np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    np.testing.assert_allclose(interpret(after, "main", x, y), interpret(before, "main", x, y))


PAIRS = '''
@I.ir_module
class Module:
    @R.function
    def pairs(x: R.Tensor(("k", "k * 2"), dtype="float32")) -> R.Tensor(("k * 2", "k"), dtype="float32"):
        k = T.int64()
        R.func_attr({"private": True})
        with R.dataflow():
            lv0: R.Tensor((k * 2, k), dtype="float32") = R.permute_dims(x)
            R.output(lv0)
        return lv0

    @R.function
    def main(a: R.Tensor(("n", "n * 2"), dtype="float32"), b: R.Tensor(("p", "q"), dtype="float32"), c: R.Tensor(dtype="float32", ndim=2)) -> R.Tensor(dtype="float32", ndim=2):
        n = T.int64()
        p = T.int64()
        q = T.int64()
        lv0: R.Tensor((n * 2, n), dtype="float32") = cls.pairs(a)
        lv1: R.Tensor((p * 2, p), dtype="float32") = cls.pairs(b)
        lv2: R.Tensor(dtype="float32", ndim=2) = cls.pairs(c)
        return lv2
'''


def test_arguments_that_do_not_prove_the_parameter_get_a_match_cast():
    before = from_source(PAIRS)
    after = inline_functions(before)
    check_round_trip(after)
    assert body_lines(after, "main") == [
        # what each match_cast below checks, so that a failed one names the call the user wrote
        'R.func_attr({"inlined_checks": {"x": "argument \'x\' of pairs", "x0": "argument \'x\' of pairs"}})',
        "with R.dataflow():",
        'lv0: R.Tensor((n * 2, n), dtype="float32") = R.permute_dims(a)',  # (n, n * 2) proves (k, k * 2)
        "R.output(lv0)",
        # q = 2p is not provable: the call's check stays, as a match_cast
        'x: R.Tensor((p, p * 2), dtype="float32") = R.match_cast(b, R.Tensor((p, p * 2), dtype="float32"))',
        "with R.dataflow():",
        'lv1: R.Tensor((p * 2, p), dtype="float32") = R.permute_dims(x)',
        "R.output(lv1)",
        # c has no shape: the match_cast defines k for it
        'x0: R.Tensor((k, k * 2), dtype="float32") = R.match_cast(c, R.Tensor((k, k * 2), dtype="float32"))',
        "with R.dataflow():",
        'lv2: R.Tensor((k * 2, k), dtype="float32") = R.permute_dims(x0)',
        "R.output(lv2)",
        "return lv2",
    ]
    assert "pairs" not in after
    a, b = np.ones((2, 4), np.float32), np.arange(18, dtype=np.float32).reshape(3, 6)
    np.testing.assert_array_equal(interpret(after, "main", a, b, b), interpret(before, "main", a, b, b))
    with pytest.raises(RuntimeCheckError, match=r"^argument 'x' of pairs \(inlined into main\): .*dimension 1 is 5, "
                       r"not p \* 2 = 6$"):
        interpret(after, "main", a, np.ones((3, 5), np.float32), b)


def test_callee_symbolic_variables_defined_inside_are_renamed_when_the_caller_has_the_name():
    text = '''
@I.ir_module
class Module:
    @R.function
    def uniq(a: R.Tensor(("k",), dtype="float32")) -> R.Tensor(dtype="float32", ndim=1):
        k = T.int64()
        m = T.int64()
        u: R.Tensor(dtype="float32", ndim=1) = R.unique(a)
        um: R.Tensor((m,), dtype="float32") = R.match_cast(u, R.Tensor((m,), dtype="float32"))
        e: R.Tensor((m,), dtype="float32") = R.exp(um)
        return e

    @R.function
    def main(x: R.Tensor(("m",), dtype="float32")) -> R.Tensor(dtype="float32", ndim=1):
        m = T.int64()
        out: R.Tensor(dtype="float32", ndim=1) = cls.uniq(x)
        return out
'''
    before = from_source(text)
    after = inline_functions(before)
    check_round_trip(after)
    assert 'um: R.Tensor((m1,), dtype="float32") = R.match_cast(u, R.Tensor((m1,), dtype="float32"))' \
        in body_lines(after, "main")
    assert after["main"].attr("inlined_checks") == {"um": "match_cast of um in uniq"}
    x = np.array([3, 1, 3, 2], np.float32)
    np.testing.assert_allclose(interpret(after, "main", x), np.exp([1, 2, 3]), rtol=1e-6)


BRANCHES = '''
@I.ir_module
class Module:
    @R.function
    def rec(x: R.Tensor(("n",), dtype="float32"), again: R.Tensor((), dtype="bool")) -> R.Tensor(("n",), dtype="float32"):
        n = T.int64()
        if again:
            r: R.Tensor((n,), dtype="float32") = cls.rec(x, R.const(False, "bool"))
        else:
            r: R.Tensor((n,), dtype="float32") = R.exp(x)
        return r

    @R.function
    def choose(x: R.Tensor(("n",), dtype="float32"), neg: R.Tensor((), dtype="bool")) -> R.Tensor(("n",), dtype="float32"):
        n = T.int64()
        if neg:
            r: R.Tensor((n,), dtype="float32") = R.negative(x)
        else:
            r: R.Tensor((n,), dtype="float32") = x
        return r

    @R.function
    def main(x: R.Tensor(("n",), dtype="float32"), flag: R.Tensor((), dtype="bool")) -> R.Tensor(("n",), dtype="float32"):
        n = T.int64()
        with R.dataflow():
            a: R.Tensor((n,), dtype="float32") = cls.choose(x, flag)
            R.output(a)
        b: R.Tensor((n,), dtype="float32") = cls.choose(a, flag)
        c: R.Tensor((n,), dtype="float32") = cls.rec(b, flag)
        return c
'''


def test_recursive_functions_stay_calls_and_branches_stay_out_of_dataflow_blocks():
    before = from_source(BRANCHES)
    after = inline_functions(before)
    check_round_trip(after)
    # rec calls itself; choose has an if, which a dataflow block cannot hold, so only the call
    # outside the block is inlined.
    assert calls(after["main"]) == ["choose", "rec"]
    assert calls(after["rec"]) == []  # the recursive call sits in a branch
    assert "if flag:" in after.script().split("def main(")[1]
    x = np.array([1.0, -2.0], np.float32)
    for flag in (True, False):
        np.testing.assert_allclose(interpret(after, "main", x, np.array(flag)),
                                   interpret(before, "main", x, np.array(flag)), rtol=1e-6)


CLOSURE = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32"), w: R.Tensor((4,), dtype="float32")) -> R.Tensor(("n * 4",), dtype="float32"):
        n = T.int64()
        R.func_attr({"tir_var_upper_bound": {"n": 16}})
        flat = R.flatten(x)

        @R.function
        def scale(y: R.Tensor(("n * 4",), dtype="float32")) -> R.Tensor(("n", 4), dtype="float32"):
            n = T.int64()
            rows = R.reshape(y, R.shape([n, 4]))
            scaled = R.multiply(rows, w)
            return scaled

        @R.function
        def double(z: R.Tensor(("k",), dtype="float32")) -> R.Tensor(("k",), dtype="float32"):
            k = T.int64()
            twice = R.add(z, z)
            return twice

        lv0 = scale(flat)
        lv1 = R.reshape(lv0, R.shape([n * 4]))
        lv2 = double(lv1)
        return lv2
'''


def test_lifted_closures_inline_back_into_one_function():
    before = from_source(CLOSURE)
    after = inline_functions(lambda_lift(before))
    check_round_trip(after)
    assert list(after.functions) == ["main"] and calls(after["main"]) == []
    x, w = np.arange(12, dtype=np.float32).reshape(3, 4), np.array([1, 2, 3, 4], np.float32)
    np.testing.assert_allclose(interpret(after, "main", x, w), interpret(before, "main", x, w))
    np.testing.assert_allclose(interpret(after, "main", x, w), (x * w).reshape(-1) * 2)


def test_the_default_pipeline_lifts_and_inlines_before_fusion():
    names = [name for name, _ in Pipeline.default(tessera.target.Target.preset("wasm")).passes]
    assert names.index("lambda_lift") < names.index("inline_functions") < names.index("fuse_ops")


@pytest.mark.parametrize("name,text", [("helper_twice", HELPER_TWICE), ("closure", CLOSURE)])
def test_inlined_programs_compile_and_run_in_the_vm(name, text):
    """With no calls left, the VM (which does not make calls yet) runs what inlining leaves."""
    mod = from_source(text)
    if name == "helper_twice":
        mod = mod.without_function("with_big").without_function("big")
    exe = tessera.build(mod, "wasm", upper_bounds={"n": 16})
    vm = VirtualMachine(exe, "wasm")
    rng = np.random.default_rng(3)
    for n in (1, 7, 16):
        x, w = rng.standard_normal((n, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
        np.testing.assert_allclose(vm["main"](x, w), interpret(mod, "main", x, w), rtol=1e-5, atol=1e-6)


INNER_SQUARE = '''
@I.ir_module
class Module:
    @R.function
    def inner_square(x_in: R.Tensor(("k", 4), dtype="float32")) -> R.Tensor(("k", 4), dtype="float32"):
        k = T.int64()
        R.func_attr({"private": True})
        y: R.Tensor((k, 4), dtype="float32") = R.multiply(x_in, x_in)
        return y

    @R.function
    def square_plus_one(a: R.Tensor(dtype="float32", ndim=2)) -> R.Tensor(dtype="float32", ndim=2):
        R.func_attr({"private": True})
        s: R.Tensor(dtype="float32", ndim=2) = cls.inner_square(a)
        t: R.Tensor(dtype="float32", ndim=2) = R.add(s, R.const(1.0, "float32"))
        return t

    @R.function
    def main(x: R.Tensor(dtype="float32", ndim=2)) -> R.Tensor(dtype="float32", ndim=2):
        z: R.Tensor(dtype="float32", ndim=2) = cls.inner_square(x)
        return z

    @R.function
    def through_a_helper(x: R.Tensor(dtype="float32", ndim=2)) -> R.Tensor(dtype="float32", ndim=2):
        z: R.Tensor(dtype="float32", ndim=2) = cls.square_plus_one(x)
        return z
'''


@pytest.mark.parametrize("entry", ["main", "through_a_helper"])
def test_a_failed_argument_check_of_an_inlined_helper_names_the_helper(entry):
    """The user called inner_square; after inlining its argument check is a match_cast in the entry point
    (directly, or through square_plus_one, itself inlined), and a failure says whose argument it was."""
    before = from_source(INNER_SQUARE)
    after = inline_functions(before)
    check_round_trip(after)
    assert not any(calls(after[name]) for name in ("main", "through_a_helper"))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    expected = x * x + (1 if entry == "through_a_helper" else 0)
    vm = VirtualMachine(tessera.build(before, "wasm"), "wasm")
    np.testing.assert_array_equal(vm[entry](x), expected)
    np.testing.assert_array_equal(interpret(after, entry, x), expected)
    wrong = np.ones((3, 5), np.float32)
    reason = 'expected R.Tensor((k, 4), dtype="float32"), got shape (3, 5): dimension 1 is 5, not 4'
    with pytest.raises(RuntimeCheckError) as called:
        interpret(before, entry, wrong)
    assert str(called.value).startswith(f"argument 'x_in' of inner_square: {reason} (in ")
    for run in (lambda: interpret(after, entry, wrong), lambda: vm[entry](wrong)):
        with pytest.raises(RuntimeCheckError) as inlined:
            run()
        assert str(inlined.value) == f"argument 'x_in' of inner_square (inlined into {entry}): {reason}"
