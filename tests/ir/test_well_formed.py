"""Each well-formedness rule, broken once, with the message that names it."""

import numpy as np
import pytest
from tessera import op
from tessera.arith import Var as SymVar
from tessera.ir import (
    BindingBlock,
    Call,
    DataflowBlock,
    DataflowVar,
    ExternFunc,
    Function,
    GlobalVar,
    IRModule,
    MatchCast,
    SeqExpr,
    ShapeExpr,
    Tensor,
    Var,
    VarBinding,
    WellFormedError,
    well_formed,
)
from tessera.ir.builder import BlockBuilder

F32 = "float32"


def module_of(params, blocks, body, ret, pure=True):
    return IRModule({"main": Function(tuple(params), SeqExpr(tuple(blocks), body), ret, (), pure)})


def bound(var_type, name, call, bb=None):
    """A binding whose struct info comes from real deduction."""
    bb = bb or BlockBuilder()
    x = call.args[0] if call.args else None
    with bb.function("tmp", [x] if isinstance(x, Var) else []):
        value = bb.normalize(call)
        bb.emit_func_output(x)
    return var_type(name, value.struct_info), value


def test_dataflow_var_escaping_its_block():
    x = Var("x", Tensor(("n",), F32))
    lv, value = bound(DataflowVar, "lv0", op.exp(x))
    mod = module_of([x], [DataflowBlock((VarBinding(lv, value),))], lv, lv.struct_info)
    with pytest.raises(WellFormedError, match="dataflow variable 'lv0' is used outside its dataflow block "
                       r"\(in the result lv0\)"):
        well_formed(mod)


def test_variable_used_before_it_is_bound():
    x = Var("x", Tensor(("n",), F32))
    a, a_value = bound(Var, "a", op.exp(x))
    b = Var("b", a.struct_info)
    b_value = Call(a_value.op, (a,), a_value.attrs, (), a.struct_info)  # exp(a), bound before a
    mod = module_of([x], [BindingBlock((VarBinding(b, b_value), VarBinding(a, a_value)))], b, b.struct_info)
    with pytest.raises(WellFormedError, match=r"'a' is used before it is bound \(in b: "
                       r"R.Tensor\(\(n,\), dtype=\"float32\"\) = R.exp\(a\)\)"):
        well_formed(mod)


def test_symbolic_variable_used_before_definition():
    x = Var("x", Tensor(("n",), F32))
    m = SymVar("m")
    y = Var("y", Tensor((m,), F32))
    lv = Var("lv", Tensor((m,), F32))
    # lv's annotation mentions m, which only the later match_cast defines.
    blocks = [BindingBlock((VarBinding(lv, ShapeExpr((m,))),
                            MatchCast(y, x, Tensor((m,), F32))))]
    mod = module_of([x], blocks, y, Tensor(ndim=1, dtype=F32))
    with pytest.raises(WellFormedError, match="symbolic variable 'm' is used before it is defined"):
        well_formed(mod)


def test_symbolic_variable_only_inside_an_expression_is_not_defined():
    x = Var("x", Tensor(("n * 2",), F32))
    mod = module_of([x], [], x, x.struct_info)
    with pytest.raises(WellFormedError, match=r"symbolic variable 'n' is used before it is defined \(in "
                       r"parameter x: R.Tensor\(\(\"n \* 2\",\), dtype=\"float32\"\)\)"):
        well_formed(mod)


def test_impure_call_in_dataflow_block():
    x = Var("x", Tensor(("n",), F32))
    lv = DataflowVar("lv0", Tensor(ndim=1, dtype=F32))
    call = Call(ExternFunc("vm.builtin.print"), (x,), (), (Tensor(ndim=1, dtype=F32),),
                Tensor(ndim=1, dtype=F32))
    gv = Var("gv", Tensor(ndim=1, dtype=F32))
    blocks = [DataflowBlock((VarBinding(lv, call), VarBinding(gv, lv)))]
    mod = module_of([x], blocks, gv, gv.struct_info)
    with pytest.raises(WellFormedError, match=r"impure call in a dataflow block \(in lv0: .* = "
                       r"R.call_packed\(\"vm.builtin.print\", x"):
        well_formed(mod)


