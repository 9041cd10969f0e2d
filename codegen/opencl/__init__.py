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

from tessera.tir.ir import COMPARISONS, SCALAR_PREFIX, Binary, Buffer, PrimFunc, Select, TExpr, lanes_of
from tessera.tir.lower import LoweringNeeds

from .. import entry_name, static_size
from ..cstyle import CStyleRenderer

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

# The low 16 bits of a word as an IEEE half (GGUF block scales): vload_half reads a private half.
_HALF_BITS = """float tsr_half_bits(uint bits) {
  ushort h = (ushort)bits;
  return vload_half(0, (const half*)&h);
}"""

_FLOATS = ("f32", "f16")
_SCRATCH_SPACES = {"workgroup": "__local ", "private": ""}  # both declared at kernel scope


class OpenCLRenderer(CStyleRenderer):
    language = "OpenCL C 1.2"  # no subgroups: they are not core
    types = {"f32": "float", "f16": "float", "i32": "int", "u32": "uint", "bool": "bool"}
    intrinsics = {
        "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos",
        "floor": "floor", "ceil": "ceil", "round": "rint", "pow": "pow", "clamp": "clamp", "fma": "fma",
        "erf": "erf", "tanh": "tanh", "atan": "atan", "atan2": "atan2",
    }
    builtins = {"local_id": "((int)get_local_id({axis}))", "workgroup_id": "((int)get_group_id({axis}))",
                "num_workgroups": "((int)get_num_groups({axis}))"}
    reserved = OPENCL_RESERVED
    bare_conditions = True
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
                raise self.error(f"scratch {buf.name} in {buf.scope} memory, which OpenCL C has no space for")
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

    def expr(self, e: TExpr) -> str:
        if isinstance(e, Select) and lanes_of(e.cond.dtype)[1] > 1:
            # A vector condition picks lane by lane, by the sign bit of each mask lane.
            return f"select({self.expr(e.b)}, {self.expr(e.a)}, {self.mask(e.cond, e.dtype)})"
        if self.compares_half_vectors(e):
            return self.mask(e, e.dtype)  # a bool vector is an int vector everywhere else
        if isinstance(e, Binary) and e.op == "%" and lanes_of(e.dtype)[0] in _FLOATS:
            return f"fmod({self.expr(e.a)}, {self.expr(e.b)})"
        return super().expr(e)

    def mask(self, cond: TExpr, dtype: str) -> str:
        """The bool vector ``cond`` as a mask for ``select`` on ``dtype`` arms (-1 or 0 per lane).
        OpenCL wants the mask's lanes as wide as the arms': ``short`` for ``half``, ``int`` otherwise;
        a bool vector is an ``int`` vector except straight out of a ``half`` comparison (``short``)."""
        lanes = lanes_of(cond.dtype)[1]
        width = "short" if self.type_name(lanes_of(dtype)[0]) == "half" else "int"
        if self.compares_half_vectors(cond):
            text, natural = super().expr(cond), "short"
        else:
            text, natural = self.expr(cond), "int"
        return text if natural == width else f"convert_{width}{lanes}({text})"

    def compares_half_vectors(self, e: TExpr) -> bool:
        return (isinstance(e, Binary) and e.op in COMPARISONS and lanes_of(e.a.dtype)[1] > 1
                and self.type_name(lanes_of(e.a.dtype)[0]) == "half")

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
        if scalar == "bool" and lanes > 1:
            return self.splat(str(-1 if value else 0), dtype)  # bool vectors are int vectors
        return super().literal(value, dtype)

    def float_literal(self, value: float, dtype: str) -> str:
        text = super().float_literal(value, dtype)
        return f"((half){text})" if dtype == "f16" and self.native_half else text

    def splat(self, scalar: str, dtype: str) -> str:
        return f"(({self.type_name(dtype)})({scalar}))"

    def cast(self, x: str, dtype: str, source_dtype: str) -> str:
        scalar, lanes = lanes_of(dtype)
        source, _ = lanes_of(source_dtype)
        target = self.type_name(dtype)
        if scalar == "bool" and lanes > 1 and source != "bool":
            # Any nonzero lane is true, and true is -1 (select reads the sign bit): a comparison, even
            # from an int4, which is a bool vector's own type.
            test = f"({x} != {self.literal(0, source_dtype)})"
            return f"convert_int{lanes}({test})" if self.type_name(source) == "half" else test
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
        if name in ("bitcast_u32", "bitcast_f32"):  # an f32's IEEE bits, and back (as_uint4 for 4 lanes)
            return f"as_{self.type_name(dtype)}({args[0]})"
        return super().call_intrinsic(name, args, dtype)


def emit_opencl(func: PrimFunc, native_half: bool = False) -> str:
    """The OpenCL C source of one lowered kernel (``lower_kernel(func, LOWERING)``)."""
    return OpenCLRenderer(func, native_half).render()


from .backend import OpenCLBackend  # noqa: E402  (registers the backend and its targets)
