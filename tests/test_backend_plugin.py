"""A backend and a device defined entirely in this file, plugged in through the registries alone
(``tessera.codegen``, ``tessera.target``, ``tessera.vm.devices``): adding a language touches no core
file (issue 12).

The backend spells each tir kernel as a Python module: f32 values are numpy float32 scalars,
integers are Python ints wrapped at 32 bits, integer ``/`` and ``%`` truncate toward zero as in C
and WGSL, and a workgroup's threads are generators run in lock step, each ``yield`` a barrier. The
device keeps buffers as numpy bytes in this process. The tiny Llama then runs on them end to end,
prefill and decode, and gives transformers' tokens.
"""

from __future__ import annotations

import keyword
import math
import re

import numpy as np
import pytest
import tessera
import torch
from tessera import arith, nn, op
from tessera.codegen import (
    Backend,
    CompiledKernel,
    CompiledKernels,
    entry_name,
    kernel_abi,
    kernel_limits,
    register_backend,
)
from tessera.ir import BlockBuilder, Tensor, Var, interpret
from tessera.models import LlamaForCausalLM, export_llm
from tessera.target import Target, TargetKind, register_kind, register_preset
from tessera.tir.ir import (
    Assign,
    Barrier,
    Binary,
    Buffer,
    Builtin,
    Call,
    Cast,
    Const,
    Declare,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Select,
    Store,
    TExpr,
    Unary,
    lanes_of,
    walk_dtypes,
    walk_stmts,
)
from tessera.transform import fuse_ops, fuse_tir, legalize_ops
from tessera.vm import Device, Executable, View, VirtualMachine, register_device
from tessera.vm.kernel_runner import KernelRunner

NAME = "py-test"  # the backend, its target kind and preset, and the device kind: no other test uses it

# -- the renderer: tir to Python source ---------------------------------------------------------

# What every kernel module starts with: numpy for f32 math, and the integer semantics of GPU
# languages (32-bit wrapping, division truncated toward zero) spelled once.
PRELUDE = '''\
import math

import numpy as np

f32 = np.float32
ONE = f32(1.0)


def i32(x):
    """x wrapped to a signed 32-bit integer, as GPU integer arithmetic wraps."""
    return ((x + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def u32(x):
    return x & 0xFFFFFFFF


def div_i32(a, b):
    """C's and WGSL's a / b: truncated toward zero (WGSL: a / 0 is a)."""
    if a >= 0 and b > 0:
        return a // b
    if b == 0:
        return a
    quotient = abs(a) // abs(b)
    return i32(quotient if (a < 0) == (b < 0) else -quotient)


def rem_i32(a, b):
    """a % b with the sign of a (C, WGSL); a % 0 is 0."""
    if a >= 0 and b > 0:
        return a % b
    if b == 0:
        return 0
    remainder = abs(a) % abs(b)
    return remainder if a >= 0 else -remainder


def div_u32(a, b):
    return a // b if b else a


def rem_u32(a, b):
    return a % b if b else 0


def floordiv_i32(a, b):
    return i32(a // b) if b else a


def i32_of_f32(x):
    """WGSL's i32(f32): truncated toward zero, saturated, NaN as 0."""
    return 0 if x != x else int(min(max(x, f32(-2147483648.0)), f32(2147483520.0)))


def u32_of_f32(x):
    return 0 if x != x else int(min(max(x, f32(0.0)), f32(4294967040.0)))


def rsqrt(x):
    return ONE / np.sqrt(x)


def erf(x):
    return f32(math.erf(x))


def fma(a, b, c):
    return f32(float(a) * float(b) + float(c))


def bits_of_f32(x):
    return int(f32(x).view(np.uint32))


def f32_of_f16_bits(x):
    return f32(np.uint16(x & 0xFFFF).view(np.float16))


def sign_extend8(x):
    return ((x & 0xFF) ^ 0x80) - 0x80


def lanewise(fn, *vectors):
    """A vector operation: the scalar one on each lane."""
    return tuple(fn(*lanes) for lanes in zip(*vectors))


def group_lanes(group, lanes):
    """The element indices of vector ``group``."""
    return range(group * lanes, group * lanes + lanes)


FINISHED = object()


def lockstep(threads):
    """Run a workgroup's threads (generators) to their next barrier, round after round."""
    while True:
        finished = sum(next(thread, FINISHED) is FINISHED for thread in threads)
        if finished == len(threads):
            return
        if finished:
            raise RuntimeError("threads of one workgroup reached different barriers (non-uniform control flow)")
'''

