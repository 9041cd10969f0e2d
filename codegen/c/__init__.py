"""C for CPUs and WebAssembly: the same tir kernels, run one workgroup at a time.

A GPU kernel describes one thread of a workgroup. In C a kernel is a function that loops over the
grid's workgroups and, inside each, over the workgroup's threads. Barriers cannot be waited on by
a single thread, so the body is split at them (as PoCL and others do): every stretch of statements
without a barrier becomes a loop over the threads; a loop or an if that holds a barrier stays at
the workgroup level (the verifier guarantees its condition is the same for every thread) and its
body is split in turn. A local variable may live across a barrier, so each one is an array with a
slot per thread; loop counters and the kernel's scalars stay plain variables. Workgroup memory is
a static array; kernels are not re-entrant, which a single-threaded WASM module never needs.

``emit_c_module(kernels)`` gives one C file exporting ``k_<name>(buffers..., scalars..., nwg_x,
nwg_y, nwg_z)`` per kernel; ``compile_wasm`` builds it with Debian's clang for wasm32 with SIMD128
(clang vectorizes the thread loops), linking only libm from wasi-libc: the module imports its
memory and nothing else.
"""

from __future__ import annotations

import math
import os
import subprocess
import tempfile

from tessera.tir.ir import Assign, Barrier, Buffer, Builtin, Declare, For, IfThen, Local, PrimFunc, Stmt, lanes_of

from ..cstyle import CStyleRenderer, float_text

STORAGE = {"float32": "float", "int32": "int32_t", "uint32": "uint32_t", "bool": "uint32_t", "int64": "int32_t"}

PRELUDE = """\
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline int32_t tsr_min_i32(int32_t a, int32_t b) { return a < b ? a : b; }
static inline int32_t tsr_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }
static inline uint32_t tsr_min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }
static inline uint32_t tsr_max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }
#define min(a, b) _Generic((a), float: fminf, int32_t: tsr_min_i32, uint32_t: tsr_min_u32)((a), (b))
#define max(a, b) _Generic((a), float: fmaxf, int32_t: tsr_max_i32, uint32_t: tsr_max_u32)((a), (b))
#define tsr_abs(x) _Generic((x), float: fabsf, int32_t: abs)(x)
static inline float tsr_clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }
static inline int32_t tsr_floordiv(int32_t a, int32_t b) {
  int32_t q = a / b;
  return (a % b != 0) && ((a < 0) != (b < 0)) ? q - 1 : q;
}
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
"""


C_RESERVED = frozenset("""
auto bool break case char const continue default do double else enum extern false float for goto if inline int
long register restrict return short signed sizeof static struct switch true typedef union unsigned void volatile
while min max lid wg_x wg_y wg_z nwg_x nwg_y nwg_z
""".split())


