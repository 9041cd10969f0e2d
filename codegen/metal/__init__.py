"""Metal Shading Language 2.x for Apple GPUs: a dialect of the shared C-style renderer.

ABI of a kernel ``k_<name>`` (one ``.metal`` module per kernel, see ``backend.py``):

- ``[[buffer(i)]]`` for i < len(params): the kernel's inputs, then its outputs, as ``device``
  pointers into views of the arena (``const device`` where the kernel only reads). Never the
  ``constant`` address space for tensors: it has size limits and views of one arena buffer
  meet in a dispatch. A buffer the kernel reads or writes as vectors is declared as a vector
  pointer (``device float4*``) and indexed in vectors; its offset is 256-byte aligned.
- ``[[buffer(len(params))]]``, when the kernel has symbolic scalars: ``constant int* params``,
  the scalars as i32 in declaration order (the runtime sets them with ``setBytes``).
- thread coordinates ``lid``/``wid``/``nwg`` (``uint3``), plus ``sg_lane``/``sg_size`` when the
  kernel uses simdgroup reductions. The workgroup size is set at dispatch (the kernel record
  says it); ``max_total_threads_per_threadgroup`` tells the compiler so that it budgets registers
  for that many threads and the pipeline can run it.

Math: Metal compiles with fast math by default, where ``metal::exp`` is ``fast::exp`` (error
growing with |x|) and the compiler may assume no infinities or NaNs. f32 transcendental
functions are therefore called as ``precise::``, so results stay within a few ulp however the
runtime compiles the library (and match the other runtimes in tests/conformance); f16 has no
fast variants. Infinite constants are spelled as the largest finite value, as in WGSL, since
fast math does not promise infinities.
"""

from __future__ import annotations

from tessera.tir.ir import SCALAR_PREFIX, Load, PrimFunc, Store, lanes_of, vector_of, walk_expr, walk_stmts
from tessera.tir.lower import LoweringNeeds

from .. import CodegenError, entry_name, static_size, vector_accesses
from ..cstyle import ERF_CONSTANTS, CStyleRenderer, float_text, helper_text

# Device buffers hold f32, f16, i32 and u32 (bool and int64 tensors become 32-bit words, as for
# WebGPU, so every runtime shares one arena layout); threads of a threadgroup run in parallel,
# so barriers stay barriers.
LOWERING = LoweringNeeds(storage_types={"float32", "float16", "int32", "uint32"}, unroll=True)

_VECTOR_SCALARS = "bool char uchar short ushort int uint long ulong half float".split()
MSL_RESERVED = frozenset("""
alignas alignof and asm auto bool break case catch char class const constexpr const_cast continue decltype
default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
int long mutable namespace new noexcept not nullptr operator or private protected public register
reinterpret_cast return short signed sizeof static static_assert static_cast struct switch template this
thread_local throw true try typedef typeid typename union unsigned using virtual void volatile while
kernel vertex fragment device constant thread threadgroup threadgroup_imageblock object_data ray_data
half uchar ushort uint ulong size_t ptrdiff_t metal precise fast texture sampler access
as_type select min max abs clamp exp exp2 log log2 sqrt rsqrt sin cos tan tanh floor ceil rint round trunc
pow fma fmax fmin sign erf isnan isinf INFINITY NAN
threadgroup_barrier simdgroup_barrier mem_flags simd_sum simd_max simd_min
lid wid nwg params sg_lane sg_size
""".split()) | frozenset(f"{s}{n}" for s in _VECTOR_SCALARS for n in (2, 3, 4)) \
    | frozenset(f"packed_{s}{n}" for s in _VECTOR_SCALARS for n in (2, 3, 4))

# Metal's math functions for f32; f16 calls the plain overloads (see the module docstring).
_PRECISE_F32 = frozenset({"exp", "log", "sqrt", "rsqrt", "sin", "cos", "pow", "tanh", "atan", "atan2"})

# erf (cstyle.ERF_CONSTANTS): MSL has none. Computed in f32.
_ERF = """static inline TYPE NAME(TYPE x) {
  TYPE t = 1.0f / (1.0f + ERF_Pf * abs(x));
  TYPE y = 1.0f - (((((ERF_A5f * t - ERF_A4f) * t) + ERF_A3f) * t - ERF_A2f) * t
                   + ERF_A1f) * t * precise::exp(-x * x);
  return select(-y, y, x >= 0.0f);
}"""

# The builtins a kernel's signature may declare, by tir kind: (parameter name, MSL attribute).
_THREAD_BUILTINS = {"local_id": ("lid", "thread_position_in_threadgroup"),
                    "workgroup_id": ("wid", "threadgroup_position_in_grid"),
                    "num_workgroups": ("nwg", "threadgroups_per_grid")}
SUBGROUP_BUILTINS = {"subgroup_invocation_id": ("sg_lane", "thread_index_in_simdgroup"),
                     "subgroup_size": ("sg_size", "threads_per_simdgroup")}

_LARGEST = {"f32": "3.4028234663852886e38f", "f16": "half(65504.0)"}