# Math intrinsics as templates over their operands.
INTRINSICS = {
    "exp": "np.exp({0})", "log": "np.log({0})", "sqrt": "np.sqrt({0})", "rsqrt": "rsqrt({0})",
    "sin": "np.sin({0})", "cos": "np.cos({0})", "tanh": "np.tanh({0})", "erf": "erf({0})",
    "floor": "np.floor({0})", "ceil": "np.ceil({0})", "round": "np.rint({0})", "pow": "np.power({0}, {1})",
    "fma": "fma({0}, {1}, {2})", "clamp": "min(max({0}, {1}), {2})", "floordiv": "floordiv_i32({0}, {1})",
    "bitcast_u32": "bits_of_f32({0})", "f16_bits_to_f32": "f32_of_f16_bits({0})",
    "sign_extend8": "sign_extend8({0})",
}
LOGICAL = {"&&": "and", "||": "or"}
RING = ("+", "-", "*", "<<", "&", "|", "^")  # integer operations that commute with wrapping to 32 bits
INTEGER_DIVISION = {"/": "div", "%": "rem"}
# Global buffers as the device binds them: numpy arrays of each tensor dtype's storage words.
WORDS = {"float32": np.float32, "int32": np.int32, "uint32": np.uint32, "bool": np.uint32, "int64": np.int32}
THREAD_PARAMS = ("lid_x", "lid_y", "lid_z", "wg_x", "wg_y", "wg_z")
RESERVED = frozenset(keyword.kwlist) | frozenset(THREAD_PARAMS) | frozenset("""
math np f32 ONE i32 u32 div_i32 rem_i32 div_u32 rem_u32 floordiv_i32 i32_of_f32 u32_of_f32 rsqrt erf fma
bits_of_f32 f32_of_f16_bits sign_extend8 lanewise group_lanes lockstep FINISHED abs min max int range zip tuple
buffers scalars grid thread THREADS nwg_x nwg_y nwg_z lane lane_value store_at store_value
""".split())


