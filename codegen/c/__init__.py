"""C for CPUs and WebAssembly: the same tir kernels, run one workgroup at a time.

A GPU kernel describes one thread of a workgroup. In C a kernel is a function that loops over the
grid's workgroups; kernels come lowered for ``LOWERING``, whose ``split_workgroups`` has already
turned the body into per-workgroup code and ``ThreadLoop``s over the workgroup's threads, with the
state that lives across barriers in workgroup memory (see ``tessera.tir.lower.workgroup``). Here
a thread loop is a C loop and workgroup memory an array.

Two spellings of the kernel function share everything else (``CRenderer`` is the WASM one):

- ``c-wasm`` (backend.py): ``k_<name>(buffers..., scalars..., nwg_x, nwg_y, nwg_z)`` runs the whole
  grid; workgroup memory is a static array, so kernels are not re-entrant, which a single-threaded
  WASM module never needs. ``compile_wasm`` (wasm_build.py) builds the file with Debian's clang for wasm32 with
  SIMD128 (clang vectorizes the thread loops), linking only libm from wasi-libc: the module imports
  its memory and nothing else.
- ``c-native`` (native.py): one uniform signature over arrays of buffers and scalars and a range
  of workgroups, re-entrant (workgroup memory on the stack), built by the system C compiler into
  a shared object for a thread pool to call.
"""

from __future__ import annotations

import functools
import os

import numpy as np
from tessera.tir.ir import (
    Barrier,
    Binary,
    Builtin,
    Call,
    Cast,
    Const,
    Extern,
    PrimFunc,
    Stmt,
    Store,
    ThreadLoop,
    Unary,
    lanes_of,
    walk_dtypes,
    walk_expr,
    walk_stmts,
)
from tessera.tir.lower import LoweringNeeds

from .. import CodegenError, entry_name, static_size
from ..cstyle import FLOORDIV, CStyleRenderer, float_text, helper_text

# One CPU thread runs a workgroup: split at barriers; C holds 32-bit words, doubles and halves (f16
# tensors: their values compute as floats, see CRenderer).
LOWERING = LoweringNeeds(storage_types={"float32", "float64", "float16", "int32", "uint32"}, unroll=True,
                         split_workgroups=True)
NOT_SPLIT = "C renders kernels split into thread loops: lower them with tessera.tir.lower.lower_kernel(func, LOWERING)"

PRELUDE = """\
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline int32_t tsr_min_i32(int32_t a, int32_t b) { return a < b ? a : b; }
static inline int32_t tsr_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }
static inline uint32_t tsr_min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }
static inline uint32_t tsr_max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }
/* fmaxf/fminf's rule (a NaN operand yields the other one) written out: gcc calls libm's fmaxf for
   each element, which made a fused ReLU cost as much as the convolution before it; a comparison
   and a select inline and vectorize. */
static inline float tsr_max_f32(float a, float b) { return (a > b || b != b) ? a : b; }
static inline float tsr_min_f32(float a, float b) { return (a < b || b != b) ? a : b; }
static inline double tsr_max_f64(double a, double b) { return (a > b || b != b) ? a : b; }
static inline double tsr_min_f64(double a, double b) { return (a < b || b != b) ? a : b; }
#define min(a, b) _Generic((a), float: tsr_min_f32, double: tsr_min_f64, int32_t: tsr_min_i32, \\
                           uint32_t: tsr_min_u32)((a), (b))
#define max(a, b) _Generic((a), float: tsr_max_f32, double: tsr_max_f64, int32_t: tsr_max_i32, \\
                           uint32_t: tsr_max_u32)((a), (b))
#define tsr_abs(x) _Generic((x), float: fabsf, double: fabs, int32_t: abs)(x)
static inline float tsr_clamp(float x, float lo, float hi) { return tsr_min_f32(tsr_max_f32(x, lo), hi); }
static inline double tsr_clamp_f64(double x, double lo, double hi) { return tsr_min_f64(tsr_max_f64(x, lo), hi); }
""" + helper_text(FLOORDIV, INT32="int32_t") + """
static inline uint32_t tsr_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float tsr_half_to_float(uint32_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu, bits;
  if (exponent == 0) {
    float value = ldexpf((float)mantissa, -24);
    return sign ? -value : value;
  }
  bits = exponent == 31 ? (sign | 0x7f800000u | (mantissa << 13))
                        : (sign | ((exponent + 112) << 23) | (mantissa << 13));
  float f; memcpy(&f, &bits, 4); return f;
}
/* A float's nearest half (ties to even), as bits: f16 tensors on WebAssembly are uint16_t halves
   (clang has no _Float16 for wasm32, and __fp16's conversions would need compiler-rt). */
static inline uint16_t tsr_float_to_half(float x) {
  uint32_t bits = tsr_bits(x), sign = (bits >> 16) & 0x8000u, magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u)  /* infinity, or NaN (kept quiet, with its payload's high bits) */
    return (uint16_t)(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u | ((magnitude >> 13) & 0x3ffu) : 0u));
  if (magnitude >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* 65520 and up round to infinity */
  if (magnitude < 0x38800000u)  /* below 2^-14: a subnormal half; 2^24 x is exact and rintf rounds to even */
    return (uint16_t)(sign | (uint32_t)rintf(fabsf(x) * 16777216.0f));
  uint32_t half = (magnitude - 0x38000000u) >> 13, rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half++;  /* a carry moves into the exponent */
  return (uint16_t)(sign | half);
}
/* A float rounded to half precision and back: the value an f16 operation of a GPU gives. */
static inline float tsr_round_half(float x) { return tsr_half_to_float(tsr_float_to_half(x)); }
/* A double's nearest half: rounded to a float toward zero with an inexact result's last bit set
   (round to odd, which keeps the one rounding to half exact), then to the half. */
static inline float tsr_round_half_f64(double x) {
  float f = (float)x;
  if (x == x && (double)f != x && fabsf(f) != INFINITY) {
    uint32_t bits = tsr_bits(f);
    if (fabs((double)f) > fabs(x)) bits--;
    bits |= 1u;
    memcpy(&f, &bits, 4);
  }
  return tsr_round_half(f);
}
"""