def test_dataflow_var_bound_outside_dataflow_block_and_double_binding():
    x = Var("x", Tensor((2,), F32))
    lv, value = bound(DataflowVar, "lv0", op.exp(x))
    mod = module_of([x], [BindingBlock((VarBinding(lv, value),))], x, x.struct_info)
    with pytest.raises(WellFormedError, match="dataflow variable 'lv0' is bound outside a dataflow block"):
        well_formed(mod)
    gv, value = bound(Var, "gv", op.exp(x))
    mod = module_of([x], [BindingBlock((VarBinding(gv, value), VarBinding(gv, value)))], gv, gv.struct_info)
    with pytest.raises(WellFormedError, match="'gv' is bound twice"):
        well_formed(mod)


def test_inconsistent_struct_info():
    x = Var("x", Tensor(("n", 4), F32))
    _, value = bound(Var, "gv", op.exp(x))
    lying = Var("gv", Tensor(("n", 5), F32))
    mod = module_of([x], [BindingBlock((VarBinding(lying, value),))], lying, lying.struct_info)
    with pytest.raises(WellFormedError, match=r"'gv' is annotated \(n, 5\) float32 but its value has "
                       r"\(n, 4\) float32"):
        well_formed(mod)
    gv = Var("gv", value.struct_info)
    mod = module_of([x], [BindingBlock((VarBinding(gv, value),))], gv, Tensor(("n", 8), F32))
    with pytest.raises(WellFormedError, match=r"the body returns \(n, 4\) float32 but the function is "
                       r"annotated \(n, 8\) float32"):
        well_formed(mod)


def test_unknown_global_and_vdevice():
    x = Var("x", Tensor((2,), F32, vdevice="webgpu:0"))
    mod = module_of([x], [], x, x.struct_info)
    with pytest.raises(WellFormedError, match="virtual device 'webgpu:0' is not declared"):
        well_formed(mod)
    y = Var("y", Tensor((2,), F32))
    gv = Var("gv", Tensor((2,), F32))
    call = Call(GlobalVar("missing"), (y,), struct_info=Tensor((2,), F32))
    mod = module_of([y], [BindingBlock((VarBinding(gv, call),))], gv, gv.struct_info)
    with pytest.raises(WellFormedError, match="the module has no function 'missing'"):
        well_formed(mod)


def test_builder_made_modules_are_well_formed():
    from modules import CATALOGUE

    for factory in CATALOGUE.values():
        well_formed(factory())


def test_constant_only_module_is_fine():
    from tessera.ir import Constant

    c = Constant(np.ones(2, np.float32))
    mod = module_of([], [], c, c.struct_info)
    well_formed(mod)


NESTED_CAPTURE = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n",), dtype="float32")) -> R.Tensor(dtype="float32", ndim=1):
        n = T.int64()
        m = T.int64()
{before}        @R.function
        def f(y: R.Tensor(("n",), dtype="float32")) -> R.Tensor(dtype="float32", ndim=1):
            n = T.int64()
            z: R.Tensor((m,), dtype="float32") = R.zeros(R.shape([m]), dtype="float32")
            return z
{after}        out: R.Tensor(dtype="float32", ndim=1) = f(x)
        return out
'''
DEFINES_M = ('        u: R.Tensor(dtype="float32", ndim=1) = R.unique(x)\n'
             '        um: R.Tensor((m,), dtype="float32") = R.match_cast(u, R.Tensor((m,), dtype="float32"))\n')


def test_nested_function_sees_only_what_is_defined_before_it():
    from tessera.script import from_source

    well_formed(from_source(NESTED_CAPTURE.format(before=DEFINES_M, after="")))
    # m is declared for the text, but its match_cast comes after the def: f cannot capture it.
    with pytest.raises(WellFormedError, match=r"in function 'main', nested function 'f': symbolic variable 'm' "
                       r"is used before it is defined"):
        well_formed(from_source(NESTED_CAPTURE.format(before="", after=DEFINES_M)))
