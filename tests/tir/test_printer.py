"""One printer for a kernel: ``PrimFunc.script()`` is the text ``IRModule.script()`` holds for it, and
that text parses back to the same kernel; ``script(brief=True)`` is its start, for reading."""

import textwrap

import numpy as np
import pytest
from tessera import arith, nn
from tessera.ir import IRModule, assert_structural_equal
from tessera.models import LlamaForCausalLM, export_llm
from tessera.script import from_source
from tessera.target import Target
from tessera.tir.ir import Barrier, Buffer, Builtin, Const, Declare, For, Load, Local, PrimFunc, Store, binary
from tessera.tir.lower import split_workgroups
from tessera.tir.script import BRIEF_LINES
from tessera.transform.pipeline import Pipeline
from tiny_llama import tiny_config

ONE = arith.IntImm(1)
LID = Builtin("local_id", 0)


@pytest.fixture(scope="module")
def compiled_tiny_llama() -> IRModule:
    """The tiny grouped-query Llama (tests/tiny_llama.py) with random weights, after the default pipeline."""
    model = LlamaForCausalLM(tiny_config("gqa-2x"))
    rng = np.random.default_rng(0)
    weights = {path: rng.standard_normal([int(d.value) for d in p.sinfo.shape]).astype(p.sinfo.dtype)
               for path, p in model.named_parameters()}
    mod = nn.bind_weights(export_llm(model, 32), weights)
    return Pipeline.default(Target.preset("webgpu"), {"n": 32, "total": 32})(mod)


def kernel_text_in_module(module_text: str, name: str) -> str:
    """The ``@T.prim_func`` definition of kernel ``name`` in a printed module, at the left margin."""
    lines = module_text.splitlines()
    start = lines.index(f"    def {name}(") - 1
    end = next((i for i in range(start, len(lines)) if not lines[i]), len(lines))
    return textwrap.dedent("\n".join(lines[start:end])) + "\n"


def module_of(func: PrimFunc) -> IRModule:
    return from_source("@I.ir_module\nclass Module:\n" + textwrap.indent(func.script(), "    "))


def test_a_kernel_prints_as_the_module_prints_it_and_parses_back(compiled_tiny_llama):
    text = compiled_tiny_llama.script()
    kernels = {name: f for name, f in compiled_tiny_llama.functions.items() if isinstance(f, PrimFunc)}
    assert len(kernels) > 10
    for name, func in kernels.items():
        assert func.name == name
        assert func.script() == kernel_text_in_module(text, name), name
        assert_structural_equal(module_of(func).functions[name], func)


def test_brief_keeps_the_header_and_counts_the_body_it_leaves_out(compiled_tiny_llama):
    func = max(compiled_tiny_llama.functions.values(),
               key=lambda f: len(f.script().splitlines()) if isinstance(f, PrimFunc) else 0)
    whole, brief = func.script().splitlines(), func.script(brief=True).splitlines()
    body = whole.index(next(line for line in whole if line.strip().startswith("T.launch(")))
    scratch = sum(1 for line in whole if "T.alloc_buffer(" in line or "T.func_attr(" in line)
    kept = body + 1 + scratch + BRIEF_LINES
    assert brief[:kept] == whole[:kept]
    assert brief[kept:] == [f"    # ... {len(whole) - kept} more lines"]
    small = PrimFunc("copy", (), (Buffer("y", "f32", (ONE,), "global", "float32"),), (),
                     (Store(Buffer("y", "f32", (ONE,), "global", "float32"), Const(0), Const(1.0, "f32")),),
                     (1, 1, 1), (ONE, ONE, ONE))
    assert small.script(brief=True) == small.script()


def test_a_kernel_split_into_thread_loops_prints_and_parses_back():
    n = arith.Var("n")
    x, y = Buffer("x", "f32", (n,), "global", "float32"), Buffer("y", "f32", (n,), "global", "float32")
    red = Buffer("red", "f32", (arith.IntImm(4),), "workgroup")
    mine = Local("mine", "f32")
    body = (Declare(mine, Load(x, LID)), Store(red, LID, mine), Barrier(),
            For(Local("s"), Const(0), Const(2), (Store(y, LID, Load(red, binary("-", Const(3), LID))),)))
    split = split_workgroups(PrimFunc("reverse", (x,), (y,), ("n",), body, (4, 1, 1), (ONE, ONE, ONE), (red,)))
    text = split.script()
    assert "    for lid in T.threads(4):\n" in text
    assert_structural_equal(module_of(split).functions["reverse"], split)
