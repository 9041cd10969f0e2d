"""OpenCL C 1.2: a dialect of the shared C-style renderer.

Kernel ABI: ``__kernel void k_<name>(__global T* <inputs>..., __global T* <outputs>...,
int sym_<scalar>...)``, the kernel's buffers in binding order and then its symbolic scalars as
``int`` arguments, with ``reqd_work_group_size`` stating the workgroup size. A launch is an NDRange
of ``grid * workgroup_size`` work items in workgroups of ``workgroup_size``. Workgroup scratch is
``__local`` and private scratch a plain array, both declared at kernel scope (OpenCL C wants
``__local`` variables there).

Kernels come lowered for ``LOWERING``: global buffers hold float32, float16, int32 or uint32
(bool and int64 tensors are already 32-bit words, ``tessera.tir.lower.storage``). A float16
buffer is ``__global half*``. Core OpenCL 1.2 may only load and store halves
(``vload_half``/``vstore_half`` convert to and from float); arithmetic on ``half`` needs the
``cl_khr_fp16`` extension, which many devices (PoCL, older phones) lack. So unless the target has
that feature, an f16 value is computed as ``float`` and only its loads and stores are halves.
"""

from __future__ import annotations

from tessera.tir.ir import (
    COMPARISONS,
    LOGICAL,
    SCALAR_PREFIX,
    Binary,
    Buffer,
    Builtin,
    IfThen,
    Local,
    PrimFunc,
    Select,
    Stmt,
    TExpr,
    lanes_of,
)
from tessera.tir.lower import LoweringNeeds

from .. import entry_name, static_size
from ..cstyle import CStyleRenderer, float_text

# Global buffers hold f32, f16, i32 and u32; a workgroup's threads run in parallel, so barriers stay.
LOWERING = LoweringNeeds(storage_types={"float32", "float16", "int32", "uint32"}, unroll=True)

# The extension (and target feature) that makes `half` an arithmetic type.
FP16_EXTENSION = "cl_khr_fp16"

