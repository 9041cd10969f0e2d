"""tir expressions as SPIR-V instructions: each expression becomes one SSA id.

Which instruction an operator becomes depends on the operand's kind: i32 is signed (``/`` is
OpSDiv and ``%`` is OpSRem, truncating as in C and WGSL), u32 unsigned, f16 and f32 float, bool
logical. Math that SPIR-V lacks is built as WGSL's renderer builds it (erf by Abramowitz & Stegun
7.1.26, tanh clamped to +-15, both in f32; floor division from truncating division). Where an
operand that is not always evaluated reads memory (the right side of ``&&``, a select's arms),
it is evaluated in a branch of its own, as the C-style languages do, so that a guard such as
``i < n && x[i] > 0`` keeps an out-of-bounds load from running.

``KernelEmitter`` (kernel.py) supplies what depends on the kernel's declarations: locals and
scalars, thread built-ins, and pointers to buffer elements.
"""

from __future__ import annotations

from collections.abc import Callable

from tessera.tir.ir import (
    COMPARISONS,
    Binary,
    Builtin,
    Call,
    Cast,
    Const,
    Load,
    Local,
    Select,
    TExpr,
    Unary,
    lanes_of,
    vector_of,
    walk_expr,
)
from tessera.tir.script import print_texpr

from .builder import FunctionBuilder, Module
from .errors import SPIRVError
from .spec import GLSL, GROUP_OPERATION_REDUCE, SELECTION_CONTROL_NONE, Capability, Op, Scope
from .types import KernelTypes, kind_of

# Binary operators by the operands' kind: "f" float, "i" signed, "u" unsigned, "b" bool.
BINARY_OPS = {
    "+": {"f": Op.FAdd, "i": Op.IAdd, "u": Op.IAdd},
    "-": {"f": Op.FSub, "i": Op.ISub, "u": Op.ISub},
    "*": {"f": Op.FMul, "i": Op.IMul, "u": Op.IMul},
    "/": {"f": Op.FDiv, "i": Op.SDiv, "u": Op.UDiv},
    "%": {"f": Op.FRem, "i": Op.SRem, "u": Op.UMod},
    "<": {"f": Op.FOrdLessThan, "i": Op.SLessThan, "u": Op.ULessThan},
    "<=": {"f": Op.FOrdLessThanEqual, "i": Op.SLessThanEqual, "u": Op.ULessThanEqual},
    ">": {"f": Op.FOrdGreaterThan, "i": Op.SGreaterThan, "u": Op.UGreaterThan},
    ">=": {"f": Op.FOrdGreaterThanEqual, "i": Op.SGreaterThanEqual, "u": Op.UGreaterThanEqual},
    "==": {"f": Op.FOrdEqual, "i": Op.IEqual, "u": Op.IEqual, "b": Op.LogicalEqual},
    # Unordered: NaN != NaN holds, as in C and WGSL.
    "!=": {"f": Op.FUnordNotEqual, "i": Op.INotEqual, "u": Op.INotEqual, "b": Op.LogicalNotEqual},
    "&": {"i": Op.BitwiseAnd, "u": Op.BitwiseAnd, "b": Op.LogicalAnd},
    "|": {"i": Op.BitwiseOr, "u": Op.BitwiseOr, "b": Op.LogicalOr},
    "^": {"i": Op.BitwiseXor, "u": Op.BitwiseXor, "b": Op.LogicalNotEqual},
    "<<": {"i": Op.ShiftLeftLogical, "u": Op.ShiftLeftLogical},
    ">>": {"i": Op.ShiftRightArithmetic, "u": Op.ShiftRightLogical},
    "&&": {"b": Op.LogicalAnd},
    "||": {"b": Op.LogicalOr},
}
GLSL_BINARY = {
    "min": {"f": GLSL.FMin, "i": GLSL.SMin, "u": GLSL.UMin},
    "max": {"f": GLSL.FMax, "i": GLSL.SMax, "u": GLSL.UMax},
    "pow": {"f": GLSL.Pow},
    "atan2": {"f": GLSL.Atan2},
}
GLSL_UNARY = {
    "exp": GLSL.Exp, "log": GLSL.Log, "sqrt": GLSL.Sqrt, "rsqrt": GLSL.InverseSqrt, "sin": GLSL.Sin,
    "cos": GLSL.Cos, "floor": GLSL.Floor, "ceil": GLSL.Ceil, "atan": GLSL.Atan,
    "round": GLSL.RoundEven,  # halfway cases to even, as WGSL's round and C's rint
}
SUBGROUP_OPS = {
    "subgroup_add": {"f": Op.GroupNonUniformFAdd, "i": Op.GroupNonUniformIAdd, "u": Op.GroupNonUniformIAdd},
    "subgroup_max": {"f": Op.GroupNonUniformFMax, "i": Op.GroupNonUniformSMax, "u": Op.GroupNonUniformUMax},
    "subgroup_min": {"f": Op.GroupNonUniformFMin, "i": Op.GroupNonUniformSMin, "u": Op.GroupNonUniformUMin},
}
# erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): the polynomial's coefficients, a5 first.
ERF_P = 0.3275911
ERF_A = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
# The f32 values nearest each integer type's bounds from inside its range (2**31 - 128, 2**32 - 256):
# where a float -> int conversion saturates, as WGSL specifies.
F32_INT_BOUNDS = {"i32": (-2147483648.0, 2147483520.0), "u32": (0.0, 4294967040.0)}
TANH_LIMIT = 15.0  # tanh is +-1 in f32 long before; clamping keeps exp-based tanh finite
TANH_SERIES_BELOW = 0.05


