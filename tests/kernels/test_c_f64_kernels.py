"""float64 on the C targets (wasm and cpu): f64 tensors are doubles in memory and in every operation,
the math functions libm's double ones (wasi-libc's on WebAssembly). Each kernel runs in wasmtime and
as this machine's code against numpy in float64, within 1e-12: a kernel that computed in float32
anywhere (a local, a constant, an intrinsic) would miss that by nine orders of magnitude. GPU targets
refuse float64 with a clear error (WGSL has none)."""

import numpy as np
import pytest
from harness import NONZERO, POSITIVE, SIGNED, Domain, build, check_op
from tessera import op
from tessera.ir import Constant, Tensor, assert_structural_equal
from tessera.op.elementwise import BINARY, UNARY
from tessera.op.lowering import LegalizeError
from tessera.script import from_source
from tessera.target import Target
from tessera.transform import legalize_ops
from tessera.vm.cpu_runner import CPUKernelRunner
from tessera.vm.wasm_runner import WasmKernelRunner

F64 = "float64"
TIGHT = {"rtol": 1e-12, "atol": 1e-12}
DOMAINS = {"log": [POSITIVE], "sqrt": [POSITIVE], "rsqrt": [POSITIVE], "power": [POSITIVE, SIGNED],
           "divide": [SIGNED, NONZERO], "floor_divide": [SIGNED, NONZERO], "acos": [Domain(-1.0, 1.0, (-1, 1))],
           "asin": [Domain(-1.0, 1.0, (-1, 1))]}
RUNNERS = {"wasm": WasmKernelRunner, "cpu": CPUKernelRunner}


@pytest.fixture(scope="module", params=sorted(RUNNERS))
def c_runner(request):
    return RUNNERS[request.param]()


def _make(name):
    return op.nn.__getattr__(name[3:]) if name.startswith("nn.") else getattr(op, name)


@pytest.mark.parametrize("name", sorted(UNARY) + sorted(BINARY))
def test_elementwise_f64(c_runner, name):
    arity = 1 if name in UNARY else 2
    params = [Tensor(("n",), F64)] if arity == 1 else [Tensor(("n", "m"), F64), Tensor((1, "m"), F64)]
    check_op(c_runner, _make(name), params, target=c_runner.target, domains=DOMAINS.get(name, [SIGNED] * arity),
             sizes=(7, 300), **TIGHT)


# Reductions, row operators, a matmul and a scan, each accumulating in double.
ROWS = {
    "sum": (lambda x: op.sum(x, axis=[1]), [Tensor((3, "n"), F64)]),
    "mean": (lambda x: op.mean(x, axis=[0], keepdims=True), [Tensor((5, "n"), F64)]),
    "max": (lambda x: op.max(x, axis=[1]), [Tensor(("n", 30), F64)]),
    "prod": (lambda x: op.prod(x, axis=[1]), [Tensor(("n", 6), F64)]),
    "softmax": (op.nn.softmax, [Tensor(("n", 300), F64)]),
    "log_softmax": (op.nn.log_softmax, [Tensor(("n", 40), F64)]),
    "layer_norm": (lambda x, g, b: op.nn.layer_norm(x, g, b, axes=[-1]),
                   [Tensor(("n", 64), F64), Tensor((64,), F64), Tensor((64,), F64)]),
    "gemm": (op.matmul, [Tensor(("n", 40), F64), Tensor((40, 33), F64)]),
    "argmax": (lambda x: op.argmax(x, axis=1), [Tensor((4, "n"), F64)]),
    "transpose_concat": (lambda x, y: op.concat([op.permute_dims(x, axes=[1, 0]), y], axis=0),
                         [Tensor((5, "n"), F64), Tensor((2, 5), F64)]),
    "where": (lambda x, y: op.where(op.greater(x, y), x, y), [Tensor(("n",), F64), Tensor(("n",), F64)]),
}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_rows_and_matmuls_f64(c_runner, name):
    make, params = ROWS[name]
    check_op(c_runner, make, params, target=c_runner.target, sizes=(7, 130), **TIGHT)


CASTS = [("float32", F64), (F64, "float32"), (F64, "int64"), ("int64", F64), (F64, "int32"), ("int32", F64),
         (F64, "bool"), ("bool", F64), (F64, "uint8")]


@pytest.mark.parametrize("source,dtype", CASTS)
def test_casts_f64(c_runner, source, dtype):
    """Casts to and from double: exact where numpy's are (float32 -> double, integers in range), and
    a double rounds to the nearest float32 once."""
    domain = Domain(-100.0, 100.0, (-1000, 1000), special=True) if dtype != "uint8" else Domain(0.0, 250.0, (0, 250))
    check_op(c_runner, lambda x: op.astype(x, dtype=dtype), [Tensor(("n",), source)], target=c_runner.target,
             domains=domain, sizes=(7, 300), rtol=0.0, atol=0.0)


def test_double_constants_keep_every_digit(c_runner):
    """A scalar operand that fuses into the kernel as a literal keeps its 53 bits (no f suffix)."""
    third = np.float64(1.0) / 3.0

    def make(x):
        return op.multiply(x, Constant(np.array(third)))

    check_op(c_runner, make, [Tensor(("n",), F64)], target=c_runner.target, sizes=(7,), rtol=0.0, atol=0.0)


@pytest.mark.parametrize("preset", ["llvmpipe", "lavapipe", "pocl"])
def test_gpu_targets_refuse_float64(preset):
    """WGSL has no f64 (SPIR-V and OpenCL only optionally): each GPU target refuses float64 by name."""
    mod = build(op.exp, [Tensor((4,), F64)])
    with pytest.raises(LegalizeError, match=f"dtype float64 is not supported by target {preset}"):
        legalize_ops(mod, Target.preset(preset))


def test_c_targets_hold_float64():
    assert Target.preset("wasm").supports_dtype(F64) and Target.preset("cpu").supports_dtype(F64)


def test_f64_kernels_round_trip_through_script():
    """f64 kernels print as tir script (``"f64"`` buffers and locals, double constants to every digit)
    and parse back to the same module."""
    mod = legalize_ops(build(lambda x: op.nn.softmax(op.multiply(x, Constant(np.array(np.float64(1.0) / 3.0)))),
                             [Tensor((4, "n"), F64)]), Target.preset("wasm"))
    text = mod.script()
    assert '"f64"' in text and repr(1.0 / 3.0) in text
    parsed = from_source(text)
    assert_structural_equal(parsed, mod)
    assert parsed.script() == text