C_RESERVED = frozenset("""
auto bool break case char const continue default do double else enum extern false float for goto if inline int
long register restrict return short signed sizeof static struct switch true typedef union unsigned void volatile
while min max wg_x wg_y wg_z nwg_x nwg_y nwg_z
""".split())


class CRenderer(CStyleRenderer):
    language = "C"
    reserved = C_RESERVED
    # f16 values compute as float, rounded to half precision after every operation (as a GPU's f16
    # arithmetic rounds); a global f16 buffer holds halves (``half_storage``).
    types = {"f32": "float", "f64": "double", "f16": "float", "i32": "int32_t", "u32": "uint32_t", "bool": "bool"}
    intrinsics = {"exp": "expf", "log": "logf", "sqrt": "sqrtf", "sin": "sinf", "cos": "cosf", "floor": "floorf",
                  "ceil": "ceilf", "round": "rintf", "pow": "powf", "fma": "fmaf", "erf": "erff", "tanh": "tanhf",
                  "atan": "atanf", "atan2": "atan2f",
                  "clamp": "tsr_clamp", "floordiv": "tsr_floordiv", "bitcast_u32": "tsr_bits",
                  "f16_bits_to_f32": "tsr_half_to_float", "abs": "tsr_abs"}
    # local_id is gone after split_workgroups: thread loops have their own variable.
    builtins = {"workgroup_id": "wg_{xyz}", "num_workgroups": "nwg_{xyz}"}
    lowering = LOWERING
    scratch_storage = "static "  # how workgroup memory is declared: one array for the whole grid
    half_storage = "uint16_t"  # the C type of a global f16 buffer's elements: a half's bits

    def __init__(self, func: PrimFunc):
        super().__init__(func)
        for dtype in walk_dtypes(func):
            scalar, lanes = lanes_of(dtype)
            if scalar not in self.types or lanes > 1:
                raise CodegenError(f"kernel {func.name} uses {dtype}; {self.language} kernels are scalar "
                                   f"{'/'.join(t for t in self.types if t != 'bool')}")

    def render(self) -> str:
        func = self.func
        lines = self.signature(entry_name(func))
        for buf in func.scratch:
            if buf.scope != "workgroup":
                raise ValueError(f"kernel {func.name}: {buf.scope} buffer {buf.name}: {NOT_SPLIT}")
            lines.append(f"  {self.scratch_storage}{self.type_name(buf.dtype)} {self.name(buf.name)}"
                         f"[{static_size(buf)}];")
        lines += self.workgroup_loop()
        self.stmts(func.body, 2)
        lines += self.lines + ["  }", "}"]
        return "\n".join(lines) + "\n"

    def signature(self, entry: str) -> list[str]:
        """The function's first lines, to its opening brace (and what it unpacks from its arguments)."""
        func = self.func
        params = [f"{self.element_type(b)}* {self.name(b.name)}" for b in func.params]
        params += [f"int32_t {self.name('sym_' + s)}" for s in func.scalars]
        params += ["int32_t nwg_x", "int32_t nwg_y", "int32_t nwg_z"]
        return [f'__attribute__((export_name("{entry}")))', f"void {entry}({', '.join(params)}) {{"]

    def element_type(self, buf) -> str:
        """The C type of a global buffer's elements."""
        return self.half_storage if buf.dtype == "f16" else self.type_name(buf.dtype)

    # -- f16: halves in memory, floats in flight -------------------------------------------

    def widen_half(self, stored: str) -> str:
        """The float value of a global f16 element."""
        return f"tsr_half_to_float({stored})"

    def narrow_half(self, value: str) -> str:
        """A float value (already a half's) as a global f16 element."""
        return f"tsr_float_to_half({value})"

    def round_half(self, value: str, source: str = "f32") -> str:
        """A float (or a ``source`` double) rounded to the nearest half, as a float."""
        return f"tsr_round_half_f64({value})" if source == "f64" else f"tsr_round_half({value})"

    def load(self, buffer, index: str, lanes: int = 1) -> str:
        text = super().load(buffer, index, lanes)
        return self.widen_half(text) if buffer.dtype == "f16" and buffer.scope == "global" else text

    def store(self, buffer, index: str, value: str, lanes: int = 1) -> str:
        if buffer.dtype == "f16" and buffer.scope == "global":
            value = self.narrow_half(value)
        return super().store(buffer, index, value, lanes)

    def expr(self, e) -> str:
        if isinstance(e, Const) and e.dtype == "f16":  # the literal's nearest half, as an f16 constant is
            return self.literal(float(np.float16(e.value)), "f32")
        text = super().expr(e)
        if e.dtype == "f16" and isinstance(e, (Binary, Unary, Call)) and not _exact_on_halves(e):
            return self.round_half(text)
        return text

    def workgroup_loop(self) -> list[str]:
        """The loop over workgroups, opened (the body follows at depth 2): ``wg_x``, ``wg_y``, ``wg_z``."""
        return ["  for (int32_t wg_z = 0; wg_z < nwg_z; wg_z++)", "  for (int32_t wg_y = 0; wg_y < nwg_y; wg_y++)",
                "  for (int32_t wg_x = 0; wg_x < nwg_x; wg_x++) {"]

    # -- dialect hooks ---------------------------------------------------------------------

    def stmt(self, s: Stmt, depth: int) -> None:
        if isinstance(s, ThreadLoop):
            lid = self.name(s.var.name)
            self.emit(depth, f"for (int32_t {lid} = 0; {lid} < {s.threads}; {lid}++) {{")
            self.stmts(s.body, depth + 1)
            self.emit(depth, "}")
        elif isinstance(s, Barrier):
            raise ValueError(f"kernel {self.func.name}: a barrier: {NOT_SPLIT}")
        elif (isinstance(s, Store) and s.buffer.dtype == "f16" and s.buffer.scope == "global"
              and isinstance(s.value, Cast) and s.value.x.dtype == "f32"):
            # A float computed in f32 and stored as f16 rounds once, at the store (not twice).
            value = self.narrow_half(self.expr(s.value.x))
            self.emit(depth, CStyleRenderer.store(self, s.buffer, self.expr(s.index), value, s.lanes))
        else:
            super().stmt(s, depth)

    def builtin(self, e: Builtin) -> str:
        if e.kind == "local_id":
            raise ValueError(f"kernel {self.func.name}: local_id: {NOT_SPLIT}")
        return super().builtin(e)

    def cast(self, x: str, dtype: str, source_dtype: str) -> str:
        if dtype == "f16":
            if source_dtype in ("f16", "f64"):
                return x if source_dtype == "f16" else self.round_half(x, "f64")
            return self.round_half(f"(float)({x})")
        return f"(({self.type_name(dtype)})({x}))"

    def extern_call(self, name: str, args: list[str]) -> str:
        if name not in EXTERNS:
            raise self.error(f"{self.language} has no micro-kernel {name!r}; microkernels.c has "
                             f"{', '.join(sorted(EXTERNS))}")
        return f"{name}({', '.join(args)})"

    def float_literal(self, value: float, dtype: str) -> str:
        text = float_text(value)
        if dtype != "f64" or text is None:  # NAN and INFINITY are floats, which widen to double exactly
            return super().float_literal(value, dtype)
        return text if not text.startswith("-") else f"({text})"  # a double literal has no suffix

    def call_intrinsic(self, name: str, args: list[str], dtype: str) -> str:
        if lanes_of(dtype)[0] == "f64":
            return self.double_intrinsic(name, args)
        if name == "rsqrt":
            return f"(1.0f / sqrtf({args[0]}))"
        if name == "sign_extend8":
            return f"((int32_t)(int8_t)({args[0]}))"
        if name == "bitcast_f32":  # a u32's bits as an f32: a union, which C11 defines (no helper needed)
            return f"((union {{ uint32_t u; float f; }}){{ .u = ({args[0]}) }}).f"
        return super().call_intrinsic(name, args, dtype)

    def double_intrinsic(self, name: str, args: list[str]) -> str:
        """An intrinsic of f64 operands: libm's double function (``expf`` without its ``f``); libm
        is linked on every C target, wasi-libc's for WebAssembly."""
        if name == "rsqrt":
            return f"(1.0 / sqrt({args[0]}))"
        function = DOUBLE_HELPERS.get(name) or self.intrinsics.get(name, "")
        if function.endswith("f") and not function.startswith("tsr_"):
            function = function[:-1]
        elif name not in DOUBLE_HELPERS:
            raise self.error(f"{self.language} has no float64 intrinsic {name!r}")
        return f"{function}({', '.join(args)})"


