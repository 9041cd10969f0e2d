"""The `tessera` command as a user runs it: check, ops, demo, inspect, and compile's progress and summary."""

import json
import os
import re
import subprocess
import sys

import pytest
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


def test_targets_lists_every_registered_preset():
    from tessera import codegen  # noqa: F401
    from tessera.target import presets

    result = run("targets")
    assert result.returncode == 0, result.stderr
    listed = {line.split()[0]: line for line in result.stdout.splitlines()}
    # Every preset of the built-in backends (a test's plugin may have registered more in this process).
    assert {"webgpu", "llvmpipe", "wasm", "vulkan", "lavapipe", "opencl", "pocl", "metal"} <= set(listed) <= set(presets())
    assert "webgpu: any WebGPU device" in listed["webgpu"]


def test_demo_runs_end_to_end():
    result = run("demo")
    assert result.returncode == 0, result.stderr
    assert "n =  64: output (64, 16)" in result.stdout
    assert "dimension 1 is 17, not 16" in result.stdout
    assert "max |WebGPU - interpreter|" in result.stdout


def test_inspect_prints_a_short_summary_the_full_plan_with_verbose_and_json(tmp_path):
    import tessera
    from llama_layer import build_layer

    tessera.build(build_layer(), "llvmpipe", upper_bounds={"n": 256}).save(tmp_path)
    short = run("inspect", str(tmp_path))
    assert short.returncode == 0, short.stderr
    lines = short.stdout.splitlines()
    assert lines[0] == "target: llvmpipe (webgpu, wgsl; features shader-f16, subgroup, timestamp-query)"
    assert lines[1] == "function layer: 16 kernel launches; symbols n <= 256"
    assert lines[2].startswith("  params: x float32[n, 64], cos float32[n, 1, 16], ")
    assert re.search(r"^  arena: \d+\.\d\d MiB in 1 buffer; liveness lower bound \d+\.\d\d MiB "
                     r"\(arena / bound = 1\.\d{3}\)$", short.stdout, re.M)
    kernels = re.search(r"^kernels: (\d+) \((.*)\)$", short.stdout, re.M)
    assert sum(int(part.rsplit(" ", 1)[1]) for part in kernels[2].split(", ")) == int(kernels[1])
    assert re.search(r"^required limits: maxBufferSize \d+, ", short.stdout, re.M)
    assert re.search(r"^weights: 0 tensors, 0\.00 MiB$", short.stdout, re.M)  # weights are parameters here
    assert "state tensors" not in short.stdout
    assert "storage" not in short.stdout and "grid" not in short.stdout and len(lines) < 15

    verbose = run("inspect", str(tmp_path), "--verbose")
    assert set(lines) <= set(verbose.stdout.splitlines())  # the summary, and more
    assert re.search(r"^  storage 0: \d+ bytes at buffer 0 offset \d+: lv", verbose.stdout, re.M)
    assert re.search(r"^  \w+: \S+ \(\w+\), workgroup \(\d+, \d+, \d+\), grid \(", verbose.stdout, re.M)
    assert len(verbose.stdout.splitlines()) > len(lines) + int(kernels[1])

    data = json.loads(run("inspect", str(tmp_path), "--json").stdout)
    assert set(data) >= {"arena_bytes", "liveness_lower_bound_bytes", "kernels", "required_features",
                         "required_limits", "device_memory"}
    assert data["liveness_lower_bound_bytes"] <= data["arena_bytes"] <= 1.1 * data["liveness_lower_bound_bytes"]
    layer = data["functions"]["layer"]  # each function's arena against its own bound
    assert layer["arena_over_bound"] == round(layer["arena_bytes"] / layer["liveness_lower_bound_bytes"], 4)
    assert sum(layer["arena_buffers"]) == layer["arena_bytes"]
    assert all(k["grid"] for k in data["kernels"])
    broken = run("inspect", str(tmp_path / "missing"))
    assert broken.returncode == 1 and "cannot read" in broken.stderr and "Traceback" not in broken.stderr


@pytest.fixture(scope="module")
def compiled_tiny(tiny_gguf, tmp_path_factory):
    """`tessera compile` with stderr a pipe, as in CI or `2> log`: (the result, the output folder)."""
    output = str(tmp_path_factory.mktemp("compiled") / "tiny")
    result = run("compile", tiny_gguf, "-o", output, "--context", "64")
    assert result.returncode == 0, result.stderr
    return result, output


def test_compile_prints_one_plain_line_per_stage_when_stderr_is_not_a_terminal(compiled_tiny):
    result, output = compiled_tiny
    assert result.stdout == output + "\n"  # the result alone: `dir=$(tessera compile ...)` works
    assert "\r" not in result.stderr and "\x1b" not in result.stderr
    lines = result.stderr.splitlines()
    assert re.fullmatch(r"read tiny\.gguf \(\d+\.\d s\)", lines[0])
    passes = [line for line in lines if re.fullmatch(r"\[\d+/\d+\] \w+ \(\d+\.\d s\)", line)]
    assert passes[0].startswith("[1/") and any(" legalize_ops " in line for line in passes)
    assert any(re.fullmatch(r"\[(\d+)/\1\] kernels \(\d+\.\d s\)", line) for line in lines)  # all of them, once
    assert len([line for line in lines if "kernels (" in line]) == 1


