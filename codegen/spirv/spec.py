"""The numbers of the SPIR-V specification (1.3) and of GLSL.std.450 that the emitter uses.

Only what Tessera's kernels need is listed, by the specification's own names, so that a reader can
look each one up. ``tests/codegen/test_spirv.py`` checks the opcodes against spirv-dis and the
enumerants (capabilities, decorations, built-ins, storage classes, GLSL.std.450) against spirv-as.
"""

from __future__ import annotations

MAGIC = 0x07230203
VERSION_1_3 = 0x00010300  # what Vulkan 1.1 consumes; GroupNonUniform and StorageBuffer are core in it
GENERATOR = 0  # no registered tool id: "unknown generator"


class Op:
    Name = 5
    MemberName = 6
    Extension = 10
    ExtInstImport = 11
    ExtInst = 12
    MemoryModel = 14
    EntryPoint = 15
    ExecutionMode = 16
    Capability = 17
    TypeVoid = 19
    TypeBool = 20
    TypeInt = 21
    TypeFloat = 22
    TypeVector = 23
    TypeArray = 28
    TypeRuntimeArray = 29
    TypeStruct = 30
    TypePointer = 32
    TypeFunction = 33
    ConstantTrue = 41
    ConstantFalse = 42
    Constant = 43
    ConstantComposite = 44
    Function = 54
    FunctionEnd = 56
    Variable = 59
    Load = 61
    Store = 62
    AccessChain = 65
    Decorate = 71
    MemberDecorate = 72
    CompositeConstruct = 80
    CompositeExtract = 81
    ConvertFToU = 109
    ConvertFToS = 110
    ConvertSToF = 111
    ConvertUToF = 112
    FConvert = 115
    Bitcast = 124
    SNegate = 126
    FNegate = 127
    IAdd = 128
    FAdd = 129
    ISub = 130
    FSub = 131
    IMul = 132
    FMul = 133
    UDiv = 134
    SDiv = 135
    FDiv = 136
    UMod = 137
    SRem = 138
    FRem = 140
    IsNan = 156
    LogicalEqual = 164
    LogicalNotEqual = 165
    LogicalOr = 166
    LogicalAnd = 167
    LogicalNot = 168
    Select = 169
    IEqual = 170
    INotEqual = 171
    UGreaterThan = 172
    SGreaterThan = 173
    UGreaterThanEqual = 174
    SGreaterThanEqual = 175
    ULessThan = 176
    SLessThan = 177
    ULessThanEqual = 178
    SLessThanEqual = 179
    FOrdEqual = 180
    FOrdLessThan = 184
    FOrdGreaterThan = 186
    FOrdLessThanEqual = 188
    FOrdGreaterThanEqual = 190
    FUnordNotEqual = 183
    ShiftRightLogical = 194
    ShiftRightArithmetic = 195
    ShiftLeftLogical = 196
    BitwiseOr = 197
    BitwiseXor = 198
    BitwiseAnd = 199
    Not = 200
    ControlBarrier = 224
    Phi = 245
    LoopMerge = 246
    SelectionMerge = 247
    Label = 248
    Branch = 249
    BranchConditional = 250
    Return = 253
    GroupNonUniformIAdd = 349
    GroupNonUniformFAdd = 350
    GroupNonUniformSMin = 353
    GroupNonUniformUMin = 354
    GroupNonUniformFMin = 355
    GroupNonUniformSMax = 356
    GroupNonUniformUMax = 357
    GroupNonUniformFMax = 358


class Capability:
    Shader = 1
    Float16 = 9
    GroupNonUniform = 61
    GroupNonUniformArithmetic = 63
    StorageBuffer16BitAccess = 4433


class StorageClass:
    Input = 1
    Workgroup = 4
    Function = 7
    PushConstant = 9
    StorageBuffer = 12


class Decoration:
    Block = 2
    ArrayStride = 6
    BuiltIn = 11
    Binding = 33
    DescriptorSet = 34
    Offset = 35


class BuiltIn:
    NumWorkgroups = 24
    WorkgroupId = 26
    LocalInvocationId = 27
    SubgroupSize = 36
    SubgroupLocalInvocationId = 41


class Scope:
    Workgroup = 2
    Subgroup = 3


class MemorySemantics:
    AcquireRelease = 0x8
    UniformMemory = 0x40
    WorkgroupMemory = 0x100


EXECUTION_MODEL_GLCOMPUTE = 5
EXECUTION_MODE_LOCAL_SIZE = 17
ADDRESSING_LOGICAL = 0
MEMORY_MODEL_GLSL450 = 1
GROUP_OPERATION_REDUCE = 0
FUNCTION_CONTROL_NONE = 0
SELECTION_CONTROL_NONE = 0
LOOP_CONTROL_NONE = 0
EXTENSION_16BIT_STORAGE = "SPV_KHR_16bit_storage"


class GLSL:
    """Instruction numbers of the GLSL.std.450 extended instruction set."""

    IMPORT_NAME = "GLSL.std.450"
    RoundEven = 2
    FAbs = 4
    SAbs = 5
    Floor = 8
    Ceil = 9
    Sin = 13
    Cos = 14
    Atan = 18
    Tanh = 21
    Atan2 = 25
    Pow = 26
    Exp = 27
    Log = 28
    Sqrt = 31
    InverseSqrt = 32
    FMin = 37
    UMin = 38
    SMin = 39
    FMax = 40
    UMax = 41
    SMax = 42
    FClamp = 43
    UClamp = 44
    SClamp = 45
    Fma = 50
    UnpackHalf2x16 = 62