# Intrinsics whose f32 function is a prelude helper, with the helper (or libm function) for doubles.
DOUBLE_HELPERS = {"clamp": "tsr_clamp_f64", "abs": "tsr_abs"}


def _exact_on_halves(e) -> bool:
    """Whether an f16 operation of halves gives a half without rounding (min, max, negation, abs)."""
    return (isinstance(e, Binary) and e.op in ("min", "max")) or (isinstance(e, Unary) and e.op in ("neg", "abs"))


def emit_c(func: PrimFunc, renderer: type[CRenderer] = CRenderer) -> str:
    return renderer(func).render()


def emit_c_module(kernels: list[PrimFunc], renderer: type[CRenderer] = CRenderer) -> str:
    """One C file of lowered kernels (tessera.tir.lower), each exported under ``codegen.entry_name``,
    after the micro-kernels when a kernel calls one."""
    library = microkernels() + "\n" if uses_externs(kernels) else ""
    return PRELUDE + "\n" + library + "\n".join(emit_c(k, renderer) for k in kernels)


HERE = os.path.dirname(os.path.abspath(__file__))
MICROKERNELS = os.path.join(HERE, "microkernels.c")
# The micro-kernel sources, in the order they are put before the kernels: microkernels.c first (the
# instruction-set choice, f16 headers and the q8 rounding the others use), then one file per family.
MICROKERNEL_SOURCES = tuple(os.path.join(HERE, name) for name in (
    "microkernels.c",         # q8 activations; Q4_0, Q4_1, Q8_0 dot products
    "microkernels_kquant.c",  # K-quants, Q5_0, Q5_1 dot products with q8 activations
    "microkernels_gemm.c",    # f32 GEMM micro-kernels over packed panels
    "microkernels_conv.c",    # convolution and pooling micro-kernels
))
# Each source names the micro-kernels tir kernels may call (tir Extern) on one comment line of its own:
# "externs: name name ...". A name not listed there is private to the library.
EXTERNS_MARKER = "externs:"


@functools.cache
def microkernels() -> str:
    """The whole micro-kernel library, every source in order."""
    texts = []
    for path in MICROKERNEL_SOURCES:
        with open(path, encoding="utf-8") as f:
            texts.append(f.read())
    return "\n".join(texts)


def _declared_externs() -> frozenset[str]:
    names = set()
    for line in microkernels().splitlines():
        text = line.strip().lstrip("/*").strip()
        if text.startswith(EXTERNS_MARKER):
            names.update(text[len(EXTERNS_MARKER):].replace("*/", " ").split())
    return frozenset(names)


# What the library defines for tir kernels of C targets to call.
EXTERNS = _declared_externs()


def uses_externs(kernels) -> bool:
    return any(isinstance(e, Extern) for k in kernels for _, exprs in walk_stmts(k.body) for root in exprs
               for e in walk_expr(root))


from .backend import CWasmBackend  # noqa: E402  (registers the backend and its target)
from .native import CNativeBackend  # noqa: E402  (registers the backend and its targets)
from .wasm_build import WasmBuildError, compile_wasm  # noqa: E402,F401  (the WASM build of emit_c_module)
