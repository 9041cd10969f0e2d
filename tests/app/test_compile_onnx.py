"""`tessera compile model.onnx|model.pt2` and `tessera inspect` on what it writes (docs/cli.md): the folder
runs in tessera.InferenceSession with onnx's reference outputs; --input fixes a shape and --dim bounds a
symbolic one; each bad file or option is one `error:` line and exit status 1, without a traceback."""

import importlib.util
import json
import os

import numpy as np
import onnx
import pytest
import tessera
from onnx.reference import ReferenceEvaluator
from tessera.cli import main

HERE = os.path.dirname(os.path.abspath(__file__))


def _fixtures():
    """tests/js/inference-session-fixtures.py: its ONNX classifier (dim_param batch) is the model here too."""
    spec = importlib.util.spec_from_file_location("inference_session_fixtures",
                                                  os.path.join(HERE, "..", "js", "inference-session-fixtures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx")
    proto = _fixtures().onnx_model()
    path = folder / "classifier.onnx"
    onnx.save(proto, str(path))
    return path, proto


def _tessera(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_compile_with_bounded_batch_runs_and_inspects(model, tmp_path, capsys):
    path, proto = model
    out_dir = tmp_path / "classifier"
    code, out, err = _tessera(capsys, "compile", path, "--target", "cpu", "-o", out_dir, "--dim", "batch=1..4")
    assert code == 0, err
    assert out.strip() == str(out_dir)
    assert "inputs:        pixel_values float32[batch, 3, 8, 8]" in err and "symbols:       batch <= 4" in err
    session = tessera.InferenceSession(out_dir)
    [image] = session.get_inputs()
    assert (image.name, image.shape) == ("pixel_values", ["batch", 3, 8, 8])
    reference = ReferenceEvaluator(proto)
    rng = np.random.default_rng(1)
    for batch in (1, 4):
        pixels = rng.standard_normal((batch, 3, 8, 8)).astype(np.float32)
        [got] = session.run(None, {"pixel_values": pixels})
        np.testing.assert_allclose(got, reference.run(None, {"pixel_values": pixels})[0], rtol=1e-4, atol=1e-5)
    code, out, _ = _tessera(capsys, "inspect", out_dir)
    assert code == 0
    assert "function main: 5 kernel launches; symbols batch <= 4" in out
    assert "  params: pixel_values float32[batch, 3, 8, 8]" in out
    [outputs] = [line for line in out.splitlines() if line.startswith("  outputs: ")]
    assert outputs.endswith(" float32[batch, 5]")
    code, out, _ = _tessera(capsys, "inspect", "--json", out_dir)
    [output] = json.loads(out)["functions"]["main"]["outputs"]
    assert output["sinfo"]["shape"] == ["batch", "5"]


def test_input_fixes_a_shape(model, tmp_path, capsys):
    path, _ = model
    code, _, err = _tessera(capsys, "compile", path, "--target", "wasm", "-o", tmp_path / "fixed", "-q",
                            "--input", "pixel_values=2,3,8,8")
    assert code == 0, err
    [image] = tessera.InferenceSession(tmp_path / "fixed").get_inputs()
    assert image.shape == [2, 3, 8, 8]


def test_bad_files_and_options_are_one_clear_line(model, tmp_path, capsys):
    path, proto = model
    data = proto.SerializeToString()
    (tmp_path / "truncated.onnx").write_bytes(data[: len(data) // 2])
    unknown = onnx.ModelProto()
    unknown.CopyFrom(proto)
    unknown.graph.node[1].op_type = "FancyRelu"
    onnx.save(unknown, str(tmp_path / "unknown.onnx"))
    old = onnx.ModelProto()
    old.CopyFrom(proto)
    old.opset_import[0].version = 9
    onnx.save(old, str(tmp_path / "old.onnx"))
    out = tmp_path / "out"
    cases = [
        ([tmp_path / "missing.onnx"], "missing.onnx: no such file"),
        ([tmp_path / "truncated.onnx"], "is not a valid ONNX model (truncated or corrupt"),
        ([tmp_path / "unknown.onnx"], "node #1 (FancyRelu, opset 17): the op is not supported"),
        ([tmp_path / "old.onnx"], "the model's opset is 9; the importer takes opsets 11 and up"),
        ([path, "--input", "pixel_values=1,x"], "--input 'pixel_values=1,x': expected NAME=D0,D1,..."),
        ([path, "--input", "pixel=1,3,8,8"], "--input names pixel, which the graph has no input of"),
        ([path, "--input", "pixel_values=1,3,9,9"], "size 9 on axis 2, the model declares 8"),
        ([path, "--dim", "batch=8..2"], "--dim 'batch=8..2': the bounds must be 0 <= LO <= HI"),
        ([path, "--dim", "batch"], "--dim 'batch': expected NAME=LO..HI"),
        ([path, "--dim", "bunch=1..2"], "--dim bounds 'bunch', which no input dimension is named"),
        ([path, "--prefill-chunk", "4"], "--prefill-chunk apply to GGUF chat models"),
        ([path, "--target", "nowhere"], "nowhere"),
    ]
    for args, message in cases:
        target = [] if "--target" in args else ["--target", "wasm"]
        code, _, err = _tessera(capsys, "compile", *args, "-o", out, "-q", *target)
        assert code == 1, (args, err)
        assert err.startswith("error: ") and err.count("\n") == 1, err
        assert message in err, (message, err)
    assert not out.exists()  # nothing written by a compile that failed


def test_a_torch_export_program(tmp_path, capsys):
    """A .pt2 compiles through tessera.frontend.torch_export, with --dim bounding its dynamic batch."""
    import torch
    linear = torch.nn.Linear(4, 3)
    batch = torch.export.Dim("batch", min=1, max=16)
    program = torch.export.export(torch.nn.Sequential(linear, torch.nn.ReLU()), (torch.randn(2, 4),),
                                  dynamic_shapes=({0: batch},))
    path = tmp_path / "linear.pt2"
    torch.export.save(program, str(path))
    code, _, err = _tessera(capsys, "compile", path, "--target", "cpu", "-o", tmp_path / "out", "-q",
                            "--input", "x=1,4")
    assert code == 1 and "--input applies to ONNX models" in err
    code, _, err = _tessera(capsys, "compile", path, "--target", "cpu", "-o", tmp_path / "wide", "-q")
    assert code == 0, err
    # the batch's variable, bounded by torch.export.Dim's max, then narrowed by --dim
    [(variable, info)] = json.loads((tmp_path / "wide" / "executable.json").read_text())["functions"]["main"][
        "symbols"].items()
    assert info["upper_bound"] == 16
    code, _, err = _tessera(capsys, "compile", path, "--target", "cpu", "-o", tmp_path / "out", "-q",
                            "--dim", f"{variable}=1..8")
    assert code == 0, err
    assert tessera.InferenceSession(tmp_path / "out").vm.exe.functions["main"]["symbols"][variable] == \
        {"upper_bound": 8}
    session = tessera.InferenceSession(tmp_path / "out")
    [x] = session.get_inputs()
    x_value = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    [got] = session.run(None, {x.name: x_value})
    np.testing.assert_allclose(got, program.module()(torch.from_numpy(x_value)).detach().numpy(), rtol=1e-5,
                               atol=1e-6)


def test_bundle_writes_a_page_for_an_image_model(model, tmp_path, capsys):
    """`tessera bundle model.onnx`: the page, the runtime, a build per target and model.json (the batch fixed to
    one picture, the labels from the model's metadata); tests/browser/inference-session-page.test.mjs drives it."""
    path, proto = model
    labelled = onnx.ModelProto()
    labelled.CopyFrom(proto)
    onnx.helper.set_model_props(labelled, {"labels": json.dumps(["cat", "dog", "fish", "bird", "frog"]),
                                           "mean": "[0.5, 0.5, 0.5]"})
    onnx.save(labelled, str(tmp_path / "labelled.onnx"))
    site = tmp_path / "site"
    code, out, err = _tessera(capsys, "bundle", tmp_path / "labelled.onnx", "-o", site, "--targets", "wasm")
    assert code == 0, err
    assert {"index.html", "infer.js", "infer.css", "runtime", "model"} <= set(os.listdir(site))
    assert (site / "runtime" / "inference-session.js").is_file()
    index = json.loads((site / "model" / "model.json").read_text())
    assert index == {"name": "labelled", "builds": ["wasm/"],
                     "input": {"name": "pixel_values", "shape": [1, 3, 8, 8], "type": "float32"},
                     "output": index["output"], "labels": ["cat", "dog", "fish", "bird", "frog"],
                     "mean": [0.5, 0.5, 0.5], "std": None}
    assert [arg.shape for arg in tessera.InferenceSession(site / "model" / "wasm").get_inputs()] == [[1, 3, 8, 8]]
    code, out, _ = _tessera(capsys, "inspect", site)
    assert code == 0 and out.startswith("build model/wasm:\n  target: wasm") and "  outputs: " in out
    (tmp_path / "labels.txt").write_text("a\nb\n")
    code, _, err = _tessera(capsys, "bundle", path, "-o", site, "--targets", "wasm", "--labels", tmp_path / "labels.txt")
    assert code == 0, err
    assert json.loads((site / "model" / "model.json").read_text())["labels"] == ["a", "b"]
    for args, message in (([tmp_path / "missing.onnx"], "missing.onnx: no such file"),
                          ([path, "--targets", "vulkan"], "unknown bundle target vulkan for a graph model"),
                          ([path, "--input", "pixel_values=1,3,8"], "rank 3, the model declares 4"),
                          ([path, "--gpu-layers", "1"], "--gpu-layers applies to GGUF chat models")):
        code, _, err = _tessera(capsys, "bundle", *args, "-o", tmp_path / "other")
        last = err.strip().splitlines()[-1]  # after the progress lines of what did compile
        assert code == 1 and last.startswith("error: ") and message in last, (args, err)