def test_compile_ends_with_a_summary_of_the_executable(compiled_tiny):
    from tessera.vm import Executable

    result, output = compiled_tiny
    summary = dict(line.split(":", 1) for line in result.stderr.splitlines()[-7:])
    assert list(summary) == ["target", "kernels", "weights", "arena", "KV cache", "device memory", "time"]
    exe = Executable.load(output)
    assert summary["target"].strip() == "webgpu (webgpu, wgsl)"
    assert int(summary["kernels"]) == len(exe.kernels)
    weights = sum(a.nbytes for a in exe.constants.values())
    assert summary["weights"].strip() == f"{weights / 2**20:.2f} MiB in {len(exe.constants)} tensors"
    arena = sum(f["memory"]["arena_bytes"] for f in exe.functions.values())
    assert summary["arena"].strip() == f"{arena / 2**20:.2f} MiB for 4 functions"
    # Two layers, a K and a V cache each of 64 positions x 2 KV heads x 16 (head_dim) float32.
    kv = 4 * 64 * 2 * 16 * 4
    assert summary["KV cache"].strip() == f"{kv / 2**20:.2f} MiB in 4 tensors (64 positions)"
    assert summary["device memory"].strip() == f"{(weights + arena + kv) / 2**20:.2f} MiB in all"
    assert re.fullmatch(r" *\d+\.\d s", summary["time"])


def test_compile_quiet_prints_only_the_result(tiny_gguf, tmp_path):
    result = run("compile", tiny_gguf, "-o", str(tmp_path / "out"), "--context", "64", "--quiet")
    assert result.returncode == 0 and result.stdout == f"{tmp_path / 'out'}\n" and result.stderr == ""
    unknown = run("compile", tiny_gguf, "-o", str(tmp_path / "x"), "--target", "webgpu-f17")
    assert unknown.returncode == 1 and unknown.stderr.startswith("error: unknown target preset 'webgpu-f17'")
    assert "Traceback" not in unknown.stderr


