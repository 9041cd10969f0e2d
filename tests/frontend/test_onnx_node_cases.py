"""ONNX's node tests through from_onnx and the reference interpreter (onnx_node_cases.py).

Every attempted case passes or is refused by the importer with its clear error; a wrong result or
any other exception fails, named. The results table committed in docs/onnx.md must be current."""

from __future__ import annotations

from pathlib import Path

# onnx is a dev dependency (pyproject): missing, this fails rather than skips.
import onnx_node_cases as cases  # (tests/frontend is on the path: no package here)
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results():
    return cases.run_all()


def test_no_case_fails(results):
    failed = [f"{r.name} ({r.op}): {r.reason}" for r in results if r.status == "failed"]
    assert not failed, "node tests failed:\n" + "\n".join(failed)


def test_core_ops_pass(results):
    """The ops the importer is built around pass every case they attempt, but for cases refused
    for a reason named here (an old opset, a run-time shape or axes input, training mode)."""
    allowed = ("must be a constant", "the model's opset is", "training_mode=1")
    core = {"Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "MatMul", "Gemm", "Softmax", "Transpose",
            "Concat", "Flatten", "BatchNormalization", "GlobalAveragePool", "Identity"}
    seen = {r.op for r in results if r.status == "passed"}
    assert core <= seen, f"no passing case for {sorted(core - seen)}"
    refused = [f"{r.name}: {r.reason}" for r in results if r.op in core and r.status == "unsupported"
               and not any(reason in r.reason for reason in allowed)]
    assert not refused, "core ops refused:\n" + "\n".join(refused)


def test_committed_table_is_current(results):
    committed = cases.committed_table(ROOT / "docs/onnx.md")
    assert committed == cases.render_table(results), (
        f"docs/onnx.md's node-test table is stale; run `{cases.REGENERATE}` and commit the result")
