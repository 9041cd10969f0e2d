"""Bad script text gets an error with its line and column and what was wrong."""

import pytest
from tessera.ir import ScriptError
from tessera.script import from_source

HEADER = '''@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32"), w: R.Tensor((4, 4), dtype="float32")) -> R.Tensor(("n", 4), dtype="float32"):
        n = T.int64()
'''


def body(*lines: str) -> str:
    return HEADER + "".join(f"        {line}\n" for line in lines)


def test_syntax_error_has_line_and_column():
    with pytest.raises(ScriptError, match=r"^line 6, column 20: invalid syntax"):
        from_source(body("lv0 = R.exp(x", "return lv0"))


def test_unknown_operator_suggests_close_names():
    with pytest.raises(ScriptError, match=r"^line 6, column 15: unknown operator 'expp'; did you mean exp"):
        from_source(body("lv0 = R.expp(x)", "return lv0"))


def test_wrong_rank_to_matmul_names_the_binding():
    with pytest.raises(ScriptError, match=r"^line 7, column 9: rank mismatch in lv1 = R.matmul\(lv0, w\): "
                       r"matmul needs tensors of rank >= 1, lv0 has rank 0"):
        from_source(body("lv0 = R.sum(x)", "lv1 = R.matmul(lv0, w)", "return lv1"))
    with pytest.raises(ScriptError, match=r"^line 7, column 9: shape mismatch in lv1 = R.matmul\(lv0, w\): "
                       r"lv0 has \(2, 8\), w has \(4, 4\)"):
        from_source(body("lv0 = R.reshape(w, R.shape([2, 8]))", "lv1 = R.matmul(lv0, w)", "return x"))


def test_symbolic_contraction_is_checked_at_run_time_not_rejected():
    import numpy as np
    from tessera.ir import RuntimeCheckError, interpret

    # (n * 4,) @ (4, 4) is fine when n == 1, so it parses; n == 2 fails when it runs.
    mod = from_source(body("lv0 = R.flatten(x)", "lv1 = R.matmul(lv0, w)", "return x"))
    interpret(mod, "main", np.ones((1, 4), np.float32), np.ones((4, 4), np.float32))
    with pytest.raises(RuntimeCheckError, match="ValueError: matmul"):
        interpret(mod, "main", np.ones((2, 4), np.float32), np.ones((4, 4), np.float32))


def test_undeclared_symbolic_variable():
    with pytest.raises(ScriptError, match=r"^line 6, column 72: symbolic variable 'm' is not declared; "
                       r"add `m = T.int64\(\)`"):
        from_source(body("lv0: R.Tensor((n, 4), dtype=\"float32\") = R.reshape(x, R.shape([m, 4]))",
                         "return lv0"))


def test_undefined_variable_and_dataflow_scope():
    with pytest.raises(ScriptError, match=r"^line 6, column 24: undefined variable 'y'"):
        from_source(body("lv0 = R.add(x, y)", "return lv0"))
    with pytest.raises(ScriptError, match=r"undefined variable 'lv0'"):
        from_source(body("with R.dataflow():", "    lv0 = R.exp(x)", "    gv = R.exp(lv0)",
                         "    R.output(gv)", "return lv0"))


def test_structure_errors():
    with pytest.raises(ScriptError, match="a dataflow block must end with R.output"):
        from_source(body("with R.dataflow():", "    lv0 = R.exp(x)", "return x"))
    with pytest.raises(ScriptError, match="dataflow blocks cannot contain control flow|a dataflow block holds "
                       "only bindings"):
        from_source(body("with R.dataflow():", "    if x:", "        y = x", "    else:", "        y = x",
                         "    R.output(y)", "return y"))
    with pytest.raises(ScriptError, match="'lv0' is already bound"):
        from_source(body("lv0 = R.exp(x)", "lv0 = R.exp(x)", "return lv0"))
    with pytest.raises(ScriptError, match="has no return"):
        from_source(body("lv0 = R.exp(x)"))
    with pytest.raises(ScriptError, match="expected exactly one `@I.ir_module class"):
        from_source("x = 1\n")
    with pytest.raises(ScriptError, match="R.sum has no attribute axes"):
        from_source(body("lv0 = R.sum(x, axes=[0])", "return lv0"))


def test_bad_struct_info_and_dtype():
    with pytest.raises(ScriptError, match="unknown dtype 'float33'"):
        from_source(body('lv0: R.Tensor((n, 4), dtype="float33") = R.exp(x)', "return lv0"))
    with pytest.raises(ScriptError, match="expected a struct info"):
        from_source(body("lv0: R.Tensr((n, 4)) = R.exp(x)", "return lv0"))


def test_match_cast_that_contradicts_static_info_still_parses_and_fails_at_run_time():
    import numpy as np
    from tessera.ir import RuntimeCheckError, interpret

    mod = from_source(body("m = T.int64()", "lv0 = R.match_cast(x, R.Tensor((m, 8), dtype=\"float32\"))",
                           "return x"))
    with pytest.raises(RuntimeCheckError, match=r"match_cast in lv0: R.Tensor\(\(m, 8\), dtype=\"float32\"\) = "
                       r"R.match_cast\(x, .*\): expected .*, got shape \(3, 4\): dimension 1 is 4, not 8"):
        interpret(mod, "main", np.zeros((3, 4), np.float32), np.zeros((4, 4), np.float32))


NESTED = ["@R.function", 'def f(y: R.Tensor(("m", 4), dtype="float32")) -> R.Tensor(("m", 4), dtype="float32"):']


def test_nested_function_errors():
    # A nested def sees what the enclosing function bound before it, nothing bound later.
    with pytest.raises(ScriptError, match=r"^line 9, column 26: undefined variable 'later'"):
        from_source(body(*NESTED, "    m = T.int64()", "    z = R.add(y, later)", "    return z",
                         "later = R.exp(x)", "return x"))
    with pytest.raises(ScriptError, match=r"^line 9, column 17: nested function 'f' cannot call itself; "
                       r"recursion needs a module-level function \(cls.f\)"):
        from_source(body(*NESTED, "    m = T.int64()", "    z = f(y)", "    return z", "return x"))
    with pytest.raises(ScriptError, match=r"^line 7, column 15: parameter 'w' of nested function 'g' is already "
                       r"bound in the enclosing function"):
        from_source(body("@R.function", 'def g(w: R.Tensor((4,), dtype="float32")) -> R.Tensor((4,), '
                         'dtype="float32"):', "    return w", "return x"))
    with pytest.raises(ScriptError, match=r"^line 7, column 9: 'x' is already bound"):
        from_source(body("@R.function", 'def x(w2: R.Tensor((4,), dtype="float32")) -> R.Tensor((4,), '
                         'dtype="float32"):', "    return w2", "return x"))
    with pytest.raises(ScriptError, match=r"^line 8, column 13: a nested function is defined in the function "
                       r"body, outside dataflow blocks"):
        from_source(body("with R.dataflow():", *["    " + line for line in NESTED], "        return y",
                         "    lv0 = R.exp(x)", "    R.output(lv0)", "return lv0"))
    with pytest.raises(ScriptError, match=r"^line 6, column 10: functions are decorated with @R.function, "
                       r"not @T.prim_func"):
        from_source(body("@T.prim_func", NESTED[1], "    return y", "return x"))
    # A symbolic variable the enclosing function does not declare is not captured from anywhere.
    with pytest.raises(ScriptError, match=r"symbolic variable 'q' is not declared"):
        from_source(body(*NESTED, "    m = T.int64()", "    z = R.reshape(y, R.shape([q, 4]))", "    return z",
                         "return x"))
