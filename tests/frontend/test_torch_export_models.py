"""Real architectures through the torch.export importer: the same transformers models (random weights,
built from configs, no download) as test_onnx_models.py, exported by ``torch.export.export`` with a
dynamic batch (and sequence, for text) as bounded ``Dim``s, imported by ``from_exported_program``,
compiled for cpu and for a GPU target (vulkan on lavapipe; ``-m long`` also wasm, webgpu and opencl),
and compared with torch itself at two sizes from one build.

`make test` runs small configs of BERT and ResNet (the exported graph has the same ops at any width
or depth); ``-m long`` runs the other five small ones and all seven at their real sizes. Exported programs are cached under build/torch-export-models/ as
.pt2 files, keyed by a hash of the config and the versions that write them."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch  # dev dependencies: a missing one fails make test
import transformers
from test_onnx_models import (
    BUILD_TARGET,
    GPU_REAL_DIMS,
    RECIPE,
    RTOL,
    Case,
    _atol,
    _max_error,
    cases,
    feeds,
    require_device,
)

CACHE = Path(__file__).resolve().parents[2] / "build" / "torch-export-models"
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # torch's own pytree deprecation, on export


def exported_program(case: Case) -> Path:
    """The case exported by torch.export with its dims bounded, saved as a .pt2 (cached)."""
    key = json.dumps([RECIPE, case.name, case.config.to_dict(), case.inputs, case.dims, torch.__version__,
                      transformers.__version__], sort_keys=True, default=str)
    path = CACHE / f"{case.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt2"
    if path.exists():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    model = case.make()
    example = tuple(feeds(case, {name: max(2, lo) for name, (lo, _) in case.dims.items()}, torch_tensors=True).values())
    dims = {name: torch.export.Dim(name, min=lo, max=hi) for name, (lo, hi) in case.dims.items()}
    dynamic = tuple({axis: dims[d] for axis, d in enumerate(shape) if isinstance(d, str)}
                    for _, shape, _ in case.inputs.values())
    program = torch.export.export(model, example, dynamic_shapes=(dynamic,))
    tmp = path.with_suffix(".tmp.pt2")
    torch.export.save(program, str(tmp))
    os.replace(tmp, path)
    return path


def check_case(case: Case, targets=("cpu", "vulkan"), report=None, dims=None):
    """Import the saved program once, build each target once, and compare with torch at both sizes.
    ``dims``: narrower bounds for the import than the ones torch recorded."""
    import tessera
    from tessera.frontend import from_exported_program

    path = exported_program(case)
    model = case.make()
    started = time.perf_counter()
    mod = from_exported_program(str(path), dims=dims)
    timings = {"import": time.perf_counter() - started}
    sessions = {}
    for target in targets:
        started = time.perf_counter()
        sessions[target] = tessera.InferenceSession(tessera.build(mod, BUILD_TARGET.get(target, target)), device=target)
        timings[f"build {target}"] = time.perf_counter() - started
    errors = {}
    for index, sizes in enumerate(case.sizes):
        feed = feeds(case, sizes, seed=index)
        with torch.no_grad():
            want = [w.numpy() for w in model(*(torch.from_numpy(v) for v in feed.values()))]
        for target, session in sessions.items():
            # torch.export.load keeps no input names of the module's: feed by position.
            named = dict(zip([arg.name for arg in session.get_inputs()], feed.values()))
            started = time.perf_counter()
            got = session.run(None, named)
            timings[f"run {target} {sizes}"] = time.perf_counter() - started
            assert len(got) == len(want)
            for position, (g, w) in enumerate(zip(got, want)):
                assert np.asarray(g).shape == w.shape, (case.name, target, sizes, position)
                assert 1e-2 < float(np.abs(w).max()) < 1e4, f"{case.name}'s output {position} is degenerate"
                errors[target, str(sizes), position] = _max_error(g, w)
                np.testing.assert_allclose(np.asarray(g), w, rtol=RTOL, atol=_atol(w),
                                           err_msg=f"{case.name} on {target} at {sizes}, output {position}")
    if report is not None:
        report[case.name] = {"timings": timings, "worst (as a multiple of the tolerance)": max(errors.values())}
    return errors


SMALL = {case.name: case for case in cases(real=False)}
# `make test` runs a text model and a CNN (about 30 s here: loading a .pt2 and importing it take
# seconds, MobileNetV2's 15); the other five small ones run under -m long with the real sizes.
IN_MAKE_TEST = ("bert", "resnet")


@pytest.mark.parametrize("name", [name if name in IN_MAKE_TEST else pytest.param(name, marks=pytest.mark.long)
                                  for name in SMALL])
def test_small_architecture_matches_torch(name):
    require_device("vulkan")
    check_case(SMALL[name])


@pytest.mark.long
@pytest.mark.parametrize("name", list(SMALL))
def test_real_size_architecture_matches_torch(name):
    """As the ONNX test, Whisper's encoder takes batch up to 2 here (its attention scores at batch 4
    pass vulkan's binding limit: test_onnx_models.GPU_REAL_DIMS)."""
    require_device("vulkan")
    report = {}
    check_case({case.name: case for case in cases(real=True)}[name], report=report, dims=GPU_REAL_DIMS.get(name))
    print(json.dumps(report, indent=1, default=str))


@pytest.mark.long
@pytest.mark.parametrize("target", ("wasm", "webgpu", "opencl"))
@pytest.mark.parametrize("name", list(SMALL))
def test_small_architecture_on_the_other_targets(name, target):
    """The other three targets the ONNX path is checked on (wasm on wasmtime, webgpu on llvmpipe,
    opencl on PoCL), from the same exported programs: the importers share the IR's operators, so
    small configs show the torch.export graphs lower on each."""
    if target != "wasm":
        require_device(target)
    check_case(SMALL[name], targets=(target,))