def test_a_plan_that_does_not_fit_names_the_tensor_the_limit_and_the_option(tiny_gguf, tmp_path, monkeypatch, capsys):
    """A target whose buffers are too small for prefill's plan: one line naming the function, the tensor
    (dtype, symbolic shape), its bytes, the limit and the option that fixes it, and no traceback."""
    from dataclasses import replace

    from tessera import cli
    from tessera.target import Target

    webgpu = Target.preset("webgpu")
    small = replace(webgpu, limits=tuple((k, 4096 if k == "maxBufferSize" else v) for k, v in webgpu.limits))
    # Patched on the class, not on a module's `resolve_target`: a module that imports that name while the patch
    # is on (compile_graph, first imported by this test's worker) would keep the small target after the test.
    preset = Target.preset
    monkeypatch.setattr(Target, "preset", staticmethod(lambda name: small if name == "webgpu" else preset(name)))
    assert cli.main(["compile", tiny_gguf, "-o", str(tmp_path / "big"), "--context", "64", "-q"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert re.search(r"^error: function prefill: tensor \w+: float32\[.*\] needs \d+ bytes .* more than the "
                     r"target's maxBufferSize 4096 .*; a context of 64 positions with prefill chunks of \d+ does not "
                     r"fit webgpu: compile with a smaller --prefill-chunk$", err, re.M), err


def test_compile_names_an_architecture_it_does_not_support(tmp_path):
    import gguf
    import numpy as np

    path = str(tmp_path / "phi2.gguf")
    writer = gguf.GGUFWriter(path, "phi2")
    writer.add_tensor("token_embd.weight", np.zeros((8, 32), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    result = run("compile", path, "-o", str(tmp_path / "out"), "-q")
    assert result.returncode == 1 and result.stderr == "error: phi2.gguf: general.architecture is 'phi2', an " \
        "architecture Tessera does not support (supported: llama, qwen2, mistral)\n", result.stderr


def test_progress_on_a_terminal_redraws_one_line_in_place():
    import io
    import pty

    from tessera.app.progress import ProgressBar

    leader, follower = pty.openpty()
    with os.fdopen(follower, "w") as terminal:
        assert ProgressBar(stream=terminal).mode == "tty"
    os.close(leader)
    assert ProgressBar(stream=io.StringIO()).mode == "plain"

    stream = io.StringIO()
    with ProgressBar("tty", stream) as progress:
        progress("legalize_ops", 4, 10)  # tessera.build's contract: called as a step starts, `done` finished
        for done in range(4):
            progress("kernels", done, 4)
    text = stream.getvalue()
    assert "\n" not in text  # every redraw returns to the start of the same line
    assert "\rlegalize_ops [#########---------------] 4/10" in text
    assert "\rkernels [##################------] 3/4" in text
    assert text.endswith("\r\x1b[K")  # cleared, for the summary to start on a clean line

    stream = io.StringIO()
    with ProgressBar("plain", stream) as progress:
        progress("legalize_ops", 4, 10)
        for done in range(4):
            progress("kernels", done, 4)
        progress("vm", 0, 1)
    assert re.fullmatch(r"\[5/10\] legalize_ops \(0\.0 s\)\n\[4/4\] kernels \(0\.0 s\)\nvm \(0\.0 s\)\n", stream.getvalue())


def test_inspect_counts_the_kv_cache_of_a_compiled_model(compiled_tiny):
    _, output = compiled_tiny
    text = run("inspect", output).stdout
    assert "  params: input_ids int32[n], total int64; state: 4 tensors (cache_k_0 ... cache_v_1)" in text
    assert f"KV cache: 4 state tensors, {4 * 64 * 2 * 16 * 4 / 2**20:.2f} MiB" in text
    # 23 weights of the GGUF, less 2 per layer: q, k and v stacked (combine_parallel_matmul).
    assert re.search(r"^weights: 19 tensors, \d+\.\d\d MiB$", text, re.M)


def test_chat_runs_every_build_as_it_runs_a_webgpu_one(compiled_tiny, tiny_gguf, tmp_path):
    """`tessera chat DIR` does not insist on a WebGPU build: the VM picks the device for the build's
    target (wasmtime, Vulkan, OpenCL, this CPU). The tiny model's logits are far apart, so greedy replies agree
    across devices. A Metal build, which no device here runs, stops with one line that says so."""
    _, webgpu = compiled_tiny
    folders = [webgpu]
    for target in ("wasm", "vulkan", "opencl", "cpu", "metal"):
        folder = str(tmp_path / target)
        result = run("compile", tiny_gguf, "-o", folder, "--context", "64", "--target", target, "-q")
        assert result.returncode == 0, result.stderr
        folders.append(folder)
    replies = []
    for folder in folders[:-1]:
        result = run("chat", folder, "--prompt", "Hi", "--temperature", "0", "--max-tokens", "4", "--json")
        assert result.returncode == 0, f"{folder}: {result.stderr}"
        replies.append(json.loads(result.stdout)["reply"])
    assert replies[0] and replies == [replies[0]] * len(replies)
    metal = run("chat", folders[-1], "--prompt", "Hi", "--max-tokens", "4")
    assert metal.returncode == 1 and "Traceback" not in metal.stderr
    assert "no device here runs metal kernels" in metal.stderr


def test_gpu_layers_splits_the_model_and_it_replies_as_the_whole_model(compiled_tiny, tiny_gguf, tmp_path):
    """`tessera compile --gpu-layers 1`: layer 0 on WebGPU, layer 1 and the head on WASM. `tessera chat`
    runs it in the Python VM with the webgpu build's greedy reply; `tessera inspect` shows each device,
    its arena and the one copy a step makes; runtime-native refuses it naming the devices; a count
    past the model's layers or a target that is not a GPU is one clear line."""
    _, webgpu = compiled_tiny
    split = str(tmp_path / "split")
    result = run("compile", tiny_gguf, "-o", split, "--context", "64", "--gpu-layers", "1", "-q")
    assert result.returncode == 0, result.stderr
    replies = [json.loads(run("chat", folder, "--prompt", "Hi", "--temperature", "0", "--max-tokens", "4", "--json",
                              "--runtime", "python").stdout)["reply"] for folder in (webgpu, split)]
    assert replies[0] and replies[1] == replies[0]
    text = run("inspect", split).stdout
    assert "device 0: webgpu:0, webgpu (webgpu, wgsl)" in text and "device 1: wasm:0, wasm (wasm, c-wasm; features shader-f16)" in text
    assert re.search(r"function decode: .*\n.*\n.*\n    on webgpu:0: .*\n    on wasm:0: .*\n"
                     r"  copies between devices: 1 per call", text)
    native = run("chat", split, "--prompt", "Hi", "--max-tokens", "2", "--runtime", "native")
    assert native.returncode == 1 and "Traceback" not in native.stderr
    assert "--runtime native runs a cpu, vulkan, opencl or metal build" in native.stderr
    assert "holds a webgpu build" in native.stderr
    for args, message in ((["--gpu-layers", "3"], "--gpu-layers must be 0 to 2"),
                          (["--gpu-layers", "1", "--target", "wasm"], "wasm is not a GPU target")):
        bad = run("compile", tiny_gguf, "-o", str(tmp_path / "bad"), "--context", "64", *args)
        assert bad.returncode == 1 and message in bad.stderr and "Traceback" not in bad.stderr
