"""ONNX's node tests compiled for wasm and run on the VM (onnx_node_compiled.py): a fixed sample of
cases, up to two per op, every one of which passed when the sample was chosen. A case of the sample
that no longer passes (a wrong number, a build error, a refusal) fails this test, named.

The whole run, every attempted case on wasm and webgpu, is `make test-onnx-compiled` (docs/onnx.md)."""

from __future__ import annotations

import onnx_node_cases as cases  # (tests/frontend is on the path: no package here)
import onnx_node_compiled as compiled


def test_the_sample_passes_compiled_for_wasm():
    sample = set(compiled.read_sample())
    chosen = [case for case in cases.collect() if case.name in sample]
    assert len(chosen) == len(sample), f"cases no longer collected: {sorted(sample - {c.name for c in chosen})}"
    ops = cases.case_ops(cases.collect())
    results = [cases.run_case(case, ops[case.name], "wasm") for case in chosen]
    failed = [f"{r.name} ({r.op}): {r.status}: {r.reason}" for r in results if r.status != "passed"]
    assert not failed, "compiled node tests that passed no longer do:\n" + "\n".join(failed)
