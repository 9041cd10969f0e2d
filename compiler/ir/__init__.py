"""The graph-level IR: struct info, expressions, blocks, modules, builder, printer, checks."""

from .builder import BlockBuilder
from .deduce import DeduceContext, deduce
from .errors import (
    DeductionError,
    RuntimeCheckError,
    ScriptError,
    TesseraError,
    UnknownOpError,
    WellFormedError,
)
from .expr import (
    Binding,
    BindingBlock,
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    If,
    MatchCast,
    Op,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
)
from .module import IRModule, VDevice
from .printer import print_binding, print_expr, print_function, print_module, print_sinfo
from .struct_info import (
    FuncStructInfo,
    ObjectStructInfo,
    PrimStructInfo,
    Shape,
    ShapeStructInfo,
    StructInfo,
    Tensor,
    TensorStructInfo,
    TupleStructInfo,
    is_base_of,
)


def interpret(mod, func_name, *args, **kwargs):
    """Run ``mod[func_name]`` on numpy arrays with the reference interpreter (see interpreter.py)."""
    from .interpreter import interpret as _interpret

    return _interpret(mod, func_name, *args, **kwargs)


def well_formed(mod) -> None:
    """Raise WellFormedError naming the first broken rule (see well_formed.py)."""
    from .well_formed import check_well_formed

    check_well_formed(mod)
