"""runtime-native on its GPU devices (Vulkan: Mesa's lavapipe here; OpenCL: PoCL here), through its C
API (tessera.native) and tessera-run.

SmolLM2 token for token: the greedy reply runtime-native gives equals the Python VM's on the same
build and the same kind of device, for a vulkan build, an opencl build, and each split by
`--gpu-layers 15` (the first 15 decoder layers on the GPU, the rest and the head on the CPU). Eight
tokens each: SmolLM2 on lavapipe or PoCL takes about 1 s a token on two cores, in each runtime. The
compiled folders are cached as `tessera chat` caches them (~/.cache/tessera, keyed by the compiler).

Then, on the tiny random-weight Llama: the pipeline cache (a second load reads what the first wrote;
a damaged cache file is ignored with one warning and rebuilt) and tessera-run's --device; and
tessera-conformance's --device on a conformance case of each GPU device (one split).

Vulkan runs under the Khronos validation layer (tests/conftest.py sets TESSERA_VULKAN_VALIDATION=1):
any message fails the next device operation with TESSERA_ERROR_DEVICE."""

import glob
import json
import os
import subprocess

import pytest
from tessera.app.chat import ChatSession, NativeChatSession, Sampling
from tessera.native import NativeModel

from native.build import ensure_native_build

CONTEXT = 128
STEPS = 8
QUESTION = [{"role": "user", "content": "Write a haiku about the sea."}]
GREEDY = Sampling(temperature=0.0)
# name -> (target, --gpu-layers): the runtime-native device is the target's kind.
SMOLLM2_BUILDS = {"vulkan": ("vulkan", None), "opencl": ("opencl", None),
                  "vulkan-gpu15": ("vulkan", 15), "opencl-gpu15": ("opencl", 15)}


@pytest.fixture(scope="module")
def build():
    return ensure_native_build()


@pytest.mark.parametrize("name", sorted(SMOLLM2_BUILDS))
def test_smollm2_replies_as_the_python_vm_on_the_same_device(build, name, tmp_path):
    from tessera.app.compile import cached_compile
    from tessera.frontend import bundled_smollm2_path

    target, gpu_layers = SMOLLM2_BUILDS[name]
    folder = cached_compile(bundled_smollm2_path(), target, CONTEXT, gpu_layers=gpu_layers)
    native = NativeChatSession(folder, n_threads=2, device=target)
    assert native.model.device_description.startswith(target), native.model.device_description
    got = native.reply(QUESTION, STEPS, GREEDY)
    want = ChatSession(folder).reply(QUESTION, STEPS, GREEDY)
    assert got["completion_tokens"] == want["completion_tokens"] == STEPS  # no reply ends before: a haiku is long
    assert got["reply"] == want["reply"], (name, got["reply"], want["reply"])


# ---- the tiny Llama: caches and tessera-run ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tiny_gguf, tmp_path_factory):
    from tessera.app.compile import compile_model

    root = tmp_path_factory.mktemp("native-gpu")
    return {kind: compile_model(tiny_gguf, str(root / kind), kind, 64).directory for kind in ("cpu", "vulkan", "opencl")}