class PythonRenderer:
    """One tir kernel as a Python module whose entry point runs a launch: ``entry(buffers, scalars,
    grid)``. Like codegen/cstyle.py, one walk over the tir; the spellings are the tables above."""

    indent = "    "

    def __init__(self, func: PrimFunc):
        unsupported = sorted(d for d in walk_dtypes(func) if lanes_of(d)[0] == "f16")
        if unsupported or any(b.storage_dtype not in WORDS for b in func.params):
            raise NotImplementedError(f"kernel {func.name}: Python kernels hold f32/i32/u32/bool, int64 tensors")
        self.func = func
        self.constants: dict[str, str] = {}  # f32 literal -> module-level name (built once, not per use)
        self.lines: list[str] = []

    def render(self) -> str:
        func = self.func
        x, y, z = func.workgroup_size
        entry = entry_name(func)
        barriers = any(isinstance(s, Barrier) for s, _ in walk_stmts(func.body))
        shared = [b for b in func.scratch if b.scope == "workgroup"]
        self.emit(1, f"def thread({', '.join(THREAD_PARAMS + tuple(self.name(b.name) for b in shared))}):")
        for buf in func.scratch:
            if buf.scope == "private":
                self.emit(2, f"{self.name(buf.name)} = {self.scratch(buf)}")
        self.block(func.body, 2)
        body = self.lines
        self.lines = []
        self.emit(1, f"({''.join(self.name(b.name) + ', ' for b in func.params)}) = buffers")
        if func.scalars:
            self.emit(1, f"({''.join(self.name('sym_' + s) + ', ' for s in func.scalars)}) = scalars")
        self.emit(1, "nwg_x, nwg_y, nwg_z = grid")
        self.lines += body
        self.emit(1, "for wg_z in range(nwg_z):")
        self.emit(2, "for wg_y in range(nwg_y):")
        self.emit(3, "for wg_x in range(nwg_x):")
        for buf in shared:
            self.emit(4, f"{self.name(buf.name)} = {self.scratch(buf)}")
        args = ", ".join(THREAD_PARAMS + tuple(self.name(b.name) for b in shared))
        if barriers:
            self.emit(4, f"lockstep([thread({args}) for lid_x, lid_y, lid_z in THREADS])")
        else:
            self.emit(4, "for lid_x, lid_y, lid_z in THREADS:")
            self.emit(5, f"thread({args})")
        header = [f'"""Kernel {func.name}: rendered by the {NAME} backend of tests/test_backend_plugin.py."""',
                  "", PRELUDE, f"THREADS = [(x, y, z) for z in range({z}) for y in range({y}) for x in range({x})]"]
        header += [f"{name} = f32({value!r})" for value, name in self.constants.items()]
        return "\n".join(header + ["", "", f"def {entry}(buffers, scalars, grid):", *self.lines]) + "\n"

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(self.indent * depth + text)

    def name(self, name: str) -> str:
        name = re.sub(r"\W", "_", name)
        return name + "_" if name in RESERVED or re.fullmatch(r"F32_\d+", name) else name

    def scratch(self, buf: Buffer) -> str:
        size = arith.Analyzer().as_int(buf.size)
        if size is None:
            raise ValueError(f"scratch buffer {buf.name} needs a static size, has {buf.shape}")
        return f"[{self.literal(False if buf.dtype == 'bool' else 0, buf.dtype)}] * {size}"

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, e: TExpr) -> str:
        if isinstance(e, Const):
            scalar, lanes = lanes_of(e.dtype)
            text = self.literal(e.value, scalar)
            return text if lanes == 1 else f"({text},) * {lanes}"
        if isinstance(e, Local):
            return self.name(e.name)
        if isinstance(e, Builtin):
            if e.kind == "local_id":
                return f"lid_{'xyz'[e.axis]}"
            if e.kind == "workgroup_id":
                return f"wg_{'xyz'[e.axis]}"
            if e.kind == "num_workgroups":
                return f"nwg_{'xyz'[e.axis]}"
            raise NotImplementedError(f"Python kernels have no builtin {e.kind} (the target has no subgroups)")
        if isinstance(e, Load):
            index = self.expr(e.index)
            if e.lanes == 1:
                return self.load(e.buffer, index)
            return f"tuple({self.load(e.buffer, 'lane')} for lane in group_lanes({index}, {e.lanes}))"
        if _wraps(e):  # a chain of + - * << & | ^ wraps once, where its value is used
            return f"{e.dtype}({self.unwrapped(e)[1:-1]})"
        operands = [self.expr(child) for child in _operands(e)]
        if lanes_of(e.dtype)[1] == 1:
            return self.spell(e, operands)
        # A vector operation: the scalar spelling applied lane by lane.
        params = [f"p{i}" for i in range(len(operands))]
        return f"lanewise(lambda {', '.join(params)}: {self.spell(e, params)}, {', '.join(operands)})"

    def unwrapped(self, e: TExpr) -> str:
        """``e`` as exact integer arithmetic: reducing mod 2**32 commutes with + - * << & | ^, so only
        the chain's result needs wrapping (three times fewer calls of i32 in index math)."""
        if not _wraps(e):
            return self.expr(e)
        a, b = self.unwrapped(e.a), self.unwrapped(e.b)
        return f"({a} << {self.shift_count(e.b, b)})" if e.op == "<<" else f"({a} {e.op} {b})"

    def spell(self, e: TExpr, operands: list[str]) -> str:
        """A scalar operation of ``e``'s kind on operands already spelled."""
        dtype = lanes_of(e.dtype)[0]
        if isinstance(e, Binary):
            return self.binary(e, *operands)
        if isinstance(e, Unary) and e.op == "neg":
            return f"(-{operands[0]})" if dtype == "f32" else f"{dtype}(-{operands[0]})"
        if isinstance(e, Unary) and e.op == "not":
            return f"(not {operands[0]})"
        if isinstance(e, Unary) and e.op == "abs":
            return f"abs({operands[0]})" if dtype == "f32" else f"{dtype}(abs({operands[0]}))"
        if isinstance(e, (Unary, Call)):
            name = e.op if isinstance(e, Unary) else e.name
            if name not in INTRINSICS:
                raise NotImplementedError(f"Python kernels have no intrinsic {name!r}")
            return INTRINSICS[name].format(*operands)
        if isinstance(e, Cast):
            return self.cast(operands[0], dtype, lanes_of(e.x.dtype)[0])
        if isinstance(e, Select):
            cond, a, b = operands
            return f"({a} if {cond} else {b})"
        raise TypeError(f"cannot render {e!r}")

    def binary(self, e: Binary, a: str, b: str) -> str:
        op, dtype = e.op, lanes_of(e.a.dtype)[0]
        if op in ("min", "max"):
            return f"{op}({a}, {b})"
        if op in LOGICAL:
            return f"({a} {LOGICAL[op]} {b})"
        if dtype in ("i32", "u32"):
            if op in INTEGER_DIVISION:
                return f"{INTEGER_DIVISION[op]}_{dtype}({a}, {b})"
            if op in RING:  # vector lanes (scalars wrap whole chains: ``unwrapped``)
                return f"{dtype}({a} << {self.shift_count(e.b, b)})" if op == "<<" else f"{dtype}({a} {op} {b})"
            if op == ">>":  # arithmetic on i32 (Python ints are signed), logical on u32 (never negative)
                return f"({a} >> {self.shift_count(e.b, b)})"
        if op == "%":
            return f"np.fmod({a}, {b})"
        return f"({a} {op} {b})"

    def shift_count(self, e: TExpr, text: str) -> str:
        """Shifts count modulo 32, as WGSL's and the C backend's do."""
        return str(int(e.value) & 31) if isinstance(e, Const) and lanes_of(e.dtype)[1] == 1 else f"({text} & 31)"

    def cast(self, x: str, dtype: str, source: str) -> str:
        if dtype == source:
            return x
        if dtype == "f32":
            return f"f32({x})"
        if dtype == "bool":
            return f"({x} != 0)"
        if source == "f32":
            return f"{dtype}_of_f32({x})"
        if source == "bool":
            return f"int({x})"
        return f"{dtype}({x})"  # i32 <-> u32 keeps the bits

    def literal(self, value, dtype: str) -> str:
        if dtype == "bool":
            return "True" if value else "False"
        if dtype == "i32":
            return str(((int(value) + 0x80000000) & 0xFFFFFFFF) - 0x80000000)
        if dtype == "u32":
            return str(int(value) & 0xFFFFFFFF)
        text = repr(float(value))
        return self.constants.setdefault(text, f"F32_{len(self.constants)}")

    def load(self, buf: Buffer, index: str) -> str:
        name = self.name(buf.name)
        if buf.scope != "global":  # scratch: a list of compute values
            return f"{name}[{index}]"
        if buf.storage_dtype == "bool":  # one u32 word per element
            return f"({name}[{index}] != 0)"
        if buf.storage_dtype == "int64":  # two i32 words, the low one first
            return f"int({name}[2 * {index}])"
        return f"{name}[{index}]" if buf.dtype == "f32" else f"int({name}[{index}])"

    # -- statements ----------------------------------------------------------------------------

    def stmts(self, body, depth: int) -> None:
        for s in body:
            self.stmt(s, depth)

    def stmt(self, s, depth: int) -> None:
        if isinstance(s, (Declare, Assign)):
            self.emit(depth, f"{self.name(s.var.name)} = {self.expr(s.value)}")
        elif isinstance(s, Store):
            index, value = self.expr(s.index), self.expr(s.value)
            if s.lanes == 1:
                self.store(s.buffer, index, value, depth)
            else:
                self.emit(depth, f"for lane, lane_value in zip(group_lanes({index}, {s.lanes}), {value}):")
                self.store(s.buffer, "lane", "lane_value", depth + 1)
        elif isinstance(s, IfThen):
            self.emit(depth, f"if {self.expr(s.cond)}:")
            self.block(s.then, depth + 1)
            if s.otherwise:
                self.emit(depth, "else:")
                self.block(s.otherwise, depth + 1)
        elif isinstance(s, For):  # `unroll` is a hint a Python loop ignores
            step = f", {s.step}" if s.step != 1 else ""
            self.emit(depth, f"for {self.name(s.var.name)} in range({self.expr(s.start)}, {self.expr(s.stop)}{step}):")
            self.block(s.body, depth + 1)
        elif isinstance(s, Barrier):  # workgroup or storage scope: the lock step orders both
            self.emit(depth, "yield")
        else:
            raise TypeError(f"cannot render {s!r}")

    def block(self, body, depth: int) -> None:
        self.stmts(body, depth)
        if not body:
            self.emit(depth, "pass")

    def store(self, buf: Buffer, index: str, value: str, depth: int) -> None:
        name = self.name(buf.name)
        if buf.scope == "global" and buf.storage_dtype == "bool":
            self.emit(depth, f"{name}[{index}] = 1 if {value} else 0")
        elif buf.scope == "global" and buf.storage_dtype == "int64":
            self.emit(depth, f"store_at, store_value = 2 * {index}, {value}")
            self.emit(depth, f"{name}[store_at] = store_value")
            self.emit(depth, f"{name}[store_at + 1] = -1 if store_value < 0 else 0")
        else:
            self.emit(depth, f"{name}[{index}] = {value}")


