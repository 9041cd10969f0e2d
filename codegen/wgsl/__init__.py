"""WGSL for WebGPU: a dialect of the shared C-style renderer.

Binding layout (group 0): the kernel's inputs, then its outputs, as storage
buffers (all read_write, so that views of one arena buffer can meet in a
dispatch) in that order; then, if the kernel has symbolic scalars, one uniform
buffer holding them as i32 in declaration order. Kernels come lowered for
``LOWERING``: a storage buffer holds float32, float16, int32 or uint32, and
tensors of other dtypes (bool, int64) are already 32-bit words in the tir
(``tessera.tir.lower.storage``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.tir.ir import SCALAR_PREFIX, Const, Local, PrimFunc, lanes_of, vector_of
from tessera.tir.lower import LoweringNeeds

from .. import entry_name, static_size, uses_dtype, vector_accesses
from ..cstyle import ERF_CONSTANTS, CStyleRenderer, float_text, helper_text

# Storage buffers hold f32, f16, i32 and u32 (bool is not host-shareable; there is no 64-bit integer);
# a workgroup's threads run in parallel, so barriers stay barriers.
LOWERING = LoweringNeeds(storage_types={"float32", "float16", "int32", "uint32"}, unroll=True)

WGSL_KEYWORDS = frozenset("""
alias array bitcast bool break case const continue continuing default diagnostic discard else enable
f16 f32 false fn for i32 if let loop mat2x2 override ptr requires return sampler struct switch true
type u32 var vec2 vec3 vec4 while main
""".split()) | frozenset("""
active as asm async attribute auto await become cast catch class co_await co_return co_yield coherent
common compile compile_fragment concept const_cast consteval constexpr constinit crate debugger decltype
delete demote demote_to_helper do dynamic_cast enum explicit export extends extern external fallthrough
filter final finally friend from fxgroup get goto groupshared highp impl implements import inline
instanceof interface layout lowp macro macro_rules match mediump meta mod module move mut mutable
namespace new nil noexcept noinline nointerpolation non_coherent noncoherent noperspective null nullptr
of operator package packoffset partition pass patch pixelfragment precise precision premerge priv
protected pub public readonly ref regardless register reinterpret_cast require resource restrict self
set shared sizeof smooth snorm static static_assert static_cast std subroutine super target template
this thread_local throw trait try typedef typeid typename typeof union unless unorm unsafe unsized use
using varying virtual volatile wgsl where with writeonly yield
""".split())  # WGSL's reserved words: not keywords yet, still not allowed as names

# erf (cstyle.ERF_CONSTANTS): WGSL has none. TYPE is f32 or vec4<f32>.
_ERF = """fn NAME(x: TYPE) -> TYPE {
  let t = TYPE(1.0) / (TYPE(1.0) + TYPE(ERF_P) * abs(x));
  let y = TYPE(1.0) - (((((ERF_A5 * t - ERF_A4) * t) + ERF_A3) * t - ERF_A2) * t
                 + ERF_A1) * t * exp(-x * x);
  return select(-y, y, x >= TYPE(0.0));
}"""
# tanh saturates long before |x| = 15; clamping keeps exp-based tanh finite. Below |x| = 0.05,
# the series x - x^3/3 + 2x^5/15 (relative error under 0.06 x^6): an exp-based tanh, (e^2x - 1) / (e^2x + 1),
# cancels there and keeps only about 6e-8 / |x| of relative precision (Mish's tanh of e^x for x near -10).
_TANH = """fn NAME(x: TYPE) -> TYPE {
  let x2 = x * x;
  let series = x * (TYPE(1.0) - x2 * (TYPE(1.0 / 3.0) - x2 * TYPE(2.0 / 15.0)));
  return select(tanh(clamp(x, TYPE(-15.0), TYPE(15.0))), series, abs(x) < TYPE(0.05));
}"""
# cstyle.FLOORDIV in WGSL's syntax.
_FLOORDIV = """fn tsr_floordiv(a: i32, b: i32) -> i32 {
  let q = a / b;
  return select(q, q - 1, (a % b != 0) && ((a < 0) != (b < 0)));
}"""


SUBGROUP_BUILTINS = {"subgroup_invocation_id": "sg_lane", "subgroup_size": "sg_size"}


@dataclass(frozen=True)
class WGSLKernel:
    """A kernel ready for ``createShaderModule``: source, entry point and binding layout."""

    source: str
    entry_point: str
    bindings: tuple[str, ...]  # buffer names by binding index ("params" for the scalars)
    workgroup_size: tuple[int, int, int]


class WGSLRenderer(CStyleRenderer):
    language = "WGSL"
    types = {"f32": "f32", "f16": "f16", "i32": "i32", "u32": "u32", "bool": "bool"}
    intrinsics = {
        "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "inverseSqrt", "sin": "sin", "cos": "cos",
        "floor": "floor", "ceil": "ceil", "round": "round", "abs": "abs", "pow": "pow",
        "clamp": "clamp", "fma": "fma", "atan": "atan", "atan2": "atan2",
        "subgroup_add": "subgroupAdd", "subgroup_max": "subgroupMax", "subgroup_min": "subgroupMin",
    }
    builtins = {"local_id": "i32(lid.{xyz})", "workgroup_id": "i32(wid.{xyz})", "num_workgroups": "i32(nwg.{xyz})"} | {
        kind: f"i32({name})" for kind, name in SUBGROUP_BUILTINS.items()}
    reserved = WGSL_KEYWORDS
    barrier = "workgroupBarrier();"
    storage_barrier = "storageBarrier();"
    lowering = LOWERING

    def __init__(self, func: PrimFunc, enable: tuple[str, ...] = ()):
        super().__init__(func)
        self.enable = enable  # extensions the kernel declares (`enable subgroups;` in browsers)

    def render(self) -> WGSLKernel:
        func = self.func
        entry = entry_name(func)
        self.stmts(func.body, 1)
        body = self.lines
        subgroup_builtins = sorted(self.used_builtins & set(SUBGROUP_BUILTINS))
        header: list[str] = []
        if uses_dtype(func, "f16"):
            header.append("enable f16;")
        header += [f"enable {name};" for name in self.enable]
        bindings = []
        vector_buffers = vector_accesses(func)
        for index, buf in enumerate(func.params):
            # Inputs are read_write too: the VM binds views of one arena buffer, and WebGPU forbids
            # a buffer in read-only and writable storage bindings of the same dispatch.
            access = "read_write"
            element = self.type_name(vector_of(buf.dtype, vector_buffers.get(buf.name, 1)))
            header.append(f"@group(0) @binding({index}) var<storage, {access}> {self.name(buf.name)}: "
                          f"array<{element}>;")
            bindings.append(buf.name)
        if func.scalars:
            header.append("struct Params {")
            header.extend(f"  {self.name(s)}: i32," for s in func.scalars)
            header.append("}")
            header.append(f"@group(0) @binding({len(bindings)}) var<uniform> params: Params;")
            bindings.append("params")
        for buf in func.scratch:
            if buf.scope == "workgroup":
                header.append(f"var<workgroup> {self.name(buf.name)}: array<{self.type_name(buf.dtype)}, "
                              f"{static_size(buf)}>;")
        header.extend(self.helpers.values())
        x, y, z = func.workgroup_size
        lines = header + [
            f"@compute @workgroup_size({x}, {y}, {z})",
            f"fn {entry}(@builtin(local_invocation_id) lid: vec3<u32>, "
            "@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>"
            + "".join(f", @builtin({kind}) {SUBGROUP_BUILTINS[kind]}: u32" for kind in subgroup_builtins)
            + ") {",
        ]
        lines += [f"  let {SCALAR_PREFIX}{s}: i32 = params.{self.name(s)};" for s in func.scalars]
        for buf in func.scratch:
            if buf.scope == "private":
                lines.append(f"  var {self.name(buf.name)}: array<{self.type_name(buf.dtype)}, {static_size(buf)}>;")
        lines += body + ["}"]
        return WGSLKernel("\n".join(lines) + "\n", entry, tuple(bindings), func.workgroup_size)

    def declare_local(self, var: Local, value: str) -> str:
        return f"var {self.name(var.name)}: {self.type_name(var.dtype)} = {value};"

    def for_header(self, var: str, start: str, end: str, step: int) -> str:
        return f"for (var {var}: i32 = {start}; {var} < {end}; {var} = {var} + {step})"

    def vector_type(self, scalar: str, lanes: int) -> str:
        return f"vec{lanes}<{scalar}>"

    def literal(self, value, dtype: str) -> str:
        scalar, lanes = lanes_of(dtype)
        if lanes > 1:
            return self.splat(self.literal(value, scalar), dtype)
        if dtype == "bool":
            return "true" if value else "false"
        if dtype == "i32":
            # Negative literals go through an abstract int: -2147483648i does not parse.
            return f"{int(value)}i" if value >= 0 else f"i32({int(value)})"
        if dtype == "u32":
            return f"{int(value)}u"
        text = float_text(float(value))
        if text is None:
            # WGSL has no literal for infinity and Chrome's compiler rejects building one in a
            # constant expression; the largest finite value stands in (max/min identities).
            if value != value:
                raise self.error("WGSL kernels cannot hold a NaN constant")
            largest = "65504.0h" if dtype == "f16" else "3.4028234663852886e38f"
            return largest if value > 0 else f"(-{largest})"
        suffix = "h" if dtype == "f16" else "f"
        return f"{text}{suffix}" if not text.startswith("-") else f"({text}{suffix})"

    def select(self, cond: str, a: str, b: str) -> str:
        return f"select({b}, {a}, {cond})"

    def shift_count(self, e, text: str) -> str:
        # WGSL shifts take a u32 count, whatever the type shifted.
        if lanes_of(e.dtype)[0] == "u32":
            return text
        if isinstance(e, Const):
            return f"{int(e.value)}u"
        return f"u32({text})"

    def cast(self, x: str, dtype: str, source_dtype: str) -> str:
        return f"{self.type_name(dtype)}({x})"

    def call_intrinsic(self, name: str, args: list[str], dtype: str) -> str:
        helpers = {"erf": _ERF, "tanh": _TANH}
        if name in helpers:
            return self.f32_helper_call(name, helpers[name], args[0], dtype)
        if name == "f16_bits_to_f32":  # the low 16 bits of a u32, as an IEEE half
            return f"unpack2x16float({args[0]}).x"
        if name in ("bitcast_u32", "bitcast_f32"):  # an f32's IEEE bits, and back (lane for lane)
            return f"bitcast<{self.type_name(dtype)}>({args[0]})"
        if name == "sign_extend8":  # the low byte of a u32, as a signed i32
            return f"(bitcast<i32>({args[0]} << 24u) >> 24u)"
        return super().call_intrinsic(name, args, dtype)

    def floordiv_helper(self) -> str:
        return _FLOORDIV


def emit_wgsl(func: PrimFunc, enable: tuple[str, ...] = ()) -> WGSLKernel:
    return WGSLRenderer(func, enable).render()


from .backend import WGSLBackend  # noqa: E402  (registers the backend and its targets)
