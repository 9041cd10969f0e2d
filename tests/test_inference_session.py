"""tessera.InferenceSession (docs/inference.md): the inputs and outputs an executable folder describes, a
run that gives numpy's answers on each device kind here, and a clear error, naming the input, for each
feed that does not fit, raised before anything runs."""

import json

import numpy as np
import pytest
import tessera
from conformance.cases import CASES, one_function
from conformance.generate import expected_outputs
from tessera.inference import InferenceSessionError
from tessera.ir import Tensor
from tessera.ir.errors import TesseraError
from tessera.vm import DeviceError, device_kinds

BOUND = 8
KINDS = ("cpu", "wasm")


def _pair_module():
    """main(x: (n, 4) float32, y: (n, 4) float32, ids: (n,) int64) -> (x + y, x * y, ids): n up to BOUND."""
    from tessera import op

    return one_function(lambda x, y, ids: (op.add(x, y), op.multiply(x, y), op.add(ids, ids)),
                        [Tensor(("n", 4), "float32"), Tensor(("n", 4), "float32"), Tensor(("n",), "int64")],
                        {"n": BOUND})


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Executable folders, as `tessera compile` writes them: (program, device kind) -> folder."""
    root = tmp_path_factory.mktemp("inference")
    modules = {"pair": _pair_module(), "cnn": CASES["cnn-mobilenet"]().module, "gemm": CASES["gemm"]().module}
    built = {}
    for name, module in modules.items():
        for kind in KINDS:
            folder = root / f"{name}-{kind}"
            tessera.build(module, kind).save(str(folder))
            built[name, kind] = folder
    return built


@pytest.fixture(scope="module")
def pair(folders):
    return tessera.InferenceSession(folders["pair", "cpu"], device="cpu")


def test_the_inputs_and_outputs_of_a_static_cnn(folders):
    session = tessera.InferenceSession(folders["cnn", "cpu"])
    [image] = session.get_inputs()
    assert (image.name, image.shape, image.type) == ("image", [1, 3, 32, 32], "tensor(float)")
    [logits] = session.get_outputs()
    assert (logits.name, logits.shape, logits.type) == ("output0", [1, 10], "tensor(float)")
    assert session.device == "cpu"  # auto: the device whose kernels these are


def test_symbolic_dimensions_are_named_as_onnxruntime_names_them(pair):
    assert [(a.name, a.shape, a.type) for a in pair.get_inputs()] == [
        ("x0", ["n", 4], "tensor(float)"), ("x1", ["n", 4], "tensor(float)"), ("x2", ["n"], "tensor(int64)")]
    assert [(a.name, a.shape, a.type) for a in pair.get_outputs()] == [
        ("output0", ["n", 4], "tensor(float)"), ("output1", ["n", 4], "tensor(float)"), ("output2", ["n"], "tensor(int64)")]


@pytest.mark.parametrize("kind", KINDS)
def test_run_gives_the_cases_expected_outputs(folders, kind):
    rng = np.random.default_rng(0)
    for case in ("cnn-mobilenet", "gemm"):
        spec = CASES[case]()
        session = tessera.InferenceSession(folders["cnn" if case == "cnn-mobilenet" else "gemm", kind], device=kind)
        assert session.device == kind
        for call, [expected] in list(zip(spec.calls, expected_outputs(spec)))[:2]:  # the interpreter's outputs
            feed = {arg.name: value for arg, value in zip(session.get_inputs(), call.args)}
            [got] = session.run(None, feed)
            np.testing.assert_allclose(got, expected, rtol=max(spec.rtol, 1e-4), atol=max(spec.atol, 1e-4))
    session = tessera.InferenceSession(folders["pair", kind], device=kind)
    for n in (1, 5, BOUND):
        x, y = rng.standard_normal((2, n, 4)).astype(np.float32)
        ids = rng.integers(-1000, 1000, n)
        total, product, doubled = session.run(None, {"x2": ids, "x1": y, "x0": x})
        np.testing.assert_allclose(total, x + y, rtol=1e-6)
        np.testing.assert_allclose(product, x * y, rtol=1e-6)
        assert doubled.dtype == np.int64 and (doubled == ids * 2).all()
        # Chosen outputs, in the order asked for.
        doubled, total = session.run(["output2", "output0"], {"x0": x, "x1": y, "x2": ids})
        assert (doubled == ids * 2).all() and np.allclose(total, x + y)


def test_webgpu_when_this_machine_has_it(folders, tmp_path):
    if "webgpu" not in device_kinds():
        pytest.skip("no webgpu device kind registered")
    try:
        from tessera.vm import webgpu_adapter_infos

        if not webgpu_adapter_infos():
            pytest.skip("no WebGPU adapter here")
    except Exception as error:  # wgpu-py missing or no adapter
        pytest.skip(f"no WebGPU here: {error}")
    tessera.build(_pair_module(), "llvmpipe").save(str(tmp_path / "pair"))
    session = tessera.InferenceSession(tmp_path / "pair", device="webgpu")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    total, _, doubled = session.run(None, {"x0": x, "x1": x, "x2": np.arange(3)})
    assert np.allclose(total, 2 * x) and (doubled == 2 * np.arange(3)).all()


@pytest.mark.parametrize("kind", ["vulkan", "opencl"])
def test_the_native_gpu_devices(tmp_path, kind):
    """lavapipe and PoCL here: the same function built for each API runs on its device."""
    tessera.build(_pair_module(), kind).save(str(tmp_path / kind))
    try:
        session = tessera.InferenceSession(tmp_path / kind, device=kind)
    except DeviceError as error:
        pytest.skip(f"no {kind} device here: {error}")
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    product, doubled = session.run(["output1", "output2"], {"x0": x, "x1": x, "x2": np.arange(5)})
    assert session.device == kind and np.allclose(product, x * x) and (doubled == 2 * np.arange(5)).all()


def _feed(n=3, m=None):
    x = np.zeros((n, 4), np.float32)
    return {"x0": x, "x1": np.zeros((n if m is None else m, 4), np.float32), "x2": np.zeros(n, np.int64)}


@pytest.mark.parametrize("change,names,says", [
    (lambda f: f.pop("x1"), "x1", "is missing"),
    (lambda f: f.update(z=f["x0"]), "z", "unknown input"),
    (lambda f: f.update(x0=f["x0"].astype(np.float64)), "x0", "expected dtype float32"),
    (lambda f: f.update(x2=f["x2"].astype(np.int32)), "x2", "got int32"),
    (lambda f: f.update(x0=np.zeros((3, 4, 1), np.float32)), "x0", "expected rank 2"),
    (lambda f: f.update(x0=np.zeros((3, 5), np.float32), x1=np.zeros((3, 5), np.float32)), "x0", "not 4"),
    (lambda f: f.update(**_feed(BOUND + 1)), "x0", f"above its upper bound {BOUND}"),
    (lambda f: f.update(**_feed(3, 2)), "x1", "n = 3 from input 'x0'"),
    (lambda f: f.update(x0=[[0.0] * 4] * 3), "x0", "expected a numpy array"),
])
def test_each_bad_feed_is_an_error_naming_the_input(pair, change, names, says):
    feed = _feed()
    change(feed)
    with pytest.raises(InferenceSessionError) as caught:
        pair.run(None, feed)
    assert f"'{names}'" in str(caught.value) and says in str(caught.value)
    assert caught.value.input == names and isinstance(caught.value, TesseraError)


def test_unknown_outputs_functions_and_devices(folders, pair):
    with pytest.raises(InferenceSessionError, match="unknown output 'logits'.*output0, output1, output2"):
        pair.run(["output0", "logits"], _feed())
    with pytest.raises(InferenceSessionError, match="no function 'decode'.*main"):
        tessera.InferenceSession(folders["pair", "cpu"], function="decode")
    with pytest.raises(InferenceSessionError, match="unknown device 'tpu'; known: auto, "):
        tessera.InferenceSession(folders["pair", "cpu"], device="tpu")
    with pytest.raises(DeviceError, match="wasm device runs"):  # a cpu build's kernels are not WebAssembly
        tessera.InferenceSession(folders["pair", "cpu"], device="wasm")


def test_an_expression_dimension_is_checked_once_its_variable_is_known(tmp_path):
    from tessera import op

    module = one_function(lambda x, y: (op.add(x, x), op.add(y, y)),
                          [Tensor(("n",), "float32"), Tensor(("n + 1",), "float32")], {"n": BOUND})
    tessera.build(module, "cpu").save(str(tmp_path / "shifted"))
    session = tessera.InferenceSession(tmp_path / "shifted")
    assert [a.shape for a in session.get_inputs()] == [["n"], ["n + 1"]]
    _, doubled = session.run(None, {"x0": np.ones(3, np.float32), "x1": np.ones(4, np.float32)})
    assert (doubled == 2).all() and doubled.shape == (4,)
    with pytest.raises(InferenceSessionError, match=r"input 'x1': .*dimension 0 is 5, not n \+ 1 = 4"):
        session.run(None, {"x0": np.ones(3, np.float32), "x1": np.ones(5, np.float32)})


def test_state_stays_on_the_device_and_an_integer_is_an_input_of_shape_nothing(tmp_path):
    """The conformance KV-cache case: append(rows, total) writes into a state tensor the session keeps."""
    spec = CASES["kv-cache"]()
    tessera.build(spec.module, "cpu").save(str(tmp_path / "cache"))
    session = tessera.InferenceSession(tmp_path / "cache", function="append")
    assert [(a.name, a.shape, a.type) for a in session.get_inputs()] == [
        ("rows", ["n", 2, 8], "tensor(float)"), ("total", [], "tensor(int64)")]
    for call, [expected] in zip(spec.calls, expected_outputs(spec)):
        rows, total = call.args
        [got] = session.run(None, {"rows": rows, "total": np.int64(total)})
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(InferenceSessionError, match="input 'total': expected an integer, got a float"):
        session.run(None, {"rows": rows, "total": 1.5})


def _named_pair(names):
    from tessera import op
    from tessera.ir import Tuple
    from tessera.ir.result_names import output_names_attr

    return one_function(lambda x, y: (op.add(x, y), Tuple([op.multiply(x, y), op.subtract(x, y)])),
                        [Tensor(("n", 4), "float32"), Tensor(("n", 4), "float32")], {"n": BOUND},
                        attrs=output_names_attr(names))


def test_recorded_result_names_name_the_outputs(tmp_path):
    """An importer's output names (the function attribute output_names) reach executable.json's
    result_names, one per value of the nested result, and the session's outputs."""
    tessera.build(_named_pair(["sum", "product", "difference"]), "cpu").save(str(tmp_path / "named"))
    session = tessera.InferenceSession(tmp_path / "named")
    assert [(a.name, a.shape) for a in session.get_outputs()] == [
        ("sum", ["n", 4]), ("product", ["n", 4]), ("difference", ["n", 4])]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    difference, total = session.run(["difference", "sum"], {"x0": x, "x1": x + 1})
    assert (difference == -1).all() and np.allclose(total, 2 * x + 1)
    with pytest.raises(InferenceSessionError, match="unknown output 'output0'; the outputs are sum, product, "):
        session.run(["output0"], {"x0": x, "x1": x})


def test_result_names_that_do_not_fit_are_refused(tmp_path):
    from tessera.ir.result_names import output_names_attr
    from tessera.vm.executable import Executable

    assert output_names_attr(["a", "a"]) == {} and output_names_attr(["a", ""]) == {}  # the fallback names
    with pytest.raises(TesseraError, match="does not name its 3 result"):
        tessera.build(_named_pair(["sum", "product"]), "cpu")
    tessera.build(_named_pair(["sum", "product", "difference"]), "cpu").save(str(tmp_path / "bad"))
    path = tmp_path / "bad" / "executable.json"
    doc = json.loads(path.read_text())
    for names, says in ((["sum", "product"], "has 2 names for a result of 3 values"),
                        (["sum", "sum", "d"], "names the result 'sum' a second time"),
                        (["sum", "", "d"], "")):
        doc["functions"]["main"]["result_names"] = names
        path.write_text(json.dumps(doc))
        with pytest.raises(TesseraError, match=f"result_names.*{says}"):
            Executable.load(str(tmp_path / "bad"))