def _wraps(e: TExpr) -> bool:
    """A scalar integer operation whose result, taken mod 2**32, depends only on its operands mod 2**32."""
    return isinstance(e, Binary) and e.op in RING and e.dtype in ("i32", "u32")


def _operands(e: TExpr) -> tuple[TExpr, ...]:
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, (Unary, Cast)):
        return (e.x,)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, Call):
        return e.args
    raise TypeError(f"cannot render {e!r}")


# -- the backend, its target and the device -----------------------------------------------------


class PythonBackend(Backend):
    name = NAME
    language = "Python (numpy float32 scalars)"
    binary = False
    device_kinds = (NAME,)

    def compile(self, kernels, target, progress=None) -> CompiledKernels:
        out = CompiledKernels()
        for index, func in enumerate(kernels):
            if progress is not None:
                progress("kernels", index, len(kernels))
            entry = entry_name(func)
            path = f"kernels/{index:03d}_{entry}.py"
            out.modules[path] = PythonRenderer(func).render().encode()
            scalars = [{"name": s, "passed": "argument", "position": i} for i, s in enumerate(func.scalars)]
            out.kernels.append(CompiledKernel(func.name, self.name, path, entry, tuple(func.workgroup_size),
                                              kernel_abi(func, scalars),
                                              {"features": [], "limits": kernel_limits(func)}))
        return out