class MetalRenderer(CStyleRenderer):
    language = "Metal Shading Language"
    types = {"f32": "float", "f16": "half", "i32": "int", "u32": "uint", "bool": "bool"}
    intrinsics = {
        "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos",
        "floor": "floor", "ceil": "ceil", "abs": "abs", "pow": "pow", "clamp": "clamp", "fma": "fma",
        "tanh": "tanh", "atan": "atan", "atan2": "atan2",
        # rint rounds halves to even, as numpy and WGSL's round do; MSL's round goes away from zero.
        "round": "rint",
        "subgroup_add": "simd_sum", "subgroup_max": "simd_max", "subgroup_min": "simd_min",
    }
    builtins = {kind: f"int({name}.{{xyz}})" for kind, (name, _) in _THREAD_BUILTINS.items()} | {
        kind: f"int({name})" for kind, (name, _) in SUBGROUP_BUILTINS.items()}
    reserved = MSL_RESERVED
    bare_conditions = True
    barrier = "threadgroup_barrier(mem_flags::mem_threadgroup);"
    storage_barrier = "threadgroup_barrier(mem_flags::mem_device);"
    lowering = LOWERING

    def render(self) -> str:
        func = self.func
        self.stmts(func.body, 1)
        body = self.lines
        vector_buffers = _vector_accesses(func)
        written = {s.buffer.name for s, _ in walk_stmts(func.body) if isinstance(s, Store)}
        params = []
        for index, buf in enumerate(func.params):
            element = self.type_name(vector_of(buf.dtype, vector_buffers.get(buf.name, 1)))
            space = "device" if buf.name in written else "const device"
            params.append(f"{space} {element}* {self.name(buf.name)} [[buffer({index})]]")
        if func.scalars:
            params.append(f"constant int* params [[buffer({len(func.params)})]]")
        params += [f"uint3 {name} [[{attribute}]]" for name, attribute in _THREAD_BUILTINS.values()]
        params += [f"uint {SUBGROUP_BUILTINS[kind][0]} [[{SUBGROUP_BUILTINS[kind][1]}]]"
                   for kind in sorted(self.used_builtins & set(SUBGROUP_BUILTINS))]
        x, y, z = func.workgroup_size
        lines = ["#include <metal_stdlib>", "using namespace metal;", ""]
        lines += [text + "\n" for text in self.helpers.values()]
        lines += [f"// workgroup size ({x}, {y}, {z}), set at dispatch",
                  f"[[max_total_threads_per_threadgroup({x * y * z})]]",
                  f"kernel void {entry_name(func)}(" + ",\n    ".join(params) + ") {"]
        lines += [f"  const int {SCALAR_PREFIX}{s} = params[{i}];" for i, s in enumerate(func.scalars)]
        for buf in func.scratch:
            space = "threadgroup " if buf.scope == "workgroup" else ""
            lines.append(f"  {space}{self.type_name(buf.dtype)} {self.name(buf.name)}[{static_size(buf)}];")
        return "\n".join(lines + body + ["}"]) + "\n"

    # -- dialect hooks ---------------------------------------------------------------------

    def vector_type(self, scalar: str, lanes: int) -> str:
        return f"{scalar}{lanes}"

    def float_literal(self, value: float, dtype: str) -> str:
        text = float_text(value)
        if text is None:
            if value != value:
                raise self.error("Metal kernels cannot hold a NaN constant (fast math does not keep NaNs)")
            return _LARGEST[dtype] if value > 0 else f"(-{_LARGEST[dtype]})"
        if dtype == "f16":
            return f"half({text})"
        return super().float_literal(value, dtype)

    def select(self, cond: str, a: str, b: str) -> str:
        return f"select({b}, {a}, {cond})"

    def call_intrinsic(self, name: str, args: list[str], dtype: str) -> str:
        scalar, lanes = lanes_of(dtype)
        if name == "erf":
            return self.f32_helper_call("erf", _ERF, args[0], dtype)
        if name == "f16_bits_to_f32":  # the low 16 bits of a u32, as an IEEE half
            return f"float(as_type<half>(ushort({args[0]})))"
        if name in ("bitcast_u32", "bitcast_f32"):  # an f32's IEEE bits, and back (lane for lane)
            return f"as_type<{self.type_name(dtype)}>({args[0]})"
        if name == "sign_extend8":  # the low byte of a u32, as a signed i32
            return f"(as_type<int>({args[0]} << 24u) >> 24)"
        if name in _PRECISE_F32 and scalar == "f32":
            return f"precise::{self.intrinsics[name]}({', '.join(args)})"
        return super().call_intrinsic(name, args, dtype)


def _vector_accesses(func: PrimFunc) -> dict[str, int]:
    """``codegen.vector_accesses``, where a buffer is declared with one element type: a kernel that
    reads or writes one buffer with several widths (scalars included) cannot be spelled."""
    vectors = vector_accesses(func)
    mixed = set()
    for stmt, exprs in walk_stmts(func.body):
        accesses = [stmt] if isinstance(stmt, Store) else []
        accesses += [e for root in exprs for e in walk_expr(root) if isinstance(e, Load)]
        mixed.update(a.buffer.name for a in accesses if a.lanes != vectors.get(a.buffer.name, 1))
    if mixed:
        raise CodegenError(f"kernel {func.name}: {', '.join(sorted(mixed))} are accessed with several vector "
                           "widths")
    return vectors


def emit_metal(func: PrimFunc) -> str:
    """The MSL source of one kernel lowered for ``LOWERING`` (tessera.tir.lower.lower_kernel)."""
    return MetalRenderer(func).render()


from .backend import MetalBackend  # noqa: E402  (registers the backend and its target)
