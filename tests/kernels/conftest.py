import pytest
from harness import kernel_devices, open_runner


@pytest.fixture(scope="session", params=kernel_devices())
def runner(request):
    """Each device the kernels run on: WebGPU (llvmpipe on a CPU-only machine) and the edge backends'
    devices (harness.KERNEL_DEVICES); make setup installs their drivers, so none is skipped."""
    return open_runner(request.param)


def _complete_kernel_run(session) -> bool:
    """True when the run selected every kernel test (no -k, -m, --lf or single file)."""
    options = session.config.option
    if options.keyword or options.markexpr or getattr(options, "lf", False) or options.collectonly:
        return False
    import pathlib

    here = pathlib.Path(__file__).parent
    ran = {pathlib.Path(str(item.fspath)).name for item in session.items if pathlib.Path(str(item.fspath)).parent == here}
    return ran == {path.name for path in here.glob("test_*.py")} and session.testscollected == len(session.items)


_RUN = {"complete": False}


def pytest_sessionfinish(session, exitstatus):
    """When every kernel test ran and passed, every operator with a kernel must have been run."""
    from harness import COVERED_OPS
    from tessera.op import get_op, list_ops

    _RUN["complete"] = exitstatus == 0 and _complete_kernel_run(session)
    if not _RUN["complete"]:
        return
    missing = sorted(n for n in list_ops() if get_op(n).legalize is not None and n not in COVERED_OPS)
    if missing:
        session.exitstatus = 1
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        reporter.write_line("")
        reporter.write_line(f"operators with kernels that no kernel test ran: {', '.join(missing)}", red=True)


SHADER_FILE = "build/test-shaders.json"


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Leave every WGSL kernel of the run, plus one runnable example, for the Chromium test."""
    import json
    import os

    from harness import SHADERS

    # A run without the WebGPU device recorded no WGSL: it leaves the last complete file alone.
    if exitstatus != 0 or not _RUN["complete"] or "webgpu" not in kernel_devices():
        return
    os.makedirs(os.path.dirname(SHADER_FILE), exist_ok=True)
    with open(SHADER_FILE, "w") as f:
        json.dump({"shaders": list(SHADERS.values()), "example": _example()}, f)
    terminalreporter.write_line(f"wrote {len(SHADERS)} WGSL kernels to {SHADER_FILE} for tests/browser")


def _example() -> dict:
    """softmax over rows of a (5, 37) matrix: a row-reduction kernel with a uniform and scratch memory."""
    import numpy as np
    from harness import build
    from tessera import op
    from tessera.codegen import get_backend
    from tessera.ir import Function, Tensor
    from tessera.target import Target
    from tessera.transform import legalize_ops

    target = Target.preset("swiftshader")
    mod = legalize_ops(build(op.nn.softmax, [Tensor(("n", 37), "float32")]), target)
    (kernel,) = [f for f in mod.functions.values() if not isinstance(f, Function)]
    x = np.random.default_rng(0).standard_normal((5, 37)).astype(np.float32)
    expected = np.exp(x - x.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    compiled = get_backend("wgsl").compile([kernel], target)
    record = compiled.kernels[0].record(kernel)
    from tessera import arith

    bindings = [b["tensor"] for b in record["abi"]["bindings"]] + ["params"] * bool(record["abi"]["scalars"])
    return {"source": compiled.modules[record["module"]].decode(), "entry_point": record["entry_point"],
            "bindings": bindings, "features": record["requirements"]["features"],
            "scalars": [5], "grid": [arith.evaluate(g, {"n": 5}) for g in kernel.grid],
            "input": x.ravel().tolist(), "expected": expected.ravel().tolist()}
