"""ResNet and BERT for the tensor API in every runtime (issue 36): one build per target, the inputs and
onnxruntime's outputs beside them, shared by tests/test_tensor_api_models.py (Python's InferenceSession,
the C API's tessera_model_run_named), tests/js/tensor-api-models.test.mjs (Node, WASM) and
tests/browser/tensor-api-models.test.mjs (Chromium, WebGPU and WASM).

    python tests/js/tensor-api-models-fixtures.py OUT [--long]

The models are tests/frontend/test_onnx_models.py's (transformers' classes from config objects, random
weights, exported by torch.onnx.export with a dynamic batch, and sequence for BERT, cached under
build/onnx-models/): small configs by default, ResNet-50 and BERT-base with --long. Each is imported once
by from_onnx with its dims bounds and compiled once per target: OUT/<model>/<target>/ (cpu, wasm, and
webgpu for the small configs: real sizes take minutes a run on SwiftShader). Each of the model's two sizes
is a call: OUT/<model>/call<i>/<name>.npy and .bin (raw little-endian) for every input and output, the
outputs onnxruntime's. OUT/cases.json describes them (names, types, dims, files, the tolerance of each
output). Made once per compiler, fixture script and exported file (OUT/stamp), under a lock, so that
pytest's workers and Node running beside them share one copy."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..")]

import numpy as np  # noqa: E402

MODELS = ("resnet", "bert")
RTOL = 1e-3


def targets_for(real: bool) -> tuple:
    return ("cpu", "wasm") if real else ("cpu", "wasm", "webgpu")


def _tensor(path_stem: str, array: np.ndarray, relative: str) -> dict:
    np.save(path_stem + ".npy", array)
    np.ascontiguousarray(array).tofile(path_stem + ".bin")
    return {"type": array.dtype.name, "dims": list(array.shape), "file": relative + ".bin"}


def _stamp(real: bool, paths: dict) -> str:
    from tessera.app.compile import compiler_fingerprint

    digest = hashlib.sha256(compiler_fingerprint().encode())
    with open(os.path.abspath(__file__), "rb") as f:
        digest.update(f.read())
    digest.update(json.dumps([real, {name: os.path.basename(str(p)) for name, p in paths.items()}]).encode())
    return digest.hexdigest()


def _write(work: str, real: bool, paths: dict, chosen: dict) -> dict:
    import onnxruntime
    import tessera
    from frontend.test_onnx_models import _atol, feeds
    from tessera.frontend import from_onnx

    described = {}
    for name in MODELS:
        case, path = chosen[name], str(paths[name])
        module = from_onnx(path, dims=case.dims)
        for target in targets_for(real):
            tessera.build(module, target).save(os.path.join(work, name, target))
        reference = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        output_names = [o.name for o in reference.get_outputs()]
        calls = []
        for index, sizes in enumerate(case.sizes):
            folder = os.path.join(work, name, f"call{index}")
            os.makedirs(folder)
            feed = feeds(case, sizes, seed=index)
            want = reference.run(None, feed)
            relative = f"{name}/call{index}"
            calls.append({
                "sizes": sizes,
                "inputs": {k: _tensor(os.path.join(folder, k), v, f"{relative}/{k}") for k, v in feed.items()},
                "outputs": [dict(_tensor(os.path.join(folder, o), w, f"{relative}/{o}"), name=o, atol=_atol(w))
                            for o, w in zip(output_names, want)]})
        described[name] = {"inputs": list(case.inputs), "outputs": output_names, "dims": case.dims,
                           "targets": list(targets_for(real)), "rtol": RTOL, "calls": calls}
    return described


def make(out: str, real: bool = False) -> dict:
    """OUT's cases.json (made first, unless OUT holds this compiler's and these models' copy)."""
    from frontend.test_onnx_models import cases, exported

    chosen = {case.name: case for case in cases(real=real) if case.name in MODELS}
    paths = {name: exported(chosen[name]) for name in MODELS}
    stamp = _stamp(real, paths)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(os.path.abspath(out) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second maker waits, then finds the first one's copy
        stamp_path = os.path.join(out, "stamp")
        if not (os.path.exists(stamp_path) and open(stamp_path).read() == stamp):
            work = f"{out}.tmp-{os.getpid()}"
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            try:
                described = _write(work, real, paths, chosen)
            except BaseException:
                shutil.rmtree(work, ignore_errors=True)  # a real-size copy is a gigabyte
                raise
            with open(os.path.join(work, "cases.json"), "w") as f:
                json.dump(described, f, indent=1)
            with open(os.path.join(work, "stamp"), "w") as f:
                f.write(stamp)
            shutil.rmtree(out, ignore_errors=True)
            os.rename(work, out)
    with open(os.path.join(out, "cases.json")) as f:
        return json.load(f)


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or (len(argv) == 2 and argv[1] != "--long"):
        print(__doc__)
        return 2
    make(argv[0], real=len(argv) == 2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
