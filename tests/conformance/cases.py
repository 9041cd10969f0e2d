"""The conformance cases: graph modules, the calls every runtime makes on them, and tolerances.

``CASES[name]()`` builds a case on demand (a ``Case``): its module (weights bound as constants,
symbolic sizes bounded in the functions' attributes, so that every runtime plans memory ahead),
the calls in order, and the float tolerance of its outputs. Calls of one case run on one VM, so
functions with state parameters (``attrs["state_params"]``: a KV cache) see what the calls before
them wrote. Expected outputs are not written here: ``generate.py`` runs the reference interpreter
on the unlowered module, and where a case gives one, checks it against an independent numpy
statement (``numpy``).

Sizes are ragged: 1, 7 and 1000 along the swept axis (never a multiple of a workgroup or tile),
the largest at the bound the memory was planned for, a small call after it. Everything stays
small enough for SwiftShader (Chromium's CPU WebGPU adapter, about 0.3 GFLOP/s).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gguf
import numpy as np
from tessera import arith, nn, op
from tessera.ir import BlockBuilder, Constant, IRModule, PrimStructInfo, PrimValue, Tensor, Var
from tessera.models import LlamaForCausalLM, export_llm
from tessera.script import from_source
from tiny_llama import VARIANTS, tiny_config

from conformance import programs

F32, I32 = "float32", "int32"
SIZES = (7, 1000, 1)
BOUND = max(SIZES)


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple  # numpy arrays for tensor parameters, Python ints for prim (int64) parameters, tuples
    # A call that must fail: every runtime's error message contains each of these fragments.
    error: tuple[str, ...] = ()


@dataclass(frozen=True)
class Case:
    family: str
    description: str
    module: IRModule
    calls: tuple[Call, ...]
    rtol: float = 1e-4
    atol: float = 1e-4
    # (rtol, atol) for a target whose language promises less than exact float math, by target name.
    target_tolerance: dict[str, tuple[float, float]] = field(default_factory=dict)
    # An independent statement of the expected outputs: (call) -> list of arrays, checked against
    # the interpreter when the case is generated.
    numpy: Callable[[Call], list] | None = None
    # Host functions the program calls that a runtime's user registers (programs.TEST_LIBRARIES).
    libraries: tuple[str, ...] = ()


CASES: dict[str, Callable[[], Case]] = {}


def case(name: str):
    def register(build: Callable[[], Case]) -> Callable[[], Case]:
        CASES[name] = build
        return build

    return register


def one_function(make, params: list, bounds: dict[str, int], name: str = "main", module: IRModule | None = None,
                 attrs: dict | None = None) -> IRModule:
    """A function ``name(x0, x1, ...)`` returning ``make(*params)``; every size variable bounded."""
    vars_ = [Var(f"x{i}", p) if not isinstance(p, Var) else p for i, p in enumerate(params)]
    bb = BlockBuilder(module)
    attrs = {"tir_var_upper_bound": dict(bounds), "tir_var_lower_bound": dict.fromkeys(bounds, 1), **(attrs or {})}
    with bb.function(name, vars_, attrs=attrs):
        with bb.dataflow():
            out = make(*vars_)
            out = tuple(bb.emit_output(o, f"out{i}") for i, o in enumerate(out)) if isinstance(out, tuple) \
                else bb.emit_output(out, "out")
        bb.emit_func_output(out)
    return bb.get()


def f32(value) -> Constant:
    return Constant(np.asarray(value, np.float32))


def sweep(make_args: Callable[[int], tuple], function: str = "main") -> tuple[Call, ...]:
    return tuple(Call(function, make_args(n)) for n in SIZES)


# -- operator families ---------------------------------------------------------------------------


@case("elementwise-broadcast")
def _elementwise_broadcast() -> Case:
    """Arithmetic, comparison and select over (n, 37) with a row (37,) and a column (n, 1) broadcast."""
    rng = np.random.default_rng(1)

    def make(a, b, c):
        s = op.add(op.multiply(a, b), c)
        d = op.divide(op.subtract(a, c), op.add(op.abs(b), f32(1.0)))
        return op.where(op.greater(a, c), op.maximum(s, d), op.exp(op.negative(op.square(d))))

    def reference(call):
        a, b, c = call.args
        s, d = a * b + c, (a - c) / (np.abs(b) + 1)
        return [np.where(a > c, np.maximum(s, d), np.exp(-np.square(d)))]

    b = rng.standard_normal(37).astype(np.float32)
    calls = sweep(lambda n: (rng.standard_normal((n, 37)).astype(np.float32), b,
                             rng.standard_normal((n, 1)).astype(np.float32)))
    module = one_function(make, [Tensor(("n", 37), F32), Tensor((37,), F32), Tensor(("n", 1), F32)], {"n": BOUND})
    return Case("elementwise/broadcast", _elementwise_broadcast.__doc__, module, calls, 1e-5, 1e-5, numpy=reference)


@case("activations")
def _activations() -> Case:
    """Unary math: gelu, silu, tanh, sigmoid, log, rsqrt, power, floor and round, one output each."""
    rng = np.random.default_rng(2)

    def make(x):
        magnitude = op.add(op.abs(x), f32(0.5))
        return (op.nn.gelu(x), op.nn.silu(x), op.tanh(x), op.sigmoid(x), op.log(magnitude), op.rsqrt(magnitude),
                op.power(magnitude, f32(1.5)), op.floor(op.multiply(x, f32(3.0))),
                op.round(op.multiply(x, f32(3.0))))

    calls = sweep(lambda n: ((rng.standard_normal((n, 37)) * 2).astype(np.float32),))
    module = one_function(make, [Tensor(("n", 37), F32)], {"n": BOUND})
    return Case("elementwise/unary", _activations.__doc__, module, calls, 1e-5, 1e-5)


# WGSL promises sin and cos to an absolute error of 2^-11 inside [-pi, pi] and nothing outside;
# SwiftShader's are off by up to 1.9e-4 where llvmpipe's and C's are exact to a few ulp.
WGSL_TRIG_ERROR = 2.0 ** -11


@case("trigonometry")
def _trigonometry() -> Case:
    """sin and cos over [-pi, pi], where WGSL states their accuracy (2^-11 absolute), and exp."""
    rng = np.random.default_rng(16)

    def reference(call):
        (x,) = call.args
        return [np.sin(x.astype(np.float64)), np.cos(x.astype(np.float64)), np.exp(x.astype(np.float64))]

    calls = sweep(lambda n: (rng.uniform(-np.pi, np.pi, (n, 37)).astype(np.float32),))
    module = one_function(lambda x: (op.sin(x), op.cos(x), op.exp(x)), [Tensor(("n", 37), F32)], {"n": BOUND})
    return Case("elementwise/unary", _trigonometry.__doc__, module, calls, 1e-5, 1e-5, {"webgpu": (1e-5, WGSL_TRIG_ERROR)},
                reference)


@case("reductions")
def _reductions() -> Case:
    """Row sum, max and min, the mean of everything, and argmax/argmin (int64, cast to int32)."""
    rng = np.random.default_rng(3)

    def make(x):
        return (op.sum(x, axis=[1]), op.max(x, axis=[1]), op.min(x, axis=[1]), op.mean(x),
                op.astype(op.argmax(x, axis=1), dtype=I32), op.astype(op.argmin(x, axis=1), dtype=I32))

    def reference(call):
        (x,) = call.args
        return [x.sum(1), x.max(1), x.min(1), x.mean(dtype=np.float64), x.argmax(1), x.argmin(1)]

    calls = sweep(lambda n: (rng.uniform(0.5, 1.5, (n, 300)).astype(np.float32),))
    module = one_function(make, [Tensor(("n", 300), F32)], {"n": BOUND})
    return Case("reduction", _reductions.__doc__, module, calls, 1e-4, 1e-4, numpy=reference)


@case("norms")
def _norms() -> Case:
    """softmax and log_softmax over rows of 300, rms_norm over 64, layer_norm over 40 (weights as constants)."""
    rng = np.random.default_rng(4)
    w = (1 + 0.1 * rng.standard_normal(64)).astype(np.float32)
    gamma, beta = (1 + 0.1 * rng.standard_normal(40)).astype(np.float32), rng.standard_normal(40).astype(np.float32)

    def make(x, y, z):
        return (op.nn.softmax(x), op.nn.log_softmax(x), op.nn.rms_norm(y, Constant(w), axes=[-1]),
                op.nn.layer_norm(z, Constant(gamma), Constant(beta), axes=[-1]))

    def reference(call):
        x, y, z = (a.astype(np.float64) for a in call.args)
        e = np.exp(x - x.max(-1, keepdims=True))
        rms = y / np.sqrt(np.mean(y * y, -1, keepdims=True) + 1e-5) * w
        centered = z - z.mean(-1, keepdims=True)
        layer = centered / np.sqrt(np.mean(centered ** 2, -1, keepdims=True) + 1e-5) * gamma + beta
        return [e / e.sum(-1, keepdims=True), np.log(e / e.sum(-1, keepdims=True)), rms, layer]

    calls = sweep(lambda n: tuple((rng.standard_normal((n, d)) * 3).astype(np.float32) for d in (300, 64, 40)))
    module = one_function(make, [Tensor(("n", 300), F32), Tensor(("n", 64), F32), Tensor(("n", 40), F32)],
                          {"n": BOUND})
    return Case("normalization", _norms.__doc__, module, calls, 1e-4, 1e-5, numpy=reference)


@case("gemv")
def _gemv() -> Case:
    """One row times a (96, n) matrix: the GEMV schedule, with n output columns."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 96)).astype(np.float32)
    calls = sweep(lambda n: (x, rng.standard_normal((96, n)).astype(np.float32)))
    module = one_function(op.matmul, [Tensor((1, 96), F32), Tensor((96, "n"), F32)], {"n": BOUND})
    return Case("matmul", _gemv.__doc__, module, calls, 1e-4, 1e-4, numpy=lambda call: [call.args[0] @ call.args[1]])


