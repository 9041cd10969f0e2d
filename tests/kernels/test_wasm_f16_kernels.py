"""float16 on the WASM target: f16 tensors are halves in memory (their bits in uint16_t, codegen/c),
computed as floats and rounded to half precision as a GPU's f16 arithmetic rounds, run in wasmtime
against numpy. The conversions are checked bit for bit over every half and every tie; the operators
within the kernel tests' float16 tolerances (harness.assert_within_ulps)."""

import numpy as np
import pytest
from harness import NONZERO, POSITIVE, SIGNED, SIGNED_GRID, Domain, build, check_op
from tessera import op
from tessera.codegen import get_backend
from tessera.ir import Function, Tensor, interpret
from tessera.op.elementwise import BINARY, UNARY
from tessera.target import SHADER_F16, Target
from tessera.transform import legalize_ops
from tessera.vm.devices.wasm import WasmDevice
from tessera.vm.wasm_runner import WasmKernelRunner

WASM = Target.preset("wasm")
F16 = "float16"
# Operands where the operator is defined and well conditioned (as test_elementwise_kernels.py draws them).
DOMAINS = {"log": [POSITIVE], "sqrt": [POSITIVE], "rsqrt": [POSITIVE], "power": [POSITIVE, SIGNED],
           "divide": [SIGNED, NONZERO], "floor_divide": [SIGNED, NONZERO], "acos": [Domain(-1.0, 1.0, (-1, 1))],
           "asin": [Domain(-1.0, 1.0, (-1, 1))]}
# Each computes an element in float32 and rounds it to float16 once: within 1 ulp of numpy's float64
# rounded once.
WITHIN_AN_ULP = {"ulps": 1, "atol": 0.0, "sizes": (7, 1000)}


@pytest.fixture(scope="module")
def wasm():
    return WasmKernelRunner()


def _run(wasm, make, params, *args):
    """``make(*params)`` compiled for WASM and run on ``args``: the kernels' result."""
    lowered = legalize_ops(build(make, params), WASM)
    return interpret(lowered, "main", *args, kernel_runner=wasm)


def _make(name):
    return op.nn.__getattr__(name[3:]) if name.startswith("nn.") else getattr(op, name)


def _every_half() -> np.ndarray:
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bits, NaN for NaN (its payload is the language's business)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bits = {2: np.uint16, 4: np.uint32}[want.dtype.itemsize]
    wrong = np.flatnonzero(got.view(bits)[~nan] != want.view(bits)[~nan])
    assert not len(wrong), f"{len(wrong)} values differ; first {want[~nan][wrong[0]]!r}: got {got[~nan][wrong[0]]!r}"


def test_float_to_half_rounds_to_nearest_even(wasm):
    """Every half, every midpoint between neighbouring halves (a tie: to the even one) and the floats
    just either side of each midpoint, subnormal halves, overflow to infinity from 65520 up, NaN."""
    halves = np.unique(_every_half()[np.isfinite(_every_half())].astype(np.float64))
    midpoints = ((halves[:-1] + halves[1:]) / 2).astype(np.float32)  # exact: 12 significant bits
    near = [np.nextafter(midpoints, np.float32(np.inf)), np.nextafter(midpoints, np.float32(-np.inf))]
    special = np.array([np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.996, 65520, -65520, 1e30, 2.0**-25,
                        -(2.0**-25), 2.0**-25 * 1.0000001, 2.0**-24 * 1.5, 2.0**-14 * (1 - 2.0**-11), 1e-45, -0.0],
                       np.float32)
    x = np.concatenate([halves.astype(np.float32), midpoints, *near, special])
    got = _run(wasm, lambda a: op.astype(a, dtype=F16), [Tensor((len(x),), "float32")], x)
    with np.errstate(over="ignore"):  # numpy warns of the values that round to infinity
        _same_bits(got, x.astype(np.float16))


def test_half_to_float_is_exact(wasm):
    """Every one of the 65,536 halves (subnormals, infinities, NaNs, -0) widens to its float."""
    x = _every_half()
    _same_bits(_run(wasm, lambda a: op.astype(a, dtype="float32"), [Tensor((len(x),), F16)], x), x.astype(np.float32))


@pytest.mark.parametrize("name", sorted(UNARY) + sorted(BINARY))
def test_elementwise_f16(wasm, name):
    arity = 1 if name in UNARY else 2
    params = [Tensor(("n",), F16)] if arity == 1 else [Tensor(("n", "m"), F16), Tensor((1, "m"), F16)]
    check_op(wasm, _make(name), params, target=WASM, domains=DOMAINS.get(name, [SIGNED] * arity), **WITHIN_AN_ULP)


# Reductions, row operators and matmuls accumulate float16 inputs in float32; on harness.SIGNED_GRID
# their sums are exact and one rounding leaves them within 1 ulp (as test_reduction_kernels.py says).
ROWS = {
    "sum_rows": (lambda x: op.sum(x, axis=[1]), [Tensor((3, "n"), F16)]),
    "mean_columns": (lambda x: op.mean(x, axis=[0], keepdims=True), [Tensor((5, "n"), F16)]),
    "max": (lambda x: op.max(x, axis=[1]), [Tensor(("n", 30), F16)]),
    "softmax": (op.nn.softmax, [Tensor(("n", 300), F16)]),
    "rms_norm": (op.nn.rms_norm, [Tensor(("n", 64), F16), Tensor((64,), F16)]),
    "gemv": (op.matmul, [Tensor((1, 96), F16), Tensor((96, "n"), F16)]),
    "gemm": (op.matmul, [Tensor(("n", 40), F16), Tensor((40, 33), F16)]),
}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_rows_and_matmuls_f16(wasm, name):
    make, params = ROWS[name]
    check_op(wasm, make, params, target=WASM, ulps=1, atol=0.0, domains=SIGNED_GRID, sizes=(7, 130))


def test_f16_kernels_name_the_feature_they_need():
    """A kernel that holds f16 records shader-f16, which the WASM device has (as the cpu kind's kernels
    do); one without f16 (the add of two float32 tensors) needs nothing."""
    lowered = legalize_ops(build(lambda a, b: op.add(op.astype(a, dtype="float32"), b),
                                 [Tensor((4,), F16), Tensor((4,), "float32")]), WASM)
    kernels = [f for f in lowered.functions.values() if not isinstance(f, Function)]
    compiled = get_backend("c-wasm").compile(kernels, WASM)
    assert [k.requirements["features"] for k in compiled.kernels] == [[SHADER_F16], []]
    assert WASM.supports_dtype(F16) and SHADER_F16 in WasmDevice().features
