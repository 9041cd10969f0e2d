"""Run one operator as legalized, scheduled kernels on a device and compare with numpy.

Every kernel test runs on each device of ``KERNEL_DEVICES`` (the ``runner`` fixture of conftest.py
is parametrized over them): WGSL on WebGPU (llvmpipe through wgpu-py), each further backend on
a real implementation of its API, and c-native kernels on this machine's CPU. ``TESSERA_KERNEL_DEVICES=webgpu,vulkan`` picks some of them.
Tests name WebGPU targets (``TARGET``, or a target with chosen features to reach a schedule rule);
``target_for`` states the same target for the runner's device kind.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

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

# Device kind -> (the kernel runner's factory, the preset for this machine's implementation of it).
KERNEL_DEVICES = {
    "webgpu": ("tessera.vm.kernel_runner:default_runner", "llvmpipe"),
    "vulkan": ("tessera.vm.vulkan_runner:VulkanKernelRunner", "lavapipe"),
    "opencl": ("tessera.vm.opencl_runner:OpenCLKernelRunner", "pocl"),
    "cpu": ("tessera.vm.cpu_runner:CPUKernelRunner", "cpu"),
}


def kernel_devices() -> list[str]:
    """The device kinds the kernel tests run on: all of ``KERNEL_DEVICES`` unless the environment
    names some (an unknown name is an error, not a silently smaller run)."""
    wanted = os.environ.get("TESSERA_KERNEL_DEVICES")
    if not wanted:
        return list(KERNEL_DEVICES)
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    unknown = set(names) - set(KERNEL_DEVICES)
    if unknown:
        raise ValueError(f"TESSERA_KERNEL_DEVICES names {', '.join(sorted(unknown))}; known: {', '.join(KERNEL_DEVICES)}")
    return names


def open_runner(kind: str):
    module, _, factory = KERNEL_DEVICES[kind][0].partition(":")
    return getattr(importlib.import_module(module), factory)()


def target_for(runner, target: Target | None = None) -> Target:
    """``target`` (a WebGPU target a test names; ``TARGET`` when None) for the runner's device kind:
    the kind's preset for this machine in place of llvmpipe's, else the same features (those the
    device has) and limits, so a test reaches the same schedule rule on every device."""
    target = target or TARGET
    kind = runner.target.kind
    if target.kind == kind:
        return target
    if target.name == TARGET.name:
        return Target.preset(KERNEL_DEVICES[kind][1])
    return Target(kind, target.features & runner.target.features, dict(target.limits),
                  name=f"{target.name} as {kind}", cpu_adapter=target.cpu_adapter,
                  loop_budget=runner.target.loop_budget)


# CPU targets whose workgroup threads run one after another (C kernels) replace the rules that spread
# one element, or one reduction, over threads (tir/schedule/injective.py, reduction.py).
SERIAL_RULES = {"injective": "injective-rows", "vectorized-elementwise": "injective-rows",
                "workgroup-reduction": "injective-rows", "row-reduction": "serial-rows"}


def rule_on(runner, rule: str) -> str:
    """The rule a kernel that gets ``rule`` on GPUs gets on the runner's device."""
    serial = runner.target.serial_threads and runner.target.cpu_adapter
    return SERIAL_RULES.get(rule, rule) if serial else rule