class CRenderer(CStyleRenderer):
    reserved = C_RESERVED
    types = {"f32": "float", "i32": "int32_t", "u32": "uint32_t", "bool": "bool"}
    intrinsics = {"exp": "expf", "log": "logf", "sqrt": "sqrtf", "sin": "sinf", "cos": "cosf", "floor": "floorf",
                  "ceil": "ceilf", "round": "rintf", "pow": "powf", "fma": "fmaf", "erf": "erff", "tanh": "tanhf",
                  "clamp": "tsr_clamp", "floordiv": "tsr_floordiv", "bitcast_u32": "tsr_bits",
                  "f16_bits_to_f32": "tsr_half_to_float", "abs": "tsr_abs"}

    def __init__(self, func: PrimFunc):
        super().__init__(func)
        _reject_unsupported(func)
        self.threads = math.prod(func.workgroup_size)
        self.in_threads = False  # inside a loop over the workgroup's threads
        # Locals that live across a barrier (used in two thread loops, or read at workgroup level)
        # need a slot per thread; the others stay C locals, which clang keeps in registers.
        shared = _locals_across_barriers(func.body)
        self.arrays: dict[str, str] = {}  # per-thread locals: name -> C type
        for stmt, _ in _walk(func.body):
            if isinstance(stmt, Declare) and stmt.var.name in shared:
                ctype = self.type_name(stmt.var.dtype)
                if self.arrays.setdefault(stmt.var.name, ctype) != ctype:
                    raise NotImplementedError(f"kernel {func.name}: local {stmt.var.name} has two types")

    def render(self) -> str:
        func = self.func
        entry = kernel_symbol(func)
        params = [f"{STORAGE[b.storage_dtype]}* {self.name(b.name)}" for b in func.params]
        params += [f"int32_t {self.name('sym_' + s)}" for s in func.scalars]
        params += ["int32_t nwg_x", "int32_t nwg_y", "int32_t nwg_z"]
        lines = [f'__attribute__((export_name("{entry}")))', f"void {entry}({', '.join(params)}) {{"]
        for name, ctype in self.arrays.items():
            lines.append(f"  static {ctype} {self.name(name)}[{self.threads}];")
        for buf in func.scratch:
            size = _static_size(buf)
            shape = f"[{size}]" if buf.scope == "workgroup" else f"[{self.threads}][{size}]"
            lines.append(f"  static {self.type_name(buf.dtype)} {self.name(buf.name)}{shape};")
        lines += ["  for (int32_t wg_z = 0; wg_z < nwg_z; wg_z++)", "  for (int32_t wg_y = 0; wg_y < nwg_y; wg_y++)",
                  "  for (int32_t wg_x = 0; wg_x < nwg_x; wg_x++) {"]
        self.workgroup_level(func.body, 2)
        lines += self.lines + ["  }", "}"]
        return "\n".join(lines) + "\n"

    # -- splitting at barriers ---------------------------------------------------------------

    def workgroup_level(self, body: tuple[Stmt, ...], depth: int) -> None:
        run: list[Stmt] = []
        for stmt in body:
            if not _has_barrier(stmt):
                run.append(stmt)
                continue
            self.thread_loop(run, depth)
            run = []
            if isinstance(stmt, For):
                self.emit(depth, f"for (int32_t {self.name(stmt.var.name)} = {self.expr(stmt.start)}; "
                                 f"{self.name(stmt.var.name)} < {self.expr(stmt.stop)}; "
                                 f"{self.name(stmt.var.name)} += {stmt.step}) {{")
                self.workgroup_level(stmt.body, depth + 1)
                self.emit(depth, "}")
            elif isinstance(stmt, IfThen):
                self.emit(depth, f"if ({self.expr(stmt.cond)}) {{")
                self.workgroup_level(stmt.then, depth + 1)
                if stmt.otherwise:
                    self.emit(depth, "} else {")
                    self.workgroup_level(stmt.otherwise, depth + 1)
                self.emit(depth, "}")
            # A Barrier itself: the end of one thread loop is the barrier.
        self.thread_loop(run, depth)

    def thread_loop(self, run: list[Stmt], depth: int) -> None:
        if not run:
            return
        self.emit(depth, f"for (int32_t lid = 0; lid < {self.threads}; lid++) {{")
        self.in_threads = True
        self.stmts(tuple(run), depth + 1)
        self.in_threads = False
        self.emit(depth, "}")

    # -- dialect hooks ---------------------------------------------------------------------

    def expr(self, e):
        if isinstance(e, Local) and e.name in self.arrays:
            # Outside a thread loop only uniform values are read: thread 0's copy is everyone's.
            return f"{self.name(e.name)}[{'lid' if self.in_threads else '0'}]"
        return super().expr(e)

    def stmt(self, s: Stmt, depth: int) -> None:
        if isinstance(s, (Declare, Assign)) and s.var.name in self.arrays:
            self.emit(depth, f"{self.name(s.var.name)}[lid] = {self.expr(s.value)};")
        elif isinstance(s, Barrier):
            raise AssertionError("barriers are split out before statements are rendered")
        else:
            super().stmt(s, depth)

    def declare_local(self, var: Local, value: str) -> str:
        return f"{self.type_name(var.dtype)} {self.name(var.name)} = {value};"

    def declare_constant(self, var: Local, value: str) -> str:
        return f"const {self.type_name(var.dtype)} {self.name(var.name)} = {value};"

    def for_header(self, var: str, start: str, end: str, step: int) -> str:
        return f"for (int32_t {var} = {start}; {var} < {end}; {var} += {step})"

    def builtin(self, e: Builtin) -> str:
        x, y, _ = self.func.workgroup_size
        if e.kind == "local_id":
            return ["(lid % {x})", "((lid / {x}) % {y})", "(lid / ({x} * {y}))"][e.axis].format(x=x, y=y)
        if e.kind == "workgroup_id":
            return f"wg_{'xyz'[e.axis]}"
        if e.kind == "num_workgroups":
            return f"nwg_{'xyz'[e.axis]}"
        raise NotImplementedError(f"C kernels have no builtin {e.kind}")

    def literal(self, value, dtype: str) -> str:
        if dtype == "bool":
            return "true" if value else "false"
        if dtype == "i32":
            return f"((int32_t){int(value)})" if value < 0 else str(int(value))
        if dtype == "u32":
            return f"{int(value)}u"
        text = float_text(float(value))
        if text is None:
            if value != value:
                return "NAN"
            return "INFINITY" if value > 0 else "(-INFINITY)"
        return f"{text}f" if not text.startswith("-") else f"({text}f)"

    def cast(self, x: str, dtype: str, source_dtype: str) -> str:
        return f"(({self.type_name(dtype)})({x}))"

    def call_intrinsic(self, name: str, args: list[str], dtype: str) -> str:
        if name == "rsqrt":
            return f"(1.0f / sqrtf({args[0]}))"
        if name == "sign_extend8":
            return f"((int32_t)(int8_t)({args[0]}))"
        return super().call_intrinsic(name, args, dtype)

    def load(self, buffer: Buffer, index: str, lanes: int = 1) -> str:
        name = self.name(buffer.name)
        if buffer.scope == "private":
            return f"{name}[lid][{index}]"
        if buffer.scope == "global" and buffer.storage_dtype == "bool":
            return f"({name}[{index}] != 0u)"
        if buffer.scope == "global" and buffer.storage_dtype == "int64":
            return f"{name}[({index}) * 2]"
        return f"{name}[{index}]"

    def store(self, buffer: Buffer, index: str, value: str, lanes: int = 1) -> list[str]:
        name = self.name(buffer.name)
        if buffer.scope == "private":
            return [f"{name}[lid][{index}] = {value};"]
        if buffer.scope == "global" and buffer.storage_dtype == "bool":
            return [f"{name}[{index}] = ({value}) ? 1u : 0u;"]
        if buffer.scope == "global" and buffer.storage_dtype == "int64":
            return ["{", f"  int32_t v = {value};", f"  {name}[({index}) * 2] = v;",
                    f"  {name}[({index}) * 2 + 1] = v < 0 ? -1 : 0;", "}"]
        return [f"{name}[{index}] = {value};"]