# C keywords, OpenCL C's own (address spaces, access qualifiers, types) and the built-in functions
# and type names a tir local or buffer could be called (a local named `min` would hide min()).
OPENCL_RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
bool true false half uchar ushort uint ulong size_t ptrdiff_t intptr_t uintptr_t event_t sampler_t
image1d_t image2d_t image3d_t image1d_array_t image2d_array_t image1d_buffer_t
__kernel kernel __global global __local local __constant constant __private private __read_only read_only
__write_only write_only __read_write read_write __attribute__ uniform pipe
min max clamp mix step smoothstep sign select abs fabs fmin fmax fma mad exp exp2 exp10 log log2 log10
sqrt rsqrt sin cos tan asin acos atan atan2 sinh cosh tanh erf erfc pow pown powr floor ceil round rint
trunc fmod remainder dot cross length distance normalize any all bitselect shuffle shuffle2 rotate clz
barrier mem_fence read_mem_fence write_mem_fence get_local_id get_group_id get_num_groups get_global_id
get_local_size get_global_size get_work_dim vload2 vload4 vload8 vload16 vstore2 vstore4 vstore8 vstore16
vload_half vstore_half as_int as_uint as_float convert_int convert_uint convert_float printf
INFINITY NAN MAXFLOAT HUGE_VALF
""".split()) | frozenset(f"{t}{n}" for t in ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong",
                                              "float", "double", "half") for n in (2, 3, 4, 8, 16))

_FLOORDIV = """int tsr_floordiv(int a, int b) {
  int q = a / b;
  return (a % b != 0) && ((a < 0) != (b < 0)) ? q - 1 : q;
}"""
# The low 16 bits of a word as an IEEE half (GGUF block scales): vload_half reads a private half.
_HALF_BITS = """float tsr_half_bits(uint bits) {
  ushort h = (ushort)bits;
  return vload_half(0, (const half*)&h);
}"""

_BUILTINS = {"local_id": "get_local_id", "workgroup_id": "get_group_id", "num_workgroups": "get_num_groups"}
_FLOATS = ("f32", "f16")
_SCRATCH_SPACES = {"workgroup": "__local ", "private": ""}  # both declared at kernel scope


class OpenCLRenderer(CStyleRenderer):
    types = {"f32": "float", "f16": "float", "i32": "int", "u32": "uint", "bool": "bool"}
    intrinsics = {
        "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos",
        "floor": "floor", "ceil": "ceil", "round": "rint", "pow": "pow", "clamp": "clamp", "fma": "fma",
        "erf": "erf", "tanh": "tanh", "bitcast_u32": "as_uint",
    }
    reserved = OPENCL_RESERVED
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    storage_barrier = "barrier(CLK_GLOBAL_MEM_FENCE);"
    lowering = LOWERING

    def __init__(self, func: PrimFunc, native_half: bool = False):
        """``native_half``: the device has cl_khr_fp16, so f16 values are computed as ``half``."""
        super().__init__(func)
        self.native_half = native_half
        if native_half:
            self.types = dict(self.types, f16="half")

    def render(self) -> str:
        func = self.func
        self.stmts(func.body, 1)
        params = [f"__global {self.storage_type(buf)}* {self.name(buf.name)}" for buf in func.params]
        params += [f"int {SCALAR_PREFIX}{s}" for s in func.scalars]
        header = [f"#pragma OPENCL EXTENSION {FP16_EXTENSION} : enable"] if self.native_half else []
        header += self.helpers.values()
        x, y, z = func.workgroup_size
        lines = header + [f"__kernel __attribute__((reqd_work_group_size({x}, {y}, {z})))",
                          f"void {entry_name(func)}({', '.join(params)}) {{"]
        for buf in func.scratch:
            if buf.scope not in _SCRATCH_SPACES:
                raise ValueError(f"kernel {func.name}: scratch {buf.name} in {buf.scope} memory")
            space = _SCRATCH_SPACES[buf.scope]
            lines.append(f"  {space}{self.type_name(buf.dtype)} {self.name(buf.name)}[{static_size(buf)}];")
        lines += self.lines + ["}"]
        return "\n".join(lines) + "\n"

    def storage_type(self, buf: Buffer) -> str:
        """The element type of a global buffer: halves stay ``half`` even where they compute as float."""
        return "half" if buf.dtype == "f16" else self.types[buf.dtype]

    def emulates_half(self, buf: Buffer) -> bool:
        return buf.dtype == "f16" and buf.scope == "global" and not self.native_half

    # -- dialect hooks ---------------------------------------------------------------------

    def stmt(self, s: Stmt, depth: int) -> None:
        if not isinstance(s, IfThen):
            return super().stmt(s, depth)
        cond = self.expr(s.cond)
        if isinstance(s.cond, Binary) and s.cond.op in COMPARISONS + LOGICAL:
            cond = cond[1:-1]  # `if ((a == b))` draws clang's "extraneous parentheses" warning at each build
        self.emit(depth, f"if ({cond}) {{")
        self.stmts(s.then, depth + 1)
        if s.otherwise:
            self.emit(depth, "} else {")
            self.stmts(s.otherwise, depth + 1)
        self.emit(depth, "}")

    def expr(self, e: TExpr) -> str:
        if isinstance(e, Select) and lanes_of(e.cond.dtype)[1] > 1:
            # A vector condition picks lane by lane (by the sign bit of each int lane).
            return f"select({self.expr(e.b)}, {self.expr(e.a)}, {self.expr(e.cond)})"
        if isinstance(e, Binary) and e.op == "%" and lanes_of(e.dtype)[0] in _FLOATS:
            return f"fmod({self.expr(e.a)}, {self.expr(e.b)})"
        return super().expr(e)

    def declare_local(self, var: Local, value: str) -> str:
        return f"{self.type_name(var.dtype)} {self.name(var.name)} = {value};"

    def for_header(self, var: str, start: str, end: str, step: int) -> str:
        return f"for (int {var} = {start}; {var} < {end}; {var} += {step})"

    def builtin(self, e: Builtin) -> str:
        if e.kind not in _BUILTINS:
            raise NotImplementedError(f"OpenCL C 1.2 has no {e.kind} (subgroups are not core)")
        return f"((int){_BUILTINS[e.kind]}({e.axis}))"

    def type_name(self, dtype: str) -> str:
        scalar, lanes = lanes_of(dtype)
        if scalar == "bool" and lanes > 1:
            return f"int{lanes}"  # vector comparisons give int vectors: -1 (true) or 0 per lane
        return super().type_name(dtype)

    def vector_type(self, scalar: str, lanes: int) -> str:
        return f"{scalar}{lanes}"

    def load(self, buffer: Buffer, index: str, lanes: int = 1) -> str:
        name = self.name(buffer.name)
        if self.emulates_half(buffer):
            return f"vload_half{lanes if lanes > 1 else ''}({index}, {name})"
        if lanes > 1:
            return f"vload{lanes}({index}, {name})"
        return f"{name}[{index}]"

    def store(self, buffer: Buffer, index: str, value: str, lanes: int = 1) -> str:
        name = self.name(buffer.name)
        if self.emulates_half(buffer):
            return f"vstore_half{lanes if lanes > 1 else ''}({value}, {index}, {name});"
        if lanes > 1:
            return f"vstore{lanes}({value}, {index}, {name});"
        return f"{name}[{index}] = {value};"

    def literal(self, value, dtype: str) -> str:
        scalar, lanes = lanes_of(dtype)
        if lanes > 1:
            if scalar == "bool":
                return f"(({self.type_name(dtype)})({-1 if value else 0}))"
            return f"(({self.type_name(dtype)})({self.literal(value, scalar)}))"
        if dtype == "bool":
            return "true" if value else "false"
        if dtype == "i32":
            return f"((int){int(value)})" if value < 0 else str(int(value))
        if dtype == "u32":
            return f"{int(value)}u"
        text = float_text(float(value))
        if text is None:
            text = "NAN" if value != value else ("INFINITY" if value > 0 else "(-INFINITY)")
        else:
            text = f"{text}f" if not text.startswith("-") else f"({text}f)"
        return f"((half){text})" if dtype == "f16" and self.native_half else text

    def cast(self, x: str, dtype: str, source_dtype: str) -> str:
        scalar, lanes = lanes_of(dtype)
        source, _ = lanes_of(source_dtype)
        target = self.type_name(dtype)
        if target == self.type_name(source_dtype):
            return x  # f16 <-> f32 where both compute as float
        if source == "bool" and lanes > 1:
            x = f"(({x}) & 1)"  # true lanes are -1
        # Floats become integers rounding toward zero and saturating, as WGSL's conversions do
        # (a plain C cast of an out-of-range float is undefined).
        saturate = "_sat_rtz" if source in _FLOATS and scalar in ("i32", "u32") else ""
        if lanes > 1 or saturate:
            return f"convert_{target}{saturate}({x})"
        return f"(({target})({x}))"

    def call_intrinsic(self, name: str, args: list[str], dtype: str) -> str:
        scalar, lanes = lanes_of(dtype)
        if name == "abs":
            if scalar in _FLOATS:
                return f"fabs({args[0]})"
            return f"as_{self.type_name(dtype)}(abs({args[0]}))"  # abs of an int is unsigned in OpenCL
        if name == "f16_bits_to_f32":
            self.helpers["tsr_half_bits"] = _HALF_BITS
            return f"tsr_half_bits({args[0]})"
        if name == "sign_extend8":  # the low byte of a word, as a signed int
            return f"((int)(char)({args[0]}))"
        if name == "floordiv":
            self.helpers["tsr_floordiv"] = _FLOORDIV
            return f"tsr_floordiv({args[0]}, {args[1]})"
        if name.startswith("subgroup_"):
            raise NotImplementedError(f"OpenCL C 1.2 has no {name} (subgroups are not core)")
        return super().call_intrinsic(name, args, dtype)


def computes_in_half(func: PrimFunc, native_half: bool) -> bool:
    """Whether the rendered kernel does arithmetic on ``half`` (and so needs cl_khr_fp16)."""
    from tessera.tir.ir import walk_dtypes

    return native_half and any(lanes_of(d)[0] == "f16" for d in walk_dtypes(func))


def emit_opencl(func: PrimFunc, native_half: bool = False) -> str:
    """The OpenCL C source of one lowered kernel (``lower_kernel(func, LOWERING)``)."""
    return OpenCLRenderer(func, native_half).render()


from .backend import OpenCLBackend  # noqa: E402  (registers the backend and its targets)
