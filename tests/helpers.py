"""Small builders shared by the IR tests."""

from __future__ import annotations

import numpy as np
from tessera.ir import BlockBuilder, IRModule, TensorStructInfo, Var, interpret, print_sinfo


def single_call_module(make_call, *param_sinfos, names=None, attrs=None) -> tuple[IRModule, Var]:
    """A function `main` whose parameters have ``param_sinfos`` and that binds one call."""
    names = names or [f"x{i}" for i in range(len(param_sinfos))]
    params = [Var(n, s) for n, s in zip(names, param_sinfos)]
    bb = BlockBuilder()
    with bb.function("main", params, attrs=attrs):
        with bb.dataflow():
            out = bb.emit_output(make_call(*params), "out")
        bb.emit_func_output(out)
    return bb.get(), out


def deduced(make_call, *param_sinfos, **kwargs) -> str:
    """The printed struct info deduced for ``make_call(*params)``."""
    _, out = single_call_module(make_call, *param_sinfos, **kwargs)
    return print_sinfo(out.struct_info)


def random_input(sinfo: TensorStructInfo, rng: np.random.Generator, sizes: dict | None = None):
    shape = tuple(int(d.value) if hasattr(d, "value") else sizes[d.name] for d in sinfo.shape)
    if sinfo.dtype == "bool":
        return rng.random(shape) > 0.5
    if sinfo.dtype.startswith("int") or sinfo.dtype.startswith("uint"):
        return rng.integers(0, 3, shape).astype(sinfo.dtype)
    return (rng.random(shape) + 0.5).astype(sinfo.dtype)


def run_single_call(make_call, *param_sinfos, sizes=None, seed=0):
    """Interpret the one-call module on random inputs; the interpreter checks the deduced info."""
    mod, _ = single_call_module(make_call, *param_sinfos)
    rng = np.random.default_rng(seed)
    inputs = [random_input(s, rng, sizes) for s in param_sinfos]
    return interpret(mod, "main", *inputs), inputs