def q8_blocks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x (rows, K) as activations="q8" rounds it, written out here step by step in f32 (blocks of 32
    along K: d = max|x| / 127, q = round half to even of x * (1 / d)): q (int8, x's shape) and d
    (f32, one per block)."""
    blocks = x.astype(np.float32).reshape(*x.shape[:-1], -1, 32)
    d = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127)
    inverse = np.where(d > 0, np.float32(1) / np.where(d > 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.rint(blocks * inverse)
    assert np.abs(q).max() <= 127
    return q.astype(np.int8).reshape(x.shape), d[..., 0]


def rounded_to_q8(x: np.ndarray) -> np.ndarray:
    """x as activations="q8" reads it: q * d."""
    q, d = q8_blocks(x)
    return (q.reshape(*d.shape, 32).astype(np.float32) * d[..., None]).astype(np.float32).reshape(x.shape)


def build(make, params):
    vars_ = [Var(f"x{i}", s) for i, s in enumerate(params)]
    bb = BlockBuilder()
    with bb.function("main", vars_):
        with bb.dataflow():
            out = bb.emit_output(make(*vars_), "out")
        bb.emit_func_output(out)
    return bb.get()


@dataclass(frozen=True)
class Domain:
    """The values drawn for an operand: floats uniform in [low, high], integers in ints (both ends
    included). ``mirrored``: that range is the magnitude and the sign is drawn apart (a divisor:
    either sign, never near zero). ``special``: every 7th element, from the first, is exactly zero,
    and every 7th from the fourth a half-integer (-1.5, -0.5, 0.5, 1.5, in turn), where relu, abs,
    sign changes, rounding ties and equal operands are decided. ``step``: floats are rounded to
    multiples of it."""

    low: float
    high: float
    ints: tuple[int, int]
    mirrored: bool = False
    special: bool = False
    step: float | None = None


# The default: negatives, zero and positives, for every operator defined there.
SIGNED = Domain(-2.0, 2.0, (-3, 3), special=True)
# log, sqrt, rsqrt, a power's base: away from zero, where they stay well conditioned.
POSITIVE = Domain(0.125, 4.0, (1, 3))
# Divisors: either sign, bounded away from zero.
NONZERO = Domain(0.25, 2.0, (1, 3), mirrored=True)
# SIGNED on a grid of 2^-6 (every such value in -2..2 is a float16): products of two are multiples of
# 2^-12, so float32 holds every partial sum of up to 1023 of them (below 4096 in size) exactly. A
# reduction, matmul or convolution that accumulates float16 inputs in float32 then rounds only its
# result, as numpy's float64 rounded once does: the float16 tests can hold it to 1 ulp.
SIGNED_GRID = Domain(-2.0, 2.0, (-3, 3), special=True, step=2.0**-6)
HALVES = np.array([-1.5, -0.5, 0.5, 1.5])


def random_value(sinfo: TensorStructInfo, env, rng, domain: Domain = SIGNED):
    shape = tuple(arith.evaluate(d, env) for d in sinfo.shape)
    if sinfo.dtype == "bool":
        return rng.random(shape) > 0.5
    unsigned = sinfo.dtype.startswith("uint")  # no negatives to draw
    if sinfo.dtype.startswith(("int", "uint")):
        low, high = domain.ints
        value = np.array(rng.integers(max(low, 0) if unsigned else low, high + 1, shape))
    else:
        value = np.array(rng.uniform(domain.low, domain.high, shape))
    if domain.step and value.dtype.kind == "f":
        value = np.round(value / domain.step) * domain.step
    if domain.mirrored and not unsigned:
        value = value * rng.choice([-1, 1], shape)
    if domain.special:
        flat = value.reshape(-1)  # a view: value itself changes
        flat[::7] = 0
        if value.dtype.kind == "f":
            count = len(flat[3::7])
            flat[3::7] = HALVES[np.arange(count) % len(HALVES)]
    return value.astype(sinfo.dtype)


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


def check_op(runner, make, params, *, rtol=1e-5, atol=1e-5, ulps=None, sizes=SIZES, inputs=None, domains=SIGNED,
             seed=0, target=None):
    """Legalize ``make(*params)`` for ``target`` (llvmpipe's when None) as the runner's device kind
    states it (``target_for``), run it on the runner's device and compare every size with numpy.

    Inputs are ``inputs(env, rng)``, else drawn from ``domains`` (one ``Domain`` for every operand,
    or a list of one per operand). float16 results compare within ``ulps`` units in the last place
    of the reference (numpy on the same float16 inputs in float64, rounded to float16 once) plus
    ``atol``, where ``ulps`` is given; other results within ``rtol`` and ``atol``."""
    target = target if target is not None and target.kind == runner.target.kind else target_for(runner, target)
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
        if inputs:
            args = inputs(env, rng)
        else:
            per_operand = domains if isinstance(domains, (list, tuple)) else [domains] * len(params)
            args = [random_value(p, env, rng, d) for p, d in zip(params, per_operand, strict=True)]
        want = interpret(mod, "main", *args)
        got = interpret(lowered, "main", *args, kernel_runner=runner)
        for g, w in zip(_flat(got), _flat(want)):
            if isinstance(w, ShapeValue):
                assert g == w
                continue
            assert g.dtype == w.dtype and g.shape == w.shape, (env, g.dtype, w.dtype, g.shape, w.shape)
            if w.dtype.kind == "f":
                # assert_allclose counts NaN equal to NaN: a reference NaN from inputs without one
                # means the draw left the operator's domain, and any kernel giving NaN would pass.
                assert not np.isnan(w).any() or any(_has_nan(a) for a in args), \
                    f"sizes {env}: the reference has NaN; draw inputs in the operator's domain"
                if ulps is not None and w.dtype == np.float16:
                    assert_within_ulps(g, w, ulps, atol, f"sizes {env}")
                else:
                    np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                               err_msg=f"sizes {env}")
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"sizes {env}")
    return lowered, kernels


def assert_within_ulps(got: np.ndarray, want: np.ndarray, ulps: float, atol: float = 0.0, where: str = ""):
    """|got - want| <= ulps * (want's spacing in float16) + atol, elementwise; equal infinities and
    NaNs pass. A kernel that computes in float32 and rounds its float16 result once is within 1 ulp
    of a reference that rounds the exact value once: the two round values that differ by far less
    than an ulp, so they land on the same or neighbouring float16 values."""
    got64, want64 = got.astype(np.float64).reshape(-1), want.astype(np.float64).reshape(-1)
    with np.errstate(invalid="ignore"):  # infinities: their spacing and difference are NaN
        same = (got64 == want64) | (np.isnan(got64) & np.isnan(want64))
        spacing = np.spacing(np.abs(want.reshape(-1)).astype(np.float16)).astype(np.float64)
        error = np.abs(got64 - want64)
        bad = np.flatnonzero(~same & ~(error <= ulps * spacing + atol))
        worst = np.nan_to_num(error[bad] / spacing[bad], nan=np.inf).max(initial=0.0)
    if len(bad):
        first = bad[0]
        raise AssertionError(
            f"{where}: {len(bad)} of {got.size} float16 elements beyond {ulps} ulp + {atol:g}; worst "
            f"{worst:.2f} ulp; first at flat index {first}: got "
            f"{got64[first]!r}, want {want64[first]!r}")


def _has_nan(value) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind == "f" and bool(np.isnan(value).any())


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
            _record_shader(kernel, TARGET)
    try:
        browser = legalize_ops(mod, BROWSER_TARGET)
    except LegalizeError:  # e.g. float16 where SwiftShader has no shader-f16
        return
    for kernel in browser.functions.values():
        if not isinstance(kernel, Function):
            _record_shader(kernel, BROWSER_TARGET)


def _record_shader(kernel, target) -> None:
    from tessera.codegen import get_backend

    compiled = get_backend("wgsl").compile([kernel], target)
    record = compiled.kernels[0]
    source = compiled.modules[record.module].decode()
    SHADERS.setdefault(source, {"name": kernel.name, "entry_point": record.entry_point, "source": source,
                                "needs_f16": "enable f16;" in source, "workgroup_size": list(record.workgroup_size)})
