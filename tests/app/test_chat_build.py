"""Which build `tessera chat` runs, and the line that says why: the decision from adapter facts and
what is built, then the real command on this machine."""

import os
import subprocess
import sys

from tessera.app.chat_build import Adapter, ChatBuild, choose_chat_build, native_runtime_problem, webgpu_adapters

LLVMPIPE = Adapter("llvmpipe (LLVM 15.0.6, 256 bits)", cpu=True)
GPU = Adapter("NVIDIA GeForce RTX 4090", cpu=False)
NOT_BUILT = "the native runtime is not built (`make native` builds it)"


def test_a_cpu_only_adapter_picks_the_native_cpu_build():
    choice = choose_chat_build([LLVMPIPE, LLVMPIPE], None)  # wgpu lists llvmpipe on Vulkan and on OpenGL
    assert choice == ChatBuild("native", "cpu", "the only WebGPU adapter is llvmpipe (LLVM 15.0.6, 256 bits), "
                                                "a software renderer")
    assert choice.describe() == ("using the native CPU build: the only WebGPU adapter is llvmpipe (LLVM 15.0.6, "
                                 "256 bits), a software renderer")
    assert choose_chat_build([], None) == ChatBuild("native", "cpu", "there is no WebGPU adapter")
    two = choose_chat_build([LLVMPIPE, Adapter("SwiftShader Device", cpu=True)], None)
    assert two.runtime == "native" and "are software renderers" in two.reason


def test_a_gpu_keeps_webgpu():
    assert choose_chat_build([LLVMPIPE, GPU], None) == ChatBuild(
        "python", "llvmpipe", "the WebGPU adapter NVIDIA GeForce RTX 4090 is a GPU")


def test_without_the_native_runtime_it_is_todays_choice_and_says_so():
    choice = choose_chat_build([LLVMPIPE], NOT_BUILT)
    assert (choice.runtime, choice.target) == ("python", "llvmpipe")
    assert choice.describe() == ("using the Python VM with the WebGPU build: the only WebGPU adapter is llvmpipe "
                                 "(LLVM 15.0.6, 256 bits), a software renderer, but the native runtime is not built "
                                 "(`make native` builds it)")


def test_an_explicit_runtime_wins():
    assert choose_chat_build([LLVMPIPE], None, runtime="python") == ChatBuild("python", "llvmpipe", "--runtime python")
    assert choose_chat_build([GPU], NOT_BUILT, runtime="native") == ChatBuild("native", "cpu", "--runtime native")
    assert choose_chat_build([], None, runtime="python", directory_target="cpu").runtime == "python"


def test_a_compiled_directory_runs_what_it_holds():
    assert choose_chat_build([], None, directory_target="cpu") == ChatBuild(
        "native", "cpu", "the directory holds a cpu build")
    assert choose_chat_build([], NOT_BUILT, directory_target="cpu").runtime == "python"
    no_format = choose_chat_build([], None, directory_target="cpu", native_chat_format=False)
    assert no_format.runtime == "python" and "no chat_format" in no_format.reason
    assert choose_chat_build([], None, directory_target="webgpu") == ChatBuild(
        "python", "webgpu", "the directory holds a webgpu build")


def test_tessera_chat_on_this_machine_runs_the_build_the_decision_picks(tiny_gguf, tmp_path):
    """The real command, without --runtime: its first line is the decision for this machine's adapters
    and native library, and the chat replies. On a machine whose only adapter is llvmpipe and with
    `make native` done (this project's CI machine), that is the native CPU build."""
    adapters, problem = webgpu_adapters(), native_runtime_problem()
    expected = choose_chat_build(adapters, problem)
    env = dict(os.environ, TESSERA_CACHE=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-m", "tessera.cli", "chat", tiny_gguf, "--prompt", "Hi", "--temperature",
                             "0", "--max-tokens", "4", "--context", "64"], capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == expected.describe()
    assert result.stdout.strip(), "a reply"
    if adapters and all(a.cpu for a in adapters) and problem is None:
        assert expected.runtime == "native"
        assert result.stderr.startswith("using the native CPU build: the only WebGPU adapter is llvmpipe")
        assert [name for name in os.listdir(tmp_path / "cache") if name.endswith("-cpu-ctx64")]