def reads_memory(e: TExpr) -> bool:
    return any(isinstance(x, Load) for x in walk_expr(e))


class ExpressionEmitter:
    module: Module
    types: KernelTypes
    fn: FunctionBuilder

    # -- hooks for the kernel ---------------------------------------------------------------

    def local_value(self, e: Local) -> int:
        raise NotImplementedError

    def builtin_value(self, e: Builtin) -> int:
        raise NotImplementedError

    def element_pointer(self, buffer, index: int, lanes: int) -> int:
        raise NotImplementedError

    # -- the walk ------------------------------------------------------------------------------

    def value(self, e: TExpr) -> int:
        if isinstance(e, Const):
            return self.types.constant(e.value, e.dtype)
        if isinstance(e, Local):
            return self.local_value(e)
        if isinstance(e, Builtin):
            return self.builtin_value(e)
        if isinstance(e, Load):
            pointer = self.element_pointer(e.buffer, self.value(e.index), e.lanes)
            return self.op(Op.Load, e.dtype, pointer)
        if isinstance(e, Binary):
            return self.binary(e)
        if isinstance(e, Unary):
            return self.unary(e.op, self.value(e.x), e.x.dtype, e.dtype)
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, Cast):
            return self.convert(self.value(e.x), e.x.dtype, e.dtype)
        if isinstance(e, Select):
            return self.select(e)
        raise SPIRVError(f"no SPIR-V for the expression {type(e).__name__} {e!r}")

    def op(self, opcode: int, dtype: str, *operands: int) -> int:
        return self.fn.emit(opcode, self.types.of(dtype), *operands)

    def glsl(self, instruction: int, dtype: str, *operands: int) -> int:
        return self.op(Op.ExtInst, dtype, self.module.glsl(), instruction, *operands)

    def binary(self, e: Binary) -> int:
        kind = kind_of(e.a.dtype)
        if e.op in ("&&", "||") and lanes_of(e.dtype)[1] == 1 and reads_memory(e.b):
            a = self.value(e.a)
            if e.op == "&&":
                return self.conditional(a, lambda: self.value(e.b), lambda: self.types.constant(False, "bool"), "bool")
            return self.conditional(a, lambda: self.types.constant(True, "bool"), lambda: self.value(e.b), "bool")
        a, b = self.value(e.a), self.value(e.b)
        table = GLSL_BINARY.get(e.op) or BINARY_OPS.get(e.op)
        if table is None or kind not in table:
            raise SPIRVError(f"no SPIR-V instruction for {e.op} of {e.a.dtype} operands in {print_texpr(e)}")
        if e.op in GLSL_BINARY:
            return self.glsl(table[kind], e.dtype, a, b)
        # A comparison's result has the operands' lanes, whatever dtype the node was given.
        dtype = vector_of("bool", lanes_of(e.a.dtype)[1]) if e.op in COMPARISONS else e.dtype
        return self.op(table[kind], dtype, a, b)

    def unary(self, name: str, x: int, source: str, dtype: str) -> int:
        kind = kind_of(source)
        if name == "neg":
            return self.op(Op.FNegate if kind == "f" else Op.SNegate, dtype, x)
        if name == "not":
            return self.op(Op.LogicalNot if kind == "b" else Op.Not, dtype, x)
        if name == "abs":
            return x if kind == "u" else self.glsl(GLSL.FAbs if kind == "f" else GLSL.SAbs, dtype, x)
        if name in GLSL_UNARY:
            return self.glsl(GLSL_UNARY[name], dtype, x)
        if name in ("erf", "tanh"):
            return self.in_f32(x, dtype, self.erf if name == "erf" else self.tanh)
        if name in ("bitcast_u32", "bitcast_f32"):  # an f32's IEEE bits, and back
            return self.op(Op.Bitcast, dtype, x)
        if name == "sign_extend8":  # the low byte of a u32 as a signed i32: up to the top, back arithmetically
            shift = self.types.constant(24, vector_of("u32", lanes_of(source)[1]))
            high = self.op(Op.ShiftLeftLogical, source, x, shift)
            return self.op(Op.ShiftRightArithmetic, dtype, self.op(Op.Bitcast, dtype, high), shift)
        if name == "f16_bits_to_f32":  # the low 16 bits of a u32, as an IEEE half
            return self.per_lane(x, source, dtype, self.half_bits_to_f32)
        if name in SUBGROUP_OPS:
            return self.subgroup(name, x, dtype)
        raise SPIRVError(f"no SPIR-V for the intrinsic {name}({source})")

    def call(self, e: Call) -> int:
        if len(e.args) == 1:
            return self.unary(e.name, self.value(e.args[0]), e.args[0].dtype, e.dtype)
        args = [self.value(a) for a in e.args]
        kind = kind_of(e.args[0].dtype)
        if e.name in GLSL_BINARY and kind in GLSL_BINARY[e.name]:
            return self.glsl(GLSL_BINARY[e.name][kind], e.dtype, *args)
        if e.name == "clamp" and kind != "b":
            return self.glsl({"f": GLSL.FClamp, "i": GLSL.SClamp, "u": GLSL.UClamp}[kind], e.dtype, *args)
        if e.name == "fma":
            return self.glsl(GLSL.Fma, e.dtype, *args)
        if e.name == "floordiv":
            return self.floordiv(*args, e.dtype)
        raise SPIRVError(f"no SPIR-V for the intrinsic {e.name} of {len(e.args)} operands in {print_texpr(e)}")

    def select(self, e: Select) -> int:
        cond = self.value(e.cond)
        lanes = lanes_of(e.dtype)[1]
        if lanes == 1 and (reads_memory(e.a) or reads_memory(e.b)):
            return self.conditional(cond, lambda: self.value(e.a), lambda: self.value(e.b), e.dtype)
        if lanes > 1 and lanes_of(e.cond.dtype)[1] == 1:  # SPIR-V 1.3 wants a condition per lane
            cond = self.op(Op.CompositeConstruct, vector_of("bool", lanes), *[cond] * lanes)
        return self.op(Op.Select, e.dtype, cond, self.value(e.a), self.value(e.b))

    def convert(self, x: int, source: str, target: str) -> int:
        """A value cast: numeric conversion between kinds and widths, bool as 0/1."""
        if source == target:
            return x
        lanes = lanes_of(target)[1]
        have, want = kind_of(source), kind_of(target)
        if want == "b":
            zero = self.types.constant(0, source)
            return self.op(Op.FUnordNotEqual if have == "f" else Op.INotEqual, target, x, zero)
        if have == "b":
            one, zero = self.types.constant(1, target), self.types.constant(0, target)
            return self.op(Op.Select, target, x, one, zero)
        if have == "f" and want == "f":
            return self.op(Op.FConvert, target, x)
        if want == "f":
            return self.op(Op.ConvertSToF if have == "i" else Op.ConvertUToF, target, x)
        if have == "f":
            return self.float_to_int(x, source, target)
        assert lanes_of(source)[1] == lanes
        return self.op(Op.Bitcast, target, x)  # i32 <-> u32 keep their bits

    def float_to_int(self, x: int, source: str, target: str) -> int:
        """A saturating conversion, as WGSL's: NaN becomes 0 and a value out of range the nearest
        bound. OpConvertFToS and OpConvertFToU alone are undefined outside the integer's range."""
        lanes = lanes_of(target)[1]
        wide = vector_of("f32", lanes)
        if lanes_of(source)[0] == "f16":
            x = self.op(Op.FConvert, wide, x)  # f16 bounds would round to infinity
        low, high = F32_INT_BOUNDS[lanes_of(target)[0]]
        c = self.types.constant
        number = self.op(Op.Select, wide, self.op(Op.IsNan, vector_of("bool", lanes), x), c(0.0, wide), x)
        clamped = self.glsl(GLSL.FClamp, wide, number, c(low, wide), c(high, wide))
        return self.op(Op.ConvertFToS if kind_of(target) == "i" else Op.ConvertFToU, target, clamped)

    # -- control flow inside an expression --------------------------------------------------

    def conditional(self, cond: int, when_true: Callable[[], int], when_false: Callable[[], int], dtype: str) -> int:
        """``cond ? when_true() : when_false()`` with each side evaluated only on its own branch."""
        fn = self.fn
        true_label, false_label, merge = (self.module.fresh() for _ in range(3))
        fn.emit(Op.SelectionMerge, None, merge, SELECTION_CONTROL_NONE)
        fn.emit(Op.BranchConditional, None, cond, true_label, false_label)
        incoming = []
        for label, side in ((true_label, when_true), (false_label, when_false)):
            fn.label(label)
            incoming += [side(), fn.block]
            fn.emit(Op.Branch, None, merge)
        fn.label(merge)
        return self.op(Op.Phi, dtype, *incoming)

    # -- math SPIR-V has no instruction for ---------------------------------------------------

    def in_f32(self, x: int, dtype: str, fn: Callable[[int, str], int]) -> int:
        """``fn`` computed in f32 (lanes kept): f16 goes up and comes back down."""
        scalar, lanes = lanes_of(dtype)
        wide = vector_of("f32", lanes)
        if scalar == "f32":
            return fn(x, wide)
        return self.op(Op.FConvert, dtype, fn(self.op(Op.FConvert, wide, x), wide))

    def erf(self, x: int, dtype: str) -> int:
        c = self.types.constant
        t = self.op(Op.FDiv, dtype, c(1.0, dtype),
                    self.op(Op.FAdd, dtype, c(1.0, dtype),
                            self.op(Op.FMul, dtype, c(ERF_P, dtype), self.glsl(GLSL.FAbs, dtype, x))))
        poly = c(ERF_A[0], dtype)
        for coefficient in ERF_A[1:]:
            poly = self.op(Op.FAdd, dtype, self.op(Op.FMul, dtype, poly, t), c(coefficient, dtype))
        gauss = self.glsl(GLSL.Exp, dtype, self.op(Op.FNegate, dtype, self.op(Op.FMul, dtype, x, x)))
        y = self.op(Op.FSub, dtype, c(1.0, dtype),
                    self.op(Op.FMul, dtype, self.op(Op.FMul, dtype, poly, t), gauss))
        positive = self.op(Op.FOrdGreaterThanEqual, vector_of("bool", lanes_of(dtype)[1]), x, c(0.0, dtype))
        return self.op(Op.Select, dtype, positive, y, self.op(Op.FNegate, dtype, y))

    def tanh(self, x: int, dtype: str) -> int:
        """Below |x| = TANH_SERIES_BELOW, x - x^3/3 + 2x^5/15 (relative error under 0.06 x^6), where an
        exp-based tanh cancels (as WGSL's helper does)."""
        c = self.types.constant
        clamped = self.glsl(GLSL.FClamp, dtype, x, c(-TANH_LIMIT, dtype), c(TANH_LIMIT, dtype))
        full = self.glsl(GLSL.Tanh, dtype, clamped)
        x2 = self.op(Op.FMul, dtype, x, x)
        inner = self.op(Op.FSub, dtype, c(1.0 / 3.0, dtype), self.op(Op.FMul, dtype, x2, c(2.0 / 15.0, dtype)))
        series = self.op(Op.FMul, dtype, x, self.op(Op.FSub, dtype, c(1.0, dtype), self.op(Op.FMul, dtype, x2, inner)))
        small = self.op(Op.FOrdLessThan, vector_of("bool", lanes_of(dtype)[1]), self.glsl(GLSL.FAbs, dtype, x),
                        c(TANH_SERIES_BELOW, dtype))
        return self.op(Op.Select, dtype, small, series, full)

    def floordiv(self, a: int, b: int, dtype: str) -> int:
        """Division rounding toward negative infinity: the truncated quotient, one less where the
        remainder is not zero and the operands' signs differ."""
        bools = vector_of("bool", lanes_of(dtype)[1])
        zero, one = self.types.constant(0, dtype), self.types.constant(1, dtype)
        quotient = self.op(Op.SDiv, dtype, a, b)
        inexact = self.op(Op.INotEqual, bools, self.op(Op.SRem, dtype, a, b), zero)
        signs_differ = self.op(Op.LogicalNotEqual, bools, self.op(Op.SLessThan, bools, a, zero),
                               self.op(Op.SLessThan, bools, b, zero))
        adjust = self.op(Op.LogicalAnd, bools, inexact, signs_differ)
        return self.op(Op.Select, dtype, adjust, self.op(Op.ISub, dtype, quotient, one), quotient)

    def half_bits_to_f32(self, word: int) -> int:
        pair = self.glsl(GLSL.UnpackHalf2x16, "f32x2", word)
        return self.fn.emit(Op.CompositeExtract, self.types.of("f32"), pair, 0)

    def per_lane(self, x: int, source: str, dtype: str, fn: Callable[[int], int]) -> int:
        """A scalar-only instruction applied to each lane of a vector."""
        scalar, lanes = lanes_of(source)
        if lanes == 1:
            return fn(x)
        parts = [fn(self.fn.emit(Op.CompositeExtract, self.types.of(scalar), x, lane)) for lane in range(lanes)]
        return self.op(Op.CompositeConstruct, dtype, *parts)

    def subgroup(self, name: str, x: int, dtype: str) -> int:
        kind = kind_of(dtype)
        if kind not in SUBGROUP_OPS[name]:
            raise SPIRVError(f"no SPIR-V for {name} of {dtype}")
        self.module.capability(Capability.GroupNonUniform)
        self.module.capability(Capability.GroupNonUniformArithmetic)
        scope = self.module.constant_u32(Scope.Subgroup)
        return self.op(SUBGROUP_OPS[name][kind], dtype, scope, GROUP_OPERATION_REDUCE, x)