@case("gemm")
def _gemm() -> Case:
    """(n, 70) times a constant (70, 33) plus a bias: the GEMM schedule with an epilogue."""
    rng = np.random.default_rng(6)
    w, bias = rng.standard_normal((70, 33)).astype(np.float32), rng.standard_normal(33).astype(np.float32)
    calls = sweep(lambda n: (rng.standard_normal((n, 70)).astype(np.float32),))
    module = one_function(lambda x: op.add(op.matmul(x, Constant(w)), Constant(bias)), [Tensor(("n", 70), F32)],
                          {"n": BOUND})
    return Case("matmul", _gemm.__doc__, module, calls, 1e-4, 1e-4, numpy=lambda call: [call.args[0] @ w + bias])


@case("layout")
def _layout() -> Case:
    """transpose, concat then split in three, take rows of a constant table, a strided slice, a reshape."""
    rng = np.random.default_rng(7)
    table = rng.standard_normal((50, 8)).astype(np.float32)

    def make(x, y, ids):
        parts = op.split(op.concat((x, y), axis=1), indices_or_sections=[5, 20], axis=1)
        n = x.struct_info.shape[0]
        return (op.permute_dims(x), parts, op.take(Constant(table), ids, axis=0),
                op.strided_slice(x, axes=[1], begin=[3], end=[30], strides=[2]),
                op.add(op.reshape(x, [n * 37]), f32(1.0)))

    def reference(call):
        x, y, ids = call.args
        joined = np.concatenate([x, y], 1)
        return [x.T, joined[:, :5], joined[:, 5:20], joined[:, 20:], table[ids], x[:, 3:30:2], x.reshape(-1) + 1]

    calls = sweep(lambda n: (rng.standard_normal((n, 37)).astype(np.float32),
                             rng.standard_normal((n, 4)).astype(np.float32), rng.integers(0, 50, n).astype(np.int32)))
    module = one_function(make, [Tensor(("n", 37), F32), Tensor(("n", 4), F32), Tensor(("n",), I32)], {"n": BOUND})
    return Case("layout", _layout.__doc__, module, calls, 0.0, 0.0, numpy=reference)