def tessera_run(build, *args):
    return subprocess.run([os.path.join(build, "tessera-run"), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def python_reply(folder: str) -> str:
    return ChatSession(folder).reply([{"role": "user", "content": "Hi"}], 4, GREEDY)["reply"]


CACHE_FILES = {"vulkan": "vulkan-*.pipelines", "opencl": "opencl-*.bin"}


@pytest.mark.parametrize("kind", ["vulkan", "opencl"])
def test_tessera_run_names_the_device_and_answers_as_the_python_vm(build, tiny, kind, tmp_path):
    run = tessera_run(build, tiny[kind], "--device", kind, "--cache-dir", tmp_path, "--prompt", "Hi",
                      "--max-tokens", 4, "--json")
    assert run.returncode == 0, run.stderr
    first = run.stderr.splitlines()[0]
    assert first.startswith(f"device: {kind} (") and f"target {kind}" in first, first
    assert json.loads(run.stdout)["reply"] == python_reply(tiny[kind])
    assert glob.glob(str(tmp_path / CACHE_FILES[kind])), os.listdir(tmp_path)  # what the next load reads


@pytest.mark.parametrize("kind", ["vulkan", "opencl"])
def test_a_second_load_reads_the_cache_the_first_wrote(build, tiny, kind, tmp_path):
    """The first load compiles every pipeline (program) and saves them; the second reads them back,
    counted by tessera_model_compile_stats. OpenCL: the second load builds no program from source.
    Vulkan: every pipeline is created through the cache, and the driver says which it found there; Mesa
    22.3's lavapipe keeps no pipeline binaries (its cache file is a header), so it compiles them all again
    here: the count is the driver's word, not assumed. bench/native.py records both load times."""
    replies, stats = [], []
    for _ in range(2):
        model = NativeModel(tiny[kind], n_threads=2, device=kind, cache_dir=str(tmp_path))
        stats.append(model.compile_stats())
        replies.append(model.session().chat([{"role": "user", "content": "Hi"}], max_tokens=4)["reply"])
        model.close()
        if len(stats) == 1:
            written = {path: os.path.getmtime(path) for path in glob.glob(str(tmp_path / CACHE_FILES[kind]))}
            assert written
    assert replies[0] == replies[1]
    assert {path: os.path.getmtime(path) for path in written} == written, "the second load rewrote nothing"
    first, second = stats
    assert first["kernels"] == second["kernels"] > 0
    assert first["compiled"] == first["kernels"] and first["from_cache"] == 0, first
    assert second["compiled"] + second["from_cache"] == second["kernels"], second
    if kind == "opencl":
        assert second["from_cache"] == second["kernels"] and second["compiled"] == 0, second
    else:
        assert first["shader_modules"] == first["kernels"], first  # one module per SPIR-V kernel


@pytest.mark.parametrize("kind", ["vulkan", "opencl"])
def test_a_damaged_cache_file_is_ignored_with_a_warning_and_rebuilt(build, tiny, kind, tmp_path):
    args = (tiny[kind], "--device", kind, "--cache-dir", tmp_path, "--prompt", "Hi", "--max-tokens", 4, "--json")
    first = tessera_run(build, *args)
    assert first.returncode == 0 and "warning" not in first.stderr, first.stderr
    files = glob.glob(str(tmp_path / CACHE_FILES[kind]))
    for path in files:
        with open(path, "wb") as f:
            f.write(b"not a cache " * 3)
    damaged = tessera_run(build, *args)
    assert damaged.returncode == 0, damaged.stderr
    warnings = [line for line in damaged.stderr.splitlines() if line.startswith("tessera: warning: ")]
    assert warnings and all("rebuilding it" in line for line in warnings), damaged.stderr
    assert json.loads(damaged.stdout)["reply"] == json.loads(first.stdout)["reply"]
    again = tessera_run(build, *args)
    assert again.returncode == 0 and "warning" not in again.stderr, again.stderr


@pytest.mark.parametrize("kind,device,message", [
    ("vulkan", "vulkan:9", "there is no usable device vulkan:9"),
    ("cpu", "vulkan", "the vulkan device does not run it: compile the model with --target vulkan"),
    ("opencl", "vulkan", "the vulkan device does not run it: compile the model with --target vulkan"),
    ("vulkan", "gpu", "device 'gpu' is not in this build of libtessera"),
], ids=["absent-device", "cpu-build", "opencl-build", "unknown-name"])
def test_tessera_run_refuses_a_device_in_one_line(build, tiny, kind, device, message):
    run = tessera_run(build, tiny[kind], "--device", device, "--prompt", "Hi")
    assert run.returncode == 1 and run.stderr.startswith("error: ") and len(run.stderr.splitlines()) == 1, run.stderr
    assert message in run.stderr


def test_a_feature_the_device_lacks_is_refused_by_name(build, tiny, tmp_path):
    """executable.json's required_features is checked against what the device offers (executable.json
    is not hashed; each module is, so the kernels are untouched)."""
    import shutil

    folder = tmp_path / "needs-more"
    shutil.copytree(tiny["vulkan"], folder)
    path = folder / "executable.json"
    doc = json.loads(path.read_text())
    doc["required_features"] = ["tessera-test-absent-feature"]
    path.write_text(json.dumps(doc))
    run = tessera_run(build, folder, "--device", "vulkan", "--prompt", "Hi")
    assert run.returncode == 1 and "lacks feature 'tessera-test-absent-feature'" in run.stderr, run.stderr


@pytest.mark.parametrize("target,case,device", [("vulkan", "llama-gqa-2x", "vulkan"),
                                                ("opencl+cpu", "llama-mha-split", "opencl")])
def test_tessera_conformance_runs_a_case_on_the_device_named(build, target, case, device, tmp_path):
    """tools/tessera-conformance --device (the path a phone takes, where Python cannot load the library):
    its outputs, judged by caseio's one rule, as every adapter's."""
    from conformance.caseio import check_case, read_array
    from conformance.generate import DEFAULT_ROOT, generate

    generate(DEFAULT_ROOT, cases=[case], targets=[target])
    folder = os.path.join(DEFAULT_ROOT, target, case)
    run = subprocess.run([os.path.join(build, "tessera-conformance"), folder, str(tmp_path), "--device", device],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stderr.startswith(f"device: {device} ("), run.stderr
    with open(tmp_path / "results.json", encoding="utf-8") as f:
        calls = iter(json.load(f)["calls"])

    def replay(_folder):
        def call(function, args):
            result = next(calls)
            if "error" in result:
                raise RuntimeError(result["error"])
            outputs = [read_array(str(tmp_path), entry) for entry in result["outputs"]]
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        return call

    report = check_case(folder, replay)
    assert report.passed, report.line()


def test_memory_per_device_is_known_before_loading_and_matches_after(build, tiny_gguf, tiny, tmp_path):
    """tessera.native.plan_devices (tessera_model_plan_devices) from the files alone, and a loaded model's
    memory_devices: one entry for a vulkan build, the GPU's and the CPU's for a split build."""
    from tessera.app.compile import compile_model
    from tessera.native import plan_devices

    split = compile_model(tiny_gguf, str(tmp_path / "split"), "vulkan", 64, gpu_layers=1).directory
    for folder, kinds in ((tiny["vulkan"], ["vulkan"]), (tiny["opencl"], ["opencl"]), (split, ["vulkan", "cpu"])):
        planned = plan_devices(folder)
        assert [row["device"] for row in planned] == kinds
        model = NativeModel(folder, n_threads=2)
        assert model.memory_devices() == planned
        assert all(row["total"] == row["weights"] + row["arena"] + row["kv_cache"] for row in planned)
        whole = model.memory()
        assert sum(row["kv_cache"] for row in planned) == whole["kv_cache"]
        assert sum(row["arena"] for row in planned) == whole["arena"]
