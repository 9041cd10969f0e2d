"""The `tessera` command: check, ops and demo, as a user runs them."""

import subprocess
import sys

from modules import FIGURE_4

TESSERA = [sys.executable, "-m", "tessera.cli"]


def run(*args, stdin=None):
    return subprocess.run(TESSERA + list(args), input=stdin, capture_output=True, text=True, timeout=120)


def test_check_prints_the_canonical_script(tmp_path):
    path = tmp_path / "figure4.py"
    path.write_text(FIGURE_4)
    result = run("check", str(path))
    assert result.returncode == 0, result.stderr
    assert "lv1: R.Tensor((n * 4,), dtype=\"float32\") = R.flatten(lv0)" in result.stdout
    again = run("check", "-", stdin=result.stdout)
    assert again.returncode == 0 and again.stdout == result.stdout


def test_check_reports_errors_with_position(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(FIGURE_4.replace("R.flatten(lv0)", "R.flaten(lv0)"))
    result = run("check", str(path))
    assert result.returncode == 1
    assert "line 17, column 56:" in result.stderr and "unknown operator 'flaten'; did you mean flatten" in result.stderr
    missing = run("check", str(tmp_path / "missing.py"))
    assert missing.returncode == 1 and "cannot read" in missing.stderr


def test_ops_lists_the_registry():
    result = run("ops")
    assert result.returncode == 0
    names = result.stdout.split()
    assert "matmul" in names and "nn.rms_norm" in names and "unique" in names


def test_demo_runs_end_to_end():
    result = run("demo")
    assert result.returncode == 0, result.stderr
    assert "n =  64: output (64, 16)" in result.stdout
    assert "dimension 1 is 17, not 16" in result.stdout
    assert "max |WebGPU - interpreter|" in result.stdout


def test_inspect_prints_the_plan_and_json(tmp_path):
    import json

    import tessera
    from llama_layer import build_layer

    tessera.build(build_layer(), "llvmpipe", upper_bounds={"n": 256}).save(tmp_path)
    text = run("inspect", str(tmp_path))
    assert text.returncode == 0, text.stderr
    assert "18 kernel launches; symbols n <= 256" in text.stdout
    data = json.loads(run("inspect", str(tmp_path), "--json").stdout)
    assert set(data) >= {"arena_bytes", "liveness_lower_bound_bytes", "kernels", "required_features",
                         "required_limits"}
    assert data["liveness_lower_bound_bytes"] <= data["arena_bytes"] <= 1.1 * data["liveness_lower_bound_bytes"]
    assert all(k["grid"] for k in data["kernels"])
    broken = run("inspect", str(tmp_path / "missing"))
    assert broken.returncode == 1 and "cannot read" in broken.stderr
