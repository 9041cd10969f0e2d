"""Instruments on the pipeline: print after a pass, check after every pass, time every pass."""

import io
from dataclasses import replace

import numpy as np
import pytest
from modules import CATALOGUE
from tessera import arith, nn
from tessera.ir import IRModule, SeqExpr, Var, print_module
from tessera.models import LlamaForCausalLM, export_llm
from tessera.target import Target
from tessera.tir.ir import Buffer, Builtin, Load, PrimFunc, Store
from tessera.transform.instruments import CheckAfterEachPass, PassCheckError, PassTimings, PrintAfter
from tessera.transform.pipeline import Pipeline
from tiny_llama import tiny_config

TARGET = Target.preset("webgpu")
UPPER_BOUNDS = {"n": 32, "total": 32, "m": 32, "k": 32, "batch": 32}


def pipeline(*instruments) -> Pipeline:
    return replace(Pipeline.default(TARGET, UPPER_BOUNDS), instruments=list(instruments))


def test_print_after_writes_the_module_after_the_named_pass_and_no_other():
    stream = io.StringIO()
    pipeline(PrintAfter(["fuse_tir"], stream))(CATALOGUE["attention_demo"]())
    mod = CATALOGUE["attention_demo"]()
    for name, run in Pipeline.default(TARGET, UPPER_BOUNDS).passes:
        mod = run(mod)
        if name == "fuse_tir":
            break
    assert stream.getvalue() == "# after fuse_tir\n" + print_module(mod, elide_weights=True)
    assert "@T.prim_func" in stream.getvalue()


def test_the_checks_pass_on_a_tiny_llama_after_every_pass():
    """Also fuse_ops' functions: a symbolic value that only an attribute reads (rope's
    arange(start=total - n, end=total)) comes in through the fused function's shape parameter."""
    model = LlamaForCausalLM(tiny_config("gqa-2x"))
    rng = np.random.default_rng(0)
    weights = {path: rng.standard_normal([int(d.value) for d in p.sinfo.shape]).astype(p.sinfo.dtype)
               for path, p in model.named_parameters()}
    checks = CheckAfterEachPass()
    lowered = pipeline(checks)(nn.bind_weights(export_llm(model, 32), weights))
    kernels = [f for f in lowered.functions.values() if isinstance(f, PrimFunc)]
    assert len(kernels) > 10 and {id(k) for k in kernels} <= checks.verified.keys()


def ghost_return(mod: IRModule) -> IRModule:
    """A broken pass: attention_demo's function returns a variable bound nowhere."""
    func = mod.functions["attention"]
    ghost = Var("ghost", func.ret_struct_info)
    broken = replace(func, body=SeqExpr(func.body.blocks, ghost))
    return IRModule({**mod.functions, "attention": broken}, mod.global_infos)


def out_of_bounds_kernel(mod: IRModule) -> IRModule:
    """A broken pass: it adds a kernel whose 64 threads read a buffer of n elements unguarded."""
    n = arith.Var("n")
    src, dst = Buffer("src", "f32", (n,), "global", "float32"), Buffer("dst", "f32", (n,), "global", "float32")
    lid = Builtin("local_id", 0)
    kernel = PrimFunc("copy", (src,), (dst,), ("n",), (Store(dst, lid, Load(src, lid)),), (64, 1, 1),
                      (arith.IntImm(1),) * 3)
    return IRModule({**mod.functions, "copy": kernel}, mod.global_infos)


def test_the_checks_name_the_pass_that_broke_the_module():
    broken = pipeline(CheckAfterEachPass())
    broken.insert_after("bind_results", "ghost_return", ghost_return)
    with pytest.raises(PassCheckError, match="after pass ghost_return: the module is not well formed: .*'ghost'"):
        broken(CATALOGUE["attention_demo"]())

    broken = pipeline(CheckAfterEachPass())
    broken.insert_after("legalize_ops", "out_of_bounds_kernel", out_of_bounds_kernel)
    with pytest.raises(PassCheckError, match=r"after pass out_of_bounds_kernel: kernel copy fails verification at "
                                             r"n = 1: kernel copy: read of src\[T.local_id.x\] may fall outside"):
        broken(CATALOGUE["attention_demo"]())
    with pytest.raises(PassCheckError, match=r"in the module given to the pipeline \(before lambda_lift\): the "
                                             r"module is not well formed"):
        pipeline(CheckAfterEachPass())(ghost_return(CATALOGUE["attention_demo"]()))
    # Without the instrument the same pipeline runs on: the checks are the instrument's.
    unchecked = pipeline()
    unchecked.insert_after("bind_results", "ghost_return", ghost_return)
    unchecked.passes = unchecked.passes[:unchecked.passes.index(("ghost_return", ghost_return)) + 1]
    assert "ghost" in unchecked(CATALOGUE["attention_demo"]()).script()


def test_the_timings_are_a_table_of_every_pass_in_order():
    timings = PassTimings()
    pipeline(timings)(CATALOGUE["attention_demo"]())
    names = [name for name, _ in Pipeline.default(TARGET, UPPER_BOUNDS).passes]
    assert [name for name, _ in timings.seconds] == names
    assert all(seconds >= 0 for _, seconds in timings.seconds)
    lines = timings.table().splitlines()
    assert lines[0].split() == ["pass", "seconds"]
    assert [line.split()[0] for line in lines[1:-1]] == names
    total = float(lines[-1].split()[1])
    assert lines[-1].split()[0] == "total" and total == pytest.approx(sum(s for _, s in timings.seconds), abs=2e-3)
