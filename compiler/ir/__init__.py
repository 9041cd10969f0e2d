"""The graph-level IR: struct info, expressions, blocks, modules, builder, printer, checks."""

from .builder import BlockBuilder
from .deduce import DeduceContext, deduce
from .errors import (
    BindingLimitError,
    DeductionError,
    MemoryPlanError,
    RuntimeCheckError,
    ScriptError,
    TesseraError,
    UnknownOpError,
    UnknownVDeviceError,
    VDeviceConflictError,
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
from .interpreter import ShapeValue, interpret
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
from .structural import StructuralMismatch, assert_structural_equal, structural_equal
from .vdevice import VDeviceRewriter, rename_vdevices, resolve_vdevices, vdevice_uses
from .well_formed import check_well_formed as well_formed
