"""`tessera chat --device` and `tessera serve --device native:NAME` (docs/cli.md): a vulkan or opencl
build runs on runtime-native's GPU device (lavapipe, PoCL on this machine) and says which device and
why; every bad choice is one line (`error: ...`, status 1), never a traceback: a device name that
runtime-native lacks, a device this machine lacks, a build of another kind, a feature the device lacks."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from native.build import ensure_native_build
from tessera.app.chat import ChatSession, Sampling

CONTEXT = 64
GREEDY = ["--temperature", "0", "--max-tokens", "4", "--prompt", "Hi"]


@pytest.fixture(scope="module")
def builds(tiny_gguf, tmp_path_factory):
    """The tiny Llama compiled for each kind runtime-native runs, and for WASM (a kind it does not)."""
    from tessera.app.compile import compile_model

    ensure_native_build()
    root = tmp_path_factory.mktemp("native-devices")
    builds = {kind: compile_model(tiny_gguf, str(root / kind), kind, CONTEXT).directory
              for kind in ("cpu", "vulkan", "opencl", "wasm")}
    builds["vulkan-split"] = compile_model(tiny_gguf, str(root / "vulkan-split"), "vulkan", CONTEXT,
                                           gpu_layers=1).directory
    return builds


def tessera(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "tessera.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def one_line_error(result, *needles):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert lines[-1].startswith("error: ") and all(n in lines[-1] for n in needles), lines[-1]


def python_vm_reply(folder: str) -> str:
    return ChatSession(folder).reply([{"role": "user", "content": "Hi"}], 4, Sampling(temperature=0.0))["reply"]


@pytest.mark.parametrize("build,args,label", [
    ("vulkan", ["--runtime", "native"], "using the native Vulkan build: --runtime native"),
    ("vulkan", ["--device", "vulkan:0"], "using the native Vulkan build: --device vulkan:0"),
    ("opencl", ["--device", "opencl"], "using the native OpenCL build: --device opencl"),
    ("vulkan-split", ["--device", "vulkan"], "using the native Vulkan build: --device vulkan"),
])
def test_chat_runs_a_gpu_build_on_runtime_natives_device_and_says_which(builds, build, args, label):
    kind = build.split("-")[0]
    result = tessera("chat", builds[build], *args, *GREEDY)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == label
    assert lines[1].startswith(f"device: {kind}") and f"target {kind}" in lines[1], lines[1]
    if build.endswith("split"):  # the GPU device beside the CPU's
        assert " + cpu (" in lines[1], lines[1]
    # The same greedy reply as the Python VM's on the same build (and device kind).
    assert result.stdout.strip() == python_vm_reply(builds[build]).strip()


def test_chat_compiles_a_gguf_for_the_named_devices_target(tiny_gguf, builds, tmp_path):
    env = dict(os.environ, TESSERA_CACHE=str(tmp_path / "cache"))
    result = tessera("chat", tiny_gguf, "--device", "vulkan", "--context", CONTEXT, *GREEDY, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("using the native Vulkan build: --device vulkan\n")
    assert [name for name in os.listdir(tmp_path / "cache") if name.endswith(f"-vulkan-ctx{CONTEXT}")]


def test_a_missing_feature_is_one_line(builds, tmp_path):
    """executable.json's required_features (not hashed: each module is) asks for what no device has."""
    folder = tmp_path / "needs-more"
    shutil.copytree(builds["vulkan"], folder)
    path = folder / "executable.json"
    doc = json.loads(path.read_text())
    doc["required_features"] = ["tessera-test-absent-feature"]
    path.write_text(json.dumps(doc))
    one_line_error(tessera("chat", folder, "--device", "vulkan", *GREEDY), "lacks feature 'tessera-test-absent-feature'")


@pytest.mark.parametrize("kind,args,needles", [
    ("cpu", ["--device", "gpu"], ["--device gpu: runtime-native's devices are auto, cpu, vulkan, opencl"]),
    ("cpu", ["--device", "vulkan:x"], ["--device vulkan:x"]),
    ("vulkan", ["--device", "vulkan:9"], ["vulkan:9"]),
    ("cpu", ["--device", "vulkan"], ["--device vulkan runs a vulkan build;", "holds a cpu build"]),
    ("opencl", ["--device", "vulkan"], ["--device vulkan runs a vulkan build;", "holds a opencl build"]),
    ("wasm", ["--runtime", "native"], ["--runtime native runs a cpu, vulkan, opencl or metal build", "wasm build"]),
    ("vulkan", ["--runtime", "python", "--device", "vulkan"], ["names a device of runtime-native"]),
], ids=["unknown-name", "bad-index", "absent-device", "cpu-build", "opencl-build", "wasm-build", "python-vm"])
def test_chat_refuses_a_bad_device_in_one_line(builds, kind, args, needles):
    one_line_error(tessera("chat", builds[kind], *args, *GREEDY), *needles)


def test_serve_opens_a_gpu_build_on_runtime_native(builds, tiny_gguf, tmp_path, monkeypatch):
    from tessera.app.chat import NativeChatSession
    from tessera.app.serve import open_model

    for kind, device in (("vulkan", "native"), ("vulkan", "native:vulkan"), ("opencl", "native:opencl")):
        said = []
        session, name = open_model(builds[kind], device, say=said.append)
        assert isinstance(session, NativeChatSession) and name == kind
        assert said[0] == f"using the native {'Vulkan' if kind == 'vulkan' else 'OpenCL'} build: --device {device}"
        assert said[1].startswith(f"device: {kind}")
    monkeypatch.setenv("TESSERA_CACHE", str(tmp_path / "cache"))  # a GGUF is compiled for the device's target
    said = []
    session, name = open_model(tiny_gguf, "native:opencl", CONTEXT, say=said.append)
    assert isinstance(session, NativeChatSession) and said[0].startswith("compiling tiny.gguf for opencl")
    assert said[1:] and said[-1].startswith("device: opencl")


@pytest.mark.parametrize("kind,device,needles", [
    ("cpu", "native:gpu", ["--device native:gpu: runtime-native's devices are"]),
    ("cpu", "gpu", ["unknown --device 'gpu'", "native:NAME"]),
    ("cpu", "native:vulkan", ["--device native:vulkan runs a vulkan build;", "holds a cpu build"]),
    ("wasm", "native", ["--device native runs a cpu, vulkan, opencl or metal build", "wasm build"]),
    ("vulkan", "native:vulkan:9", ["vulkan:9"]),
], ids=["unknown-name", "unknown-device", "cpu-build", "wasm-build", "absent-device"])
def test_serve_refuses_a_bad_device_in_one_line(builds, kind, device, needles):
    one_line_error(tessera("serve", builds[kind], "--device", device, "--port", "0"), *needles)