def kernel_symbol(func: PrimFunc) -> str:
    return "k_" + "".join(c if c.isalnum() else "_" for c in func.name)


def emit_c(func: PrimFunc) -> str:
    return CRenderer(func).render()


def emit_c_module(kernels: list[PrimFunc]) -> str:
    return PRELUDE + "\n" + "\n".join(emit_c(k) for k in kernels)


class WasmBuildError(RuntimeError):
    """clang could not build the kernels (or is missing)."""


def compile_wasm(source: str) -> bytes:
    """The WebAssembly module for a C file from ``emit_c_module``: imports ``env.memory``, exports
    the kernels and ``__heap_base`` (where the runtime may start placing tensors)."""
    with tempfile.TemporaryDirectory() as folder:
        c_path, wasm_path = os.path.join(folder, "kernels.c"), os.path.join(folder, "kernels.wasm")
        with open(c_path, "w") as f:
            f.write(source)
        command = ["clang", "--target=wasm32-wasi", "--sysroot=/usr", "-isystem", "/usr/include/wasm32-wasi",
                   "-O2", "-msimd128", "-fno-math-errno", "-nostartfiles", "-Wl,--no-entry", "-Wl,--import-memory",
                   "-Wl,--export=__heap_base", "-Wl,--stack-first", "-L/usr/lib/wasm32-wasi", "-o", wasm_path,
                   c_path, "-lm"]
        try:
            result = subprocess.run(command, capture_output=True, text=True)
        except FileNotFoundError:
            raise WasmBuildError("clang is not installed (Debian: clang lld wasi-libc libclang-rt-14-dev-wasm32; "
                                 "make setup installs them)") from None
        if result.returncode != 0:
            raise WasmBuildError(f"clang failed to build the WASM kernels:\n{result.stderr[-4000:]}")
        with open(wasm_path, "rb") as f:
            return f.read()


