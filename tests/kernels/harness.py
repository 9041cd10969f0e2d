"""Run one operator as legalized, scheduled WGSL kernels on WebGPU and compare with numpy."""

from __future__ import annotations

import numpy as np
from tessera import arith
from tessera.ir import BlockBuilder, Function, ShapeValue, Var, interpret
from tessera.ir.struct_info import TensorStructInfo, sinfo_vars
from tessera.target import Target
from tessera.tir.verify import verify_kernel
from tessera.transform import legalize_ops

SIZES = (1, 7, 64, 1000)
TARGET = Target.preset("llvmpipe")
BROWSER_TARGET = Target.preset("swiftshader")


def build(make, params):
    vars_ = [Var(f"x{i}", s) for i, s in enumerate(params)]
    bb = BlockBuilder()
    with bb.function("main", vars_):
        with bb.dataflow():
            out = bb.emit_output(make(*vars_), "out")
        bb.emit_func_output(out)
    return bb.get()


def random_value(sinfo: TensorStructInfo, env, rng, low=0.5, high=1.5):
    shape = tuple(arith.evaluate(d, env) for d in sinfo.shape)
    if sinfo.dtype == "bool":
        return rng.random(shape) > 0.5
    if sinfo.dtype.startswith(("int", "uint")):
        return rng.integers(1, 4, shape).astype(sinfo.dtype)
    return rng.uniform(low, high, shape).astype(sinfo.dtype)


def size_sweeps(params, sizes=SIZES, base=7):
    """One environment per (symbolic variable, size): the swept variable at that size, others at base."""
    names = list(dict.fromkeys(v.name for p in params for v in sinfo_vars(p)))
    if not names:
        return [{}]
    return [{n: (size if n == swept else base) for n in names} for swept in names for size in sizes]


# Operators that some kernel test has run; conftest.py checks that none is missing.
COVERED_OPS: set[str] = set()
# Every kernel the tests ran, by WGSL source: the browser test compiles them all in Chromium.
SHADERS: dict[str, dict] = {}


def check_op(runner, make, params, *, rtol=1e-5, atol=1e-5, sizes=SIZES, inputs=None, seed=0, target=TARGET):
    """Legalize ``make(*params)`` for the llvmpipe target and compare every size with numpy."""
    mod = build(make, params)
    COVERED_OPS.update(_op_names(mod))
    lowered = legalize_ops(mod, target)
    kernels = [f for f in lowered.functions.values() if not isinstance(f, Function)]
    if target.kind == "webgpu":
        _record_browser_shaders(mod, kernels)
    rng = np.random.default_rng(seed)
    for env in size_sweeps(params, sizes):
        for kernel in kernels:
            verify_kernel(kernel, {name: env[name] for name in kernel.scalars})
        args = inputs(env, rng) if inputs else [random_value(p, env, rng) for p in params]
        want = interpret(mod, "main", *args)
        got = interpret(lowered, "main", *args, kernel_runner=runner)
        for g, w in zip(_flat(got), _flat(want)):
            if isinstance(w, ShapeValue):
                assert g == w
                continue
            assert g.dtype == w.dtype and g.shape == w.shape, (env, g.dtype, w.dtype, g.shape, w.shape)
            if w.dtype.kind == "f":
                np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                           err_msg=f"sizes {env}")
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"sizes {env}")
    return lowered, kernels


def _flat(value):
    return list(value) if isinstance(value, tuple) and not isinstance(value, ShapeValue) else [value]


def _op_names(mod):
    from tessera.ir import Call, Op

    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, Call) and isinstance(binding.value.op, Op):
                yield binding.value.op.name


def _record_browser_shaders(mod, kernels) -> None:
    """What Chromium would compile: this module built for its adapter, and these kernels where
    they need no browser-specific directive (wgpu and Chrome spell subgroup support differently)."""
    from tessera.op.lowering import LegalizeError

    for kernel in kernels:
        if not kernel.attrs.get("subgroups"):
            _record_shader(kernel)
    try:
        browser = legalize_ops(mod, BROWSER_TARGET)
    except LegalizeError:  # e.g. float16 where SwiftShader has no shader-f16
        return
    for kernel in browser.functions.values():
        if not isinstance(kernel, Function):
            _record_shader(kernel)


def _record_shader(kernel) -> None:
    from tessera.codegen.wgsl import LOWERING, emit_wgsl
    from tessera.tir.lower import lower_kernel

    wgsl = emit_wgsl(lower_kernel(kernel, LOWERING))
    SHADERS.setdefault(wgsl.source, {"name": kernel.name, "entry_point": wgsl.entry_point, "source": wgsl.source,
                                     "needs_f16": wgsl.source.startswith("enable f16;"),
                                     "workgroup_size": list(wgsl.workgroup_size)})