@case("int64-bool-io")
def _int64_bool_io() -> Case:
    """int64 and bool tensors as arguments and results (two i32 words, one u32 word per element)."""
    rng = np.random.default_rng(8)

    def make(x, flags, a):
        n = x.struct_info.shape[0]
        counted = op.add(op.multiply(x, Constant(np.int64(3))), op.arange(start=0, end=n, step=1, dtype="int64"))
        return (counted, op.logical_or(flags, op.greater(a, f32(0.0))), op.where(flags, a, op.negative(a)),
                op.astype(x, dtype=F32))

    def reference(call):
        x, flags, a = call.args
        return [x * 3 + np.arange(len(x)), flags | (a > 0), np.where(flags, a, -a), x.astype(np.float32)]

    # int64 values must fit in 32 bits (docs/kernels.md); negatives check the high word's sign.
    calls = sweep(lambda n: (rng.integers(-(1 << 28), 1 << 28, n).astype(np.int64), rng.random(n) > 0.5,
                             rng.standard_normal(n).astype(np.float32)))
    module = one_function(make, [Tensor(("n",), "int64"), Tensor(("n",), "bool"), Tensor(("n",), F32)],
                          {"n": BOUND})
    return Case("int64/bool", _int64_bool_io.__doc__, module, calls, 0.0, 0.0, numpy=reference)


@case("int64-bool-inside")
def _int64_bool_inside() -> Case:
    """int64 and bool tensors between kernels only: argmax (int64), comparisons (bool), a select."""
    rng = np.random.default_rng(9)

    def make(x):
        first, last = op.argmax(x, axis=1), op.argmin(x, axis=1)
        later = op.logical_and(op.greater(first, last), op.not_equal(first, last))
        offset = op.astype(op.subtract(first, last), dtype=I32)
        return op.where(later, offset, op.negative(offset)), op.astype(later, dtype=F32)

    calls = sweep(lambda n: (rng.standard_normal((n, 30)).astype(np.float32),))
    module = one_function(make, [Tensor(("n", 30), F32)], {"n": BOUND})
    return Case("int64/bool", _int64_bool_inside.__doc__, module, calls, 0.0, 0.0)