def _walk(body):
    for s in body:
        yield s, None
        if isinstance(s, IfThen):
            yield from _walk(s.then)
            yield from _walk(s.otherwise)
        elif isinstance(s, For):
            yield from _walk(s.body)


def _locals_across_barriers(body: tuple) -> set[str]:
    """Names of locals that one thread loop writes and another (or the workgroup level) reads."""
    from tessera.tir.ir import walk_expr, walk_stmts

    regions: list[set[str]] = []
    workgroup: set[str] = set()

    def names(stmts) -> set[str]:
        found = set()
        for stmt, exprs in walk_stmts(stmts):
            if isinstance(stmt, (Declare, Assign)):
                found.add(stmt.var.name)
            for root in exprs:
                found.update(e.name for e in walk_expr(root) if isinstance(e, Local))
        return found

    def split(stmts) -> None:
        run: list = []
        for stmt in stmts:
            if not _has_barrier(stmt):
                run.append(stmt)
                continue
            regions.append(names(run))
            run = []
            if isinstance(stmt, For):
                workgroup.update(e.name for root in (stmt.start, stmt.stop) for e in walk_expr(root)
                                 if isinstance(e, Local))
                split(stmt.body)
            elif isinstance(stmt, IfThen):
                workgroup.update(e.name for e in walk_expr(stmt.cond) if isinstance(e, Local))
                split(stmt.then)
                split(stmt.otherwise)
        regions.append(names(run))

    split(body)
    seen: set[str] = set()
    across = set(workgroup)
    for region in regions:
        across |= region & seen
        seen |= region
    return across


def _has_barrier(stmt: Stmt) -> bool:
    return any(isinstance(s, Barrier) for s, _ in _walk((stmt,)))


def _static_size(buf: Buffer) -> int:
    from tessera import arith

    size = arith.Analyzer().as_int(buf.size)
    if size is None:
        raise ValueError(f"scratch buffer {buf.name} needs a static size, has {buf.shape}")
    return size


def _reject_unsupported(func: PrimFunc) -> None:
    from tessera.tir.ir import walk_dtypes

    for dtype in walk_dtypes(func):
        scalar, lanes = lanes_of(dtype)
        if scalar == "f16" or lanes > 1:
            raise NotImplementedError(f"kernel {func.name} uses {dtype}; C kernels are scalar f32/i32/u32")
    for buf in func.params:
        if buf.storage_dtype not in STORAGE:
            raise NotImplementedError(f"kernel {func.name}: C kernels cannot hold {buf.storage_dtype} tensors")


from .backend import CWasmBackend  # noqa: E402  (registers the backend and its target)