class PythonDevice(Device):
    """Buffers are numpy bytes of this process; a kernel is its module's entry function; launches run
    at once, in order."""

    kind = NAME
    backends = (NAME,)
    name = "Python (this process)"

    def __init__(self):
        self.namespaces: dict[bytes, dict] = {}  # module source -> its globals once run

    # No ``limit``: any workgroup size, buffer count or workgroup memory runs here (the preset's small
    # limits only steer the schedules).

    def allocate(self, nbytes: int) -> np.ndarray:
        return np.zeros(-(-max(nbytes, 4) // 4) * 4, np.uint8)

    def upload(self, buffer: np.ndarray, offset: int, data: bytes) -> None:
        buffer[offset:offset + len(data)] = np.frombuffer(bytes(data), np.uint8)

    def read_back(self, view: View) -> bytes:
        return view.buffer[view.offset:view.offset + view.nbytes].tobytes()

    def copy(self, source: View, destination: View) -> None:
        start = destination.offset
        destination.buffer[start:start + source.nbytes] = source.buffer[source.offset:source.offset + source.nbytes]

    def load_kernels(self, kernels: list[dict], modules: dict[str, bytes]) -> list:
        handles = []
        for record in kernels:
            path, source = record["module"], modules[record["module"]]
            if source not in self.namespaces:
                self.namespaces[source] = {"__name__": path}
                exec(compile(source.decode(), path, "exec"), self.namespaces[source])
            words = [WORDS[binding["dtype"]] for binding in record["abi"]["bindings"]]
            handles.append((self.namespaces[source][record["entry_point"]], words))
        return handles

    def bind(self, kernel, views: list[View]):
        entry, words = kernel
        return entry, [v.buffer[v.offset:v.offset + v.nbytes].view(w) for v, w in zip(views, words)]

    def launch(self, bound, scalars: list[int], grid: list[int]) -> None:
        entry, arrays = bound
        with np.errstate(all="ignore"):  # f32 overflow and division by zero give inf, as on a GPU
            entry(arrays, [int(s) for s in scalars], [int(g) for g in grid])


register_backend(PythonBackend())
register_kind(TargetKind(NAME, backend=NAME, vector_lanes=False,
                         limits=(("maxBufferSize", 1 << 30), ("maxStorageBufferBindingSize", 1 << 30))))
# Small workgroups: reductions use fewer tree steps and the lock step has fewer threads to advance.
register_preset(NAME, NAME, cpu_adapter=True, limits={
    "maxComputeInvocationsPerWorkgroup": 32, "maxComputeWorkgroupSizeX": 32, "maxComputeWorkgroupSizeY": 32,
    "maxComputeWorkgroupSizeZ": 32}, description="tir rendered as Python, run in this process (a test plugin)")
register_device(NAME, PythonDevice, backends=(NAME,))


# -- the tests -----------------------------------------------------------------------------------


def greedy(vm, prompt: np.ndarray, steps: int) -> list[int]:
    """One prefill, then one decode per token, taking the argmax each time."""
    vm.reset_state()
    tokens = [int(vm["prefill"](prompt, len(prompt))[0].argmax())]
    while len(tokens) < steps:
        logits = vm["decode"](np.array([tokens[-1]], np.int32), len(prompt) + len(tokens))
        tokens.append(int(logits[0].argmax()))
    return tokens


def test_the_tiny_llama_runs_end_to_end_on_a_backend_defined_in_a_test(tmp_path):
    from models.test_llama_vs_transformers import reference

    model, config, weights = reference("gqa-2x")
    mod = nn.bind_weights(export_llm(LlamaForCausalLM(config), 32), weights)
    prompt, steps = np.array([5, 17, 3, 88, 41], np.int32), 12
    with torch.no_grad():
        want = model.generate(torch.tensor(prompt[None].astype(np.int64)), max_new_tokens=steps,
                              do_sample=False)[0, len(prompt):].tolist()

    exe = tessera.build(mod, NAME)
    assert {k["backend"] for k in exe.kernels} == {NAME}
    assert all(path.endswith(".py") for path in exe.modules) and len(exe.modules) == len(exe.kernels)
    exe.save(str(tmp_path))
    vm = VirtualMachine(Executable.load(str(tmp_path)))
    assert isinstance(vm.device, PythonDevice)  # found by the backends it runs, not by name
    assert greedy(vm, prompt, steps) == want
    assert greedy(VirtualMachine(tessera.build(mod, "llvmpipe")), prompt, steps) == want


@pytest.fixture(scope="module")
def runner():
    return KernelRunner(PythonDevice(), Target.preset(NAME))


def run_kernel(runner, make, params, args, target=NAME) -> tuple[PrimFunc, np.ndarray]:
    """``make(*params)`` fused and legalized for ``target`` into one kernel, run on ``args`` by the
    runner (through the interpreter, which passes the kernel its inputs in the order fusion chose)."""
    names = [Var(f"x{i}", p) for i, p in enumerate(params)]
    bb = BlockBuilder()
    with bb.function("main", names):
        with bb.dataflow():
            out = bb.emit_output(make(*names), "out")
        bb.emit_func_output(out)
    target = Target.preset(target)
    lowered = legalize_ops(fuse_tir(fuse_ops(bb.get(), target), target), target)
    (kernel,) = [f for f in lowered.functions.values() if isinstance(f, PrimFunc)]
    return kernel, interpret(lowered, "main", *args, kernel_runner=runner)


def test_a_softmax_kernel_with_barriers(runner):
    x = np.random.default_rng(0).standard_normal((7, 300)).astype(np.float32) * 4
    kernel, got = run_kernel(runner, op.nn.softmax, [Tensor(("n", 300), "float32")], [x])
    assert any(isinstance(s, Barrier) for s, _ in walk_stmts(kernel.body))
    record, modules = runner.compile(kernel)
    assert "yield" in modules[record["module"]].decode()  # the threads are generators, run in lock step
    want = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, want / want.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_a_tiled_matmul_with_workgroup_and_private_scratch(runner):
    """The GPU GEMM schedule (for WebGPU): tiles in workgroup memory, barriers inside the K loop,
    per-thread accumulators in private scratch."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((7, 70)).astype(np.float32), rng.standard_normal((70, 33)).astype(np.float32)
    kernel, got = run_kernel(runner, op.matmul, [Tensor(("n", 70), "float32"), Tensor((70, 33), "float32")], [a, b],
                             target="webgpu")
    assert {buf.scope for buf in kernel.scratch} == {"workgroup", "private"}
    assert any(isinstance(s, For) and any(isinstance(t, Barrier) for t in s.body) for s, _ in walk_stmts(kernel.body))
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)


def test_int64_and_bool_storage(runner):
    a = np.array([-3, 5, 2**40 + 7, -(2**33), 0, 9, -1], np.int64)
    b = np.array([4, -5, 2, 1, 0, -9, 7], np.int64)
    low = a.astype(np.int32).astype(np.int64)  # kernels compute with the low word, as i32
    _, less = run_kernel(runner, op.less, [Tensor(("n",), "int64")] * 2, [a, b])
    np.testing.assert_array_equal(less, low < b)
    _, got = run_kernel(runner, op.where, [Tensor(("n",), "bool"), Tensor(("n",), "int64"), Tensor(("n",), "int64")],
                        [less, low, -b])
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.where(low < b, low, -b))  # negative values: high words all ones


def test_vector_lanes_and_32_bit_integer_wrapping(runner):
    """Kernels legalized for a target with vector types (WebGPU) read and write 4 lanes at a time."""
    a = np.array([[2**31 - 1, -(2**31), 7, -7], [100, 3, 0, 1]], np.int32)
    b = np.array([[1, -1, 2**31 - 1, 9], [-100, 4, 0, 2]], np.int32)
    add, got = run_kernel(runner, op.add, [Tensor(("n", 4), "int32")] * 2, [a, b], target="llvmpipe")
    assert add.attrs["rule"] == "vectorized-elementwise"
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, a + b)
    x, y = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    gelu, got = run_kernel(runner, lambda x, y: op.where(op.greater(x, y), op.nn.gelu(x), op.negative(y)),
                           [Tensor(("n", 4), "float32")] * 2, [x, y], target="llvmpipe")
    assert gelu.attrs["rule"] == "vectorized-elementwise"
    erf = np.vectorize(math.erf)(x.astype(np.float64) / math.sqrt(2.0))
    np.testing.assert_allclose(got, np.where(x > y, 0.5 * x * (1 + erf), -y), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fmt", ["q4_1", "q8_0"])
def test_quantized_matmul_kernels(runner, fmt):
    """GGUF blocks read as u32 words: shifts, masks, f16 scales from their bits, signed bytes."""
    import gguf

    n, k = 42, 64
    w = np.random.default_rng(2).standard_normal((n, k)).astype(np.float32)
    blocks = gguf.quants.quantize(w, getattr(gguf.GGMLQuantizationType, fmt.upper()))
    words = np.ascontiguousarray(blocks).view("<u4")
    x = np.random.default_rng(3).standard_normal((3, k)).astype(np.float32)
    kernel, got = run_kernel(runner, lambda x, q: op.quantized_matmul(x, q, format=fmt, k=k),
                             [Tensor(("m", k), "float32"), Tensor((n, words.shape[1]), "uint32")], [x, words])
    assert kernel.attrs["rule"] == "quantized-matmul"
    want = x @ gguf.quants.dequantize(blocks, getattr(gguf.GGMLQuantizationType, fmt.upper())).T
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