GGML = {"q4_0": gguf.GGMLQuantizationType.Q4_0, "q4_1": gguf.GGMLQuantizationType.Q4_1,
        "q8_0": gguf.GGMLQuantizationType.Q8_0}


def quantize(fmt: str, rows: int, k: int, rng, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Random weights quantized by ggml's own quantizer: (uint32 words, ggml's dequantized floats)."""
    w = (rng.standard_normal((rows, k)) * scale).astype(np.float32)
    blocks = gguf.quants.quantize(w, GGML[fmt])
    return np.ascontiguousarray(blocks).view("<u4"), gguf.quants.dequantize(blocks, GGML[fmt])


def _quantized(fmt: str) -> Case:
    rng = np.random.default_rng(10)
    weight, weight_floats = quantize(fmt, 42, 128, rng)  # 42 rows: not a multiple of the 4-column tile
    table, table_floats = quantize(fmt, 50, 64, rng)

    def make(x, ids):
        return (op.quantized_matmul(x, Constant(weight), format=fmt, k=128),
                op.quantized_take(Constant(table), ids, format=fmt, k=64))

    def reference(call):
        x, ids = call.args
        return [x @ weight_floats.T, table_floats[ids]]  # against ggml's own dequantization

    calls = sweep(lambda n: (rng.standard_normal((n, 128)).astype(np.float32), rng.integers(0, 50, n).astype(np.int32)))
    module = one_function(make, [Tensor(("n", 128), F32), Tensor(("n",), I32)], {"n": BOUND})
    description = (f"quantized_matmul (GEMV at n = 1, GEMM otherwise) and quantized_take over {fmt} blocks "
                   "that kernels read as they are")
    return Case("quantized", description, module, calls, 1e-4, 1e-4, numpy=reference)


case("quantized-q4_1")(lambda: _quantized("q4_1"))
case("quantized-q8_0")(lambda: _quantized("q8_0"))


def round_to_q8(x: np.ndarray) -> np.ndarray:
    """x rounded as activations="q8" reads it (blocks of 32: d = max|x| / 127, q = round-half-even
    of x * (1 / d), x = q * d, each step one f32 operation), written out independently of tessera."""
    blocks = x.astype(np.float32).reshape(*x.shape[:-1], -1, 32)
    d = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127)
    inverse = np.where(d > 0, np.float32(1) / np.where(d > 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    return (np.rint(blocks * inverse) * d).astype(np.float32).reshape(x.shape)


@case("quantized-q8-activations")
def _quantized_q8_activations() -> Case:
    """Decode GEMVs with activations="q8" (x rounded to 8-bit blocks first) over Q4_0, Q4_1 and Q8_0
    weights: the cpu target's integer SIMD micro-kernels, every other target's generic reduction.
    x holds multiples of 1/64 with 127/64 in every block, so each rounding is exact on any device."""
    rng = np.random.default_rng(13)
    weights = {fmt: quantize(fmt, 70, 192, rng) for fmt in ("q4_0", "q4_1", "q8_0")}

    def make(x):
        return tuple(op.quantized_matmul(x, Constant(words), format=fmt, k=192, activations="q8")
                     for fmt, (words, _) in weights.items())

    def reference(call):
        (x,) = call.args
        return [round_to_q8(x) @ floats.T for _, floats in weights.values()]

    def x_row():
        # A scale d of exactly 1/64 per block: x / d is an integer, so no device's division or
        # reciprocal can round it differently; the GEMV's sums still test the rest.
        x = rng.integers(-127, 128, (1, 192)).astype(np.float32) / 64
        x[0, ::32] = 127 / 64
        return (x,)

    calls = tuple(Call("main", x_row()) for _ in range(3))
    module = one_function(make, [Tensor((1, 192), F32)], {})
    return Case("quantized", _quantized_q8_activations.__doc__, module, calls, 1e-4, 1e-4, numpy=reference)


@case("kv-cache")
def _kv_cache() -> Case:
    """kv_cache_write into a state tensor that persists across calls: appends of 7, 1 and 25 rows,
    each call returning the rows written so far."""
    rng = np.random.default_rng(11)
    capacity, heads, dim = 40, 2, 8
    total = arith.Var("total")
    rows = Var("rows", Tensor(("n", heads, dim), F32))
    count = Var("total", PrimStructInfo("int64", total))
    cache = Var("cache", Tensor((capacity, heads, dim), F32))

    def make(rows, count, cache):
        n = rows.struct_info.shape[0]
        written = op.kv_cache_write(cache, rows, PrimValue(total - n))
        return op.strided_slice(written, axes=[0], begin=[0], end=[total])

    module = one_function(make, [rows, count, cache], {"n": 32, "total": capacity}, name="append",
                          attrs={"state_params": ["cache"]})
    calls, written = [], 0
    for n in (7, 1, 25):
        written += n
        calls.append(Call("append", (rng.standard_normal((n, heads, dim)).astype(np.float32), written)))
    return Case("kv_cache", _kv_cache.__doc__, module, tuple(calls), 0.0, 0.0)


@case("sample-token")
def _sample_token() -> Case:
    """The on-device sampler over a vocabulary of 1000: greedy, and temperature/top-k/top-p/repetition
    penalty draws at a given uniform, with histories of 1, 7 and 1000 ids."""
    rng = np.random.default_rng(12)
    vocab = 1000
    params = [Tensor((1, vocab), F32), Tensor(("m",), I32), Tensor((5,), F32)]
    module = one_function(lambda x, h, p: op.sample_token(x, h, p, greedy=True), params, {"m": BOUND},
                          name="sample_greedy")
    module = one_function(lambda x, h, p: op.sample_token(x, h, p), params, {"m": BOUND}, name="sample", module=module)
    settings = [(0.8, 40, 0.9, 1.2), (1.0, 0, 1.0, 1.0), (0.5, 5, 0.5, 1.1), (1.3, 200, 0.95, 1.0)]
    calls = []
    for index, (temperature, top_k, top_p, penalty) in enumerate(settings):
        m = SIZES[index % len(SIZES)]
        logits = (rng.standard_normal((1, vocab)) * 3).astype(np.float32)
        history = rng.integers(0, vocab, m).astype(np.int32)
        knobs = np.array([temperature, top_k, top_p, penalty, _robust_uniform(logits, history, (temperature, top_k,
                         top_p, penalty), rng)], np.float32)
        calls += [Call("sample", (logits, history, knobs)), Call("sample_greedy", (logits, history, knobs))]
    return Case("sample_token", _sample_token.__doc__, module, tuple(calls), 0.0, 0.0)


def _robust_uniform(logits, history, knobs, rng) -> float:
    """A uniform draw whose token does not change when it moves by 1e-3: far enough from a boundary
    of the running sum that float summation order on a device cannot pick the neighbour."""
    from tessera.op.sampling import reference

    while True:
        u = float(np.float32(rng.uniform(0.01, 0.99)))
        picks = {int(reference(logits, history, np.array([*knobs, v], np.float32))[0]) for v in (u - 1e-3, u, u + 1e-3)}
        if len(picks) == 1:
            return u


@case("conv-pool")
def _conv_pool() -> Case:
    """conv2d (stride 2, padding 1) over an image of n x 9 pixels, relu, then 3x3 max pooling."""
    rng = np.random.default_rng(13)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)

    def make(x):
        conv = op.nn.relu(op.nn.conv2d(x, Constant(w), strides=2, padding=1))
        return op.nn.max_pool2d(conv, pool_size=3, strides=2, padding=1)

    calls = sweep(lambda n: (rng.standard_normal((1, 3, n, 9)).astype(np.float32),))
    module = one_function(make, [Tensor((1, 3, "n", 9), F32)], {"n": BOUND})
    return Case("convolution", _conv_pool.__doc__, module, calls, 1e-4, 1e-5)


# -- the tiny random-weight Llama of each variant ------------------------------------------------

CONTEXT = 32
# RoPE's cos and sin tables are computed on the device, so on WebGPU the logits may drift as far as
# WGSL's trigonometry allows: SwiftShader's error (1.9e-4) moves these logits by up to 5e-3 (the
# interpreter with sin and cos perturbed that much agrees); 2e-2 leaves room for the 2^-11 the
# language promises. Logits spread over about +-8 (tied heads) or +-1, so a wrong kernel still shows.
LLAMA_WEBGPU_TOLERANCE = {"webgpu": (1e-3, 2e-2)}


def _llama(config, weights: dict[str, np.ndarray], formats=None) -> IRModule:
    return nn.bind_weights(export_llm(LlamaForCausalLM(config, formats), CONTEXT), weights)


def _llama_calls(rng, vocab: int) -> tuple[Call, ...]:
    """prefill 7 tokens, decode 2, prefill 5 more on top of the cache (a second turn), decode 1, then
    sample greedily from a row of logits. The tokens are given (teacher forcing), so no runtime's
    choice feeds a later call."""
    ids = lambda n: rng.integers(0, vocab, n).astype(np.int32)  # noqa: E731
    logits = (rng.standard_normal((1, vocab)) * 3).astype(np.float32)
    return (Call("prefill", (ids(7), 7)), Call("decode", (ids(1), 8)), Call("decode", (ids(1), 9)),
            Call("prefill", (ids(5), 14)), Call("decode", (ids(1), 15)),
            Call("sample_greedy", (logits, ids(15), np.array([0.0, 0, 1.0, 1.1, 0.5], np.float32))))


def random_llama_weights(model: LlamaForCausalLM, rng) -> dict[str, np.ndarray]:
    """Weights drawn at a scale that keeps activations near 1 (norm weights near 1, biases small)."""
    weights = {}
    for path, p in model.named_parameters():
        if path.endswith("norm.weight"):
            weights[path] = (1 + 0.1 * rng.standard_normal(p.shape)).astype(np.float32)
        elif path.endswith("bias"):
            weights[path] = (0.1 * rng.standard_normal(p.shape)).astype(np.float32)
        else:
            weights[path] = (rng.standard_normal(p.shape) * p.shape[-1] ** -0.5).astype(np.float32)
    return weights


def _llama_variant(name: str) -> Case:
    config = tiny_config(name)
    rng = np.random.default_rng(14)
    heads, kv_heads, bias, tied = VARIANTS[name]
    description = (f"tiny random-weight Llama, {heads} heads over {kv_heads} KV heads" + (", QKV bias" if bias else "")
                   + (", tied embeddings" if tied else "") + f": prefill and decode sharing a {CONTEXT}-position "
                   "KV cache (state), then the greedy sampler")
    weights = random_llama_weights(LlamaForCausalLM(config), rng)
    weights["model.embed_tokens.weight"] *= 8  # embeddings at the scale of a trained model's
    return Case("llama", description, _llama(config, weights), _llama_calls(rng, config.vocab_size), 1e-3, 1e-3,
                LLAMA_WEBGPU_TOLERANCE)


for _name in VARIANTS:
    case(f"llama-{_name}")(lambda name=_name: _llama_variant(name))


@case("llama-q4_1")
def _llama_quantized() -> Case:
    """The gqa-2x Llama as the demo model is stored: Q4_1 layers and a Q8_0 embedding tied to the
    head, read by the quantized kernels as they are."""
    config = tiny_config("gqa-2x")
    config = type(config)(**{**config.__dict__, "tie_word_embeddings": True})
    rng = np.random.default_rng(15)
    formats, weights = {}, {}
    for path, p in LlamaForCausalLM(config).named_parameters():
        module = path.rsplit(".", 1)[0]
        if path.endswith("norm.weight"):
            weights[path] = (1 + 0.1 * rng.standard_normal(p.shape)).astype(np.float32)
            continue
        fmt = "q8_0" if module == "model.embed_tokens" else "q4_1"
        formats[module] = fmt
        weights[path] = quantize(fmt, p.shape[0], p.shape[1], rng, 1.0 if fmt == "q8_0" else p.shape[1] ** -0.5)[0]
    return Case("llama", _llama_quantized.__doc__, _llama(config, weights, formats), _llama_calls(rng, config.vocab_size),
                1e-3, 1e-3, LLAMA_WEBGPU_TOLERANCE)


# -- whole programs: branches, calls, recursion, libraries, data-dependent and coarse shapes ------


def _no_inline(mod: IRModule, name: str) -> IRModule:
    """Keep calls of ``name`` as calls: the default pipeline inlines small functions."""
    return mod.with_function(name, mod[name].with_attr("inline", False))


def _modules():
    import modules  # tests/modules.py: the catalogue the IR tests keep

    return modules


@case("program-branch")
def _program_branch() -> Case:
    rng = np.random.default_rng(30)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    w1, w2 = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
    mod = _modules().mlp_with_branch()
    mod = mod.with_function("mlp", mod["mlp"].with_attr("tir_var_upper_bound", {"batch": 16}))
    return Case("program", "an If whose arms allocate (softmax of a scaled copy, or a negation): each arm is "
                "planned, the other reuses what it frees; both arms are taken",
                mod, (Call("mlp", (x, w1, w2)), Call("mlp", (x, w1, -w2)), Call("mlp", (x[:1], w1, w2))))


@case("program-calls")
def _program_calls() -> Case:
    rng = np.random.default_rng(31)
    mod = _modules().calls_between_functions()
    return Case("program", "main calls helper, a function of the module with its own frame and shape heap "
                "(marked not to be inlined, so that the call stays a call)", _no_inline(mod, "helper"),
                (Call("main", (rng.standard_normal((5, 4)).astype(np.float32),)),
                 Call("main", (rng.standard_normal((1, 4)).astype(np.float32),))))


@case("program-recursion")
def _program_recursion() -> Case:
    x = np.array([1.5, -2.0, 0.5, 1.25], np.float32)
    return Case("program", "power by repeated squaring: a function that calls itself, with nested branches",
                from_source(programs.POWER),
                tuple(Call("power", (x, np.array(n, np.int32))) for n in (0, 1, 6, 11)), 1e-5, 1e-5,
                numpy=lambda call: [call.args[0].astype(np.float64) ** int(call.args[1])])


@case("program-library")
def _program_library() -> Case:
    rng = np.random.default_rng(32)
    return Case("program", "R.call_dps_library into a function the user registers (tessera.test.double)",
                _modules().cross_level_calls(),
                (Call("dps", (rng.standard_normal((6, 4)).astype(np.float32),)),), libraries=("tessera.test.double",),
                numpy=lambda call: [(call.args[0] * 2).reshape(12, 2), 6, 4])  # the shape: one int per dim


@case("program-tuple-params")
def _program_tuple_params() -> Case:
    rng = np.random.default_rng(33)
    a, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    return Case("program", "a tuple parameter taken apart inside the function, whose result is an unbound call",
                _modules().tuple_params(), (Call("pick", ((a, b),)),),
                numpy=lambda call: [call.args[0][0][:, None] + call.args[0][1]])


@case("program-unique")
def _program_unique() -> Case:
    x = np.array([[0.5, 1.0, 0.5, 2.0], [1.0, 1.0, 3.0, 0.5], [2.0, 2.0, 2.0, 2.0]], np.float32)
    return Case("program", "the Relax paper's Figure 3: unique (a data-dependent size), then match_cast names it",
                from_source(_modules().FIGURE_3), (Call("main", (x,)), Call("main", (x[:1],))),
                numpy=lambda call: [np.exp(np.unique(np.exp(call.args[0].astype(np.float64))))])


@case("program-nonzero-gather")
def _program_nonzero_gather() -> Case:
    x = np.array([1.5, -2.0, 0.5, 3.0, -1.0, 2.0, 0.0], np.float32)
    return Case("program", "nonzero, match_cast of its count, then a gather by the indices",
                from_source(programs.NONZERO_GATHER), (Call("main", (x,)), Call("main", (-x,))),
                numpy=lambda call: [call.args[0][call.args[0] > 0] * 2])


@case("program-masked-select")
def _program_masked_select() -> Case:
    x = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    mask = (np.arange(12).reshape(4, 3) % 3) == 1
    return Case("program", "boolean-mask select: a data-dependent size, then a kernel on the selected values",
                from_source(programs.MASKED_SELECT), (Call("main", (x, mask)),),
                numpy=lambda call: [call.args[0][call.args[1]] + 1])


@case("program-coarse")
def _program_coarse() -> Case:
    rng = np.random.default_rng(34)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    return Case("program", "coarse parameters (R.Tensor(ndim=2)) named by match_cast; an inner call's parameter "
                "check catches a wrong shape and names both shapes",
                from_source(programs.COARSE),
                (Call("main", (x,)), Call("rows_of_four", (x[:, :4].copy(),)),
                 Call("rows_of_four", (x,), error=programs.HELPER_SHAPE_ERROR)),
                numpy=lambda call: [np.exp(call.args[0].astype(np.float64))] if call.function == "main"
                else [call.args[0] * 2])


@case("program-reshape-unproven")
def _program_reshape_unproven() -> Case:
    x = np.linspace(-1, 1, 30, dtype=np.float32).reshape(3, 10)
    y = np.random.default_rng(39).standard_normal((5, 6)).astype(np.float32)
    return Case("program", "reshapes whose element count only a call tells (to another tensor's shape, to sizes the "
                "caller passes): a call whose sizes hold fewer or more elements than x is refused, naming the reshape",
                from_source(programs.RESHAPE_UNPROVEN),
                (Call("like", (x, y)), Call("to_sizes", (x, 2, 15)),
                 Call("like", (x, y[:4]), error=programs.reshape_error(24)),
                 Call("to_sizes", (x, 6, 6), error=programs.reshape_error(36)),
                 Call("to_sizes", (x, 30, 1))),
                numpy=lambda call: [call.args[0].reshape(call.args[1].shape) + call.args[1]] if call.function == "like"
                else [call.args[0].reshape(call.args[1], call.args[2])])


@case("program-function-value")
def _program_function_value() -> Case:
    from tessera.ir import Call as CallExpr
    from tessera.ir import GlobalVar

    bb = BlockBuilder(from_source(_modules().FIGURE_4))
    x, y = Var("x", Tensor(("n", 4), F32)), Var("y", Tensor(("n", 2, 2), F32))
    with bb.function("through_a_value", [x, y]):
        f0 = bb.emit(GlobalVar("subfn"), "f0")  # the Relax paper's Figure 4: a function bound to a variable
        bb.emit_func_output(bb.emit(CallExpr(f0, (y,)), "lv2"))
    rng = np.random.default_rng(35)
    x, y = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 2, 2)).astype(np.float32)
    return Case("program", "the Relax paper's Figure 4: main calls subfn; through_a_value calls it through a "
                "variable holding the function", bb.get(),
                (Call("main", (x, y)), Call("through_a_value", (x, y))),
                numpy=lambda call: [np.exp(call.args[0]).reshape(-1) + call.args[1].reshape(-1)]
                if call.function == "main" else [call.args[1].reshape(-1)])


@case("program-arange-dynamic")
def _program_arange_dynamic() -> Case:
    return Case("program", "arange whose end is a sum the program computes: a size read at run time",
                from_source(programs.ARANGE_DYNAMIC),
                (Call("main", (np.array([3, 4, 2], np.int32),)), Call("main", (np.array([1, 0, 0], np.int32),)),
                 Call("main", (np.array([0], np.int32),))),
                1e-6, 1e-6, numpy=lambda call: [np.sqrt(np.arange(1, call.args[0].sum(), 2))])


@case("cnn-mobilenet")
def _cnn_mobilenet() -> Case:
    """A model beyond LLMs: the MobileNet-style CNN of tessera.models.mobilenet (convolutions, depthwise
    convolutions, pooling, batch norm folded, a residual, a dense head) on random weights."""
    from tessera.models.mobilenet import MobileNetConfig, export_mobilenet, random_checkpoint

    config = MobileNetConfig()
    mod, weights = export_mobilenet(config, random_checkpoint(config, seed=36))
    rng = np.random.default_rng(36)
    image = rng.standard_normal((1, config.in_channels, config.image_size, config.image_size)).astype(np.float32)
    return Case("cnn", _cnn_mobilenet.__doc__, nn.bind_weights(mod, weights), (Call("main", (image,)),))


@case("program-closure")
def _program_closure() -> Case:
    rng = np.random.default_rng(37)
    x, w = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    return Case("program", "nested functions: one captures a tensor and a size (lambda-lifted into a function "
                "with extra parameters), one is passed as a value to a function that calls it",
                _no_inline(_modules().closures(), "apply"), (Call("main", (x, w)), Call("main", (x[:1], w))),
                numpy=lambda call: [(call.args[0] * call.args[1] * 2).reshape(-1)])


# -- builds split across two devices (format version 4) ------------------------------------------

# Cases for the split targets of generate.py ("vulkan+cpu", "opencl+cpu"): each builder takes the two
# presets (a GPU kind's, then the CPU's) and places part of its module on each, as `tessera compile
# --gpu-layers N` does (docs/vdevice.md). Their expected outputs come from the interpreter, as every
# case's; the unsplit module gives the same (tests/models/test_gpu_layers.py).
SPLIT_CASES: dict[str, Callable[[tuple[str, str]], Case]] = {}


def split_case(name: str):
    def register(build: Callable[[tuple[str, str]], Case]) -> Callable[[tuple[str, str]], Case]:
        SPLIT_CASES[name] = build
        return build

    return register


def _split_llama(variant: str, gpu_layers: int, devices: tuple[str, str]) -> Case:
    config = tiny_config(variant)
    rng = np.random.default_rng(16)
    heads, kv_heads, bias, tied = VARIANTS[variant]
    weights = random_llama_weights(LlamaForCausalLM(config), rng)
    weights["model.embed_tokens.weight"] *= 8
    module = nn.bind_weights(export_llm(LlamaForCausalLM(config), CONTEXT, gpu_layers=gpu_layers, devices=devices),
                             weights)
    description = (f"tiny random-weight Llama ({heads} heads over {kv_heads} KV heads" + (", tied embeddings" if tied
                   else "") + f") split after {gpu_layers} of its {config.num_layers} layers: the embedding and those "
                   f"layers on {devices[0]}, the rest, the head and the sampler on {devices[1]}; one to_device copy "
                   "of the hidden state per call")
    return Case("llama-split", description, module, _llama_calls(rng, config.vocab_size), 1e-3, 1e-3)


@split_case("llama-gqa-2x-split")
def _llama_gqa_split(devices: tuple[str, str]) -> Case:
    return _split_llama("gqa-2x", 1, devices)


@split_case("llama-mha-split")
def _llama_mha_split(devices: tuple[str, str]) -> Case:
    """The head tied to the embedding: that weight is read on both devices (constant_devices)."""
    return _split_llama("mha", 1, devices)
