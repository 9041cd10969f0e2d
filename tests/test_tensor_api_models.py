"""The tensor API in Python and in C (issue 36): the same compiled ResNet and BERT (transformers' classes,
random weights, torch.onnx.export; tests/js/tensor-api-models-fixtures.py) give onnxruntime's outputs
through tessera.InferenceSession on the cpu and wasm builds, and through the C API's
tessera_model_run_named (ctypes, as tests/native/test_named_io_native.py calls it) on the cpu build, at
two sizes from one build. Node and Chromium run the same folders (tests/js/tensor-api-models.test.mjs,
tests/browser/tensor-api-models.test.mjs).

`make test` runs small configs; ``pytest -m long tests/test_tensor_api_models.py`` runs ResNet-50 and
BERT-base (and Node's WASM run of them)."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "tensor-api-models"
_spec = importlib.util.spec_from_file_location("tensor_api_models_fixtures",
                                               ROOT / "tests" / "js" / "tensor-api-models-fixtures.py")
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)

DTYPE_CODES = {"float32": 0, "int64": 4}  # tessera_dtype (tessera.h)


def _made(real: bool) -> tuple[Path, dict]:
    folder = OUT / ("long" if real else "small")
    return folder, fixtures.make(str(folder), real=real)


@pytest.fixture(scope="module")
def small():
    return _made(False)


def _calls(folder: Path, described: dict):
    """(sizes, feed, [(output name, expected, atol)]) for each call of a model."""
    for call in described["calls"]:
        feed = {name: np.load(folder / (t["file"][:-4] + ".npy")) for name, t in call["inputs"].items()}
        want = [(o["name"], np.load(folder / (o["file"][:-4] + ".npy")), o["atol"]) for o in call["outputs"]]
        yield call["sizes"], feed, want


def check_python(folder: Path, described: dict, name: str, target: str) -> None:
    import tessera

    model = described[name]
    session = tessera.InferenceSession(str(folder / name / target), device=target)
    assert [a.name for a in session.get_inputs()] == model["inputs"]
    assert [a.name for a in session.get_outputs()] == model["outputs"]
    for sizes, feed, want in _calls(folder, model):
        got = session.run(None, feed)
        assert len(got) == len(want)
        for g, (output, w, atol) in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=model["rtol"], atol=atol,
                                       err_msg=f"{name} on {target} at {sizes}, {output}")


class _IOPointers:
    """ctypes argument arrays for tessera_model_run_named; it keeps the numpy arrays alive."""

    def __init__(self, feed: dict, wanted: list[str]):
        from tessera.native.binding import Tensor, Value

        self.arrays = [np.ascontiguousarray(a) for a in feed.values()]
        self.names = (ctypes.c_char_p * len(feed))(*[n.encode() for n in feed])
        self.values = (Value * len(feed))()
        for value, array in zip(self.values, self.arrays):
            value.kind, value.tensor.data = 0, array.ctypes.data
            value.tensor.dtype, value.tensor.ndim = DTYPE_CODES[array.dtype.name], array.ndim
            for axis, size in enumerate(array.shape):
                value.tensor.shape[axis] = size
        self.wanted = (ctypes.c_char_p * len(wanted))(*[n.encode() for n in wanted])
        self.outputs = (ctypes.POINTER(Tensor) * len(wanted))()


def check_c(folder: Path, described: dict, name: str) -> None:
    from native.build import ensure_native_build
    from tessera.native import NativeModel
    from tessera.native.binding import Tensor, Value

    ensure_native_build()
    model = described[name]
    with NativeModel(str(folder / name / "cpu"), n_threads=1, device="cpu") as native:
        run = native._lib.tessera_model_run_named
        run.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                        ctypes.POINTER(Value), ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                        ctypes.POINTER(ctypes.POINTER(Tensor))]
        run.restype = ctypes.c_int
        wanted = list(reversed(model["outputs"]))  # asked for by name, in another order than the graph's
        for sizes, feed, want in _calls(folder, model):
            io = _IOPointers(feed, wanted)
            status = run(native._handle, b"main", len(feed), io.names, io.values, len(wanted), io.wanted, io.outputs)
            assert status == 0, native._lib.tessera_last_error().decode()
            expected = {output: (w, atol) for output, w, atol in want}
            for output, pointer in zip(wanted, io.outputs):
                t = pointer.contents
                assert t.dtype == DTYPE_CODES["float32"]
                shape = tuple(t.shape[i] for i in range(t.ndim))
                got = np.ctypeslib.as_array(ctypes.cast(t.data, ctypes.POINTER(ctypes.c_float)), shape).copy()
                w, atol = expected[output]
                np.testing.assert_allclose(got, w, rtol=model["rtol"], atol=atol,
                                           err_msg=f"{name} through the C API at {sizes}, {output}")
        # a feed past the bounds is refused by name
        batch_hi = model["dims"]["batch"][1]
        feed = {k: np.repeat(v[:1], batch_hi + 1, axis=0) for k, v in next(_calls(folder, model))[1].items()}
        io = _IOPointers(feed, wanted)
        status = run(native._handle, b"main", len(feed), io.names, io.values, len(wanted), io.wanted, io.outputs)
        assert status != 0
        first = model["inputs"][0]
        assert f"input '{first}' of main: dimension 0 (batch) is {batch_hi + 1}, above its upper bound" \
            in native._lib.tessera_last_error().decode()


@pytest.mark.parametrize("target", ["cpu", "wasm"])
@pytest.mark.parametrize("name", fixtures.MODELS)
def test_inference_session_gives_onnxruntimes_outputs(small, name, target):
    check_python(*small, name, target)


@pytest.mark.parametrize("name", fixtures.MODELS)
def test_the_c_api_by_name_gives_onnxruntimes_outputs(small, name):
    check_c(*small, name)


@pytest.mark.long
def test_real_sizes_in_python_c_and_node():
    """ResNet-50 and BERT-base, compiled once for cpu and wasm, in Python, through C, and in Node (WASM).
    Chromium's WASM run of them: TESSERA_TENSOR_API_MODELS=long node --test tests/browser/tensor-api-models.test.mjs"""
    folder, described = _made(True)
    for name in fixtures.MODELS:
        for target in ("cpu", "wasm"):
            check_python(folder, described, name, target)
        check_c(folder, described, name)
    node = subprocess.run(["node", "--test", "tests/js/tensor-api-models.test.mjs"], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "TESSERA_TENSOR_API_MODELS": "long"}, timeout=3600)
    assert node.returncode == 0, node.stdout[-4000:] + node.stderr[-2000:]
