"""`tessera package MODEL --target android|ios -o DIR` on the tiny random-weight Llama: the Gradle project with
the model under assets/, the Swift package with the model as a resource, memory.json equal to the plan the
runtime enforces at load, packaged builds that libtessera loads and chats with (the arm64-v8a CPU build, linked
for bionic, by the AArch64 musl tessera-run under qemu-user; the Vulkan build on lavapipe), and a one-line error
for each bad request."""

import filecmp
import json
import os
import subprocess

import pytest
from native.build import ensure_cross_build, ensure_native_build
from tessera.app.chat import ChatSession, Sampling
from tessera.app.compile import cached_compile
from tessera.app.memory import device_memory
from tessera.cli import main
from tessera.native import NativeError, NativeModel, plan_devices
from tessera.vm import Executable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANDROID_BUILDS = ["vulkan", "cpu-arm64-v8a", "cpu-x86_64"]
ELF_MACHINES = {"cpu-arm64-v8a": 183, "cpu-x86_64": 62}  # e_machine: EM_AARCH64, EM_X86_64
MESSAGES = [{"role": "user", "content": "Hello there"}]


def package(tiny_gguf, target: str, output, *options: str) -> None:
    assert main(["package", tiny_gguf, "--target", target, "-o", str(output), "--context", "64", *options]) == 0


@pytest.fixture(scope="module")
def android(tiny_gguf, tmp_path_factory):
    ensure_native_build()  # memory.json comes from libtessera's plan
    output = tmp_path_factory.mktemp("package") / "android"
    package(tiny_gguf, "android", output)
    return output


@pytest.fixture(scope="module")
def ios(tiny_gguf, tmp_path_factory):
    ensure_native_build()
    output = tmp_path_factory.mktemp("package") / "ios"
    package(tiny_gguf, "ios", output)
    return output


def test_android_is_the_gradle_project_with_the_model_in_its_assets(android):
    for name in ("settings.gradle.kts", "build.gradle.kts", "gradle.properties", "tessera/build.gradle.kts",
                 "tessera/src/main/AndroidManifest.xml", "tessera/src/main/cpp/CMakeLists.txt", "README.md"):
        assert (android / name).is_file(), name
    assert list((android / "tessera/src/main/kotlin/ai/tessera").glob("*.kt"))
    assert not (android / "tessera/src/test").exists() and not (android / "scripts").exists()
    assert not [p for p in android.rglob("*") if p.name in ("build", ".gradle", ".cxx", ".tessera-cache")]
    # runtime-native's sources, without its tests, and the NDK build pointed at them.
    runtime = android / "tessera/src/main/cpp/runtime-native"
    assert (runtime / "CMakeLists.txt").is_file() and (runtime / "src/model.c").is_file()
    assert (runtime / "include/tessera.h").is_file() and not (runtime / "tests").exists()
    assert not list(runtime.rglob("*.o")), "no build outputs of this checkout"
    cmake = (android / "tessera/src/main/cpp/CMakeLists.txt").read_text()
    assert "${CMAKE_CURRENT_SOURCE_DIR}/runtime-native" in cmake and "../runtime-native" not in cmake
    assets = android / "tessera/src/main/assets/tiny"
    manifest = json.loads((assets / "tessera-package.json").read_text())
    assert [b["folder"] for b in manifest["builds"]] == ANDROID_BUILDS
    assert [b.get("abi") for b in manifest["builds"]] == [None, "arm64-v8a", "x86_64"]
    for build in ANDROID_BUILDS:
        for name in ("executable.json", "tensor-cache.json", "tokenizer.json", "chat-config.json", "memory.json"):
            assert (assets / build / name).is_file(), (build, name)
    for build, machine in ELF_MACHINES.items():
        header = (assets / build / "kernels.so").read_bytes()[:20]
        assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == machine, build


def test_ios_is_the_swift_package_with_the_model_as_a_resource(ios):
    header = ios / "Sources/CTessera/include/tessera.h"
    assert header.is_file() and not header.is_symlink()
    assert filecmp.cmp(header, os.path.join(ROOT, "runtime-native/include/tessera.h"), shallow=False)
    package_swift = (ios / "Package.swift").read_text()
    assert '.library(name: "TesseraModel", targets: ["TesseraModel"])' in package_swift
    assert 'resources: [.copy("Resources/tiny")]' in package_swift
    assert (ios / "Sources/TesseraModel/TesseraModel.swift").is_file()
    assert (ios / "runtime-native/src/model.c").is_file()
    assert 'ROOT="$IOS"' in (ios / "scripts/build-xcframework.sh").read_text()
    model = ios / "Sources/TesseraModel/Resources/tiny"
    assert [b["folder"] for b in json.loads((model / "tessera-package.json").read_text())["builds"]] == ["metal"]
    assert (model / "metal/executable.json").is_file() and (model / "metal/memory.json").is_file()
    assert not list(ios.rglob("kernels.so")), "an iOS app cannot load a CPU build's kernels.so"


def test_memory_json_is_the_plan_the_runtime_enforces(android, ios):
    folders = [android / "tessera/src/main/assets/tiny" / b for b in ANDROID_BUILDS]
    folders.append(ios / "Sources/TesseraModel/Resources/tiny/metal")
    for folder in folders:
        memory = json.loads((folder / "memory.json").read_text())
        rows = plan_devices(str(folder))
        assert memory["devices"] == [{k: r[k] for k in ("device", "weights", "arena", "kv_cache", "total")}
                                     for r in rows]
        assert memory["total"] == sum(r["total"] for r in rows)
        # The compiler's own plan of the same executable agrees (a build on one device).
        assert memory["total"] == device_memory(Executable.load(str(folder))).total, folder


def test_the_packaged_builds_load_chat_and_are_refused_past_their_memory(tiny_gguf, android, tmp_path):
    assets = android / "tessera/src/main/assets/tiny"
    # The reference: the Python VM's greedy reply on a CPU build of this machine.
    want = ChatSession(cached_compile(tiny_gguf, "cpu-x86-64-v2", 64)).reply(MESSAGES, 6, Sampling(temperature=0.0))
    # The phone's CPU build: its kernels are linked for bionic (libc.so, libm.so), so glibc's loader cannot take
    # them; the AArch64 musl build of tessera-run can, under qemu-user, with no glibc in the process.
    build, qemu = ensure_cross_build("musl", "tessera-run")
    run = subprocess.run([*qemu, os.path.join(build, "tessera-run"), str(assets / "cpu-arm64-v8a"), "--prompt",
                          MESSAGES[0]["content"], "--max-tokens", "6", "--temperature", "0", "--threads", "1",
                          "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1])["reply"] == want["reply"]
    vulkan = str(assets / "vulkan")
    with NativeModel(vulkan, n_threads=2, device="vulkan", cache_dir=str(tmp_path)) as model:
        assert model.device_description.startswith("vulkan")
        assert model.session().chat(MESSAGES, max_tokens=6)["completion_tokens"] > 0
    total = json.loads((assets / "vulkan/memory.json").read_text())["total"]
    with pytest.raises(NativeError, match="model needs .* but only .* is available \\(memory_limit\\)"):
        NativeModel(vulkan, n_threads=1, device="vulkan", cache_dir=str(tmp_path), memory_limit=total - 1)
    NativeModel(vulkan, n_threads=1, device="vulkan", cache_dir=str(tmp_path), memory_limit=total).close()


def test_a_split_package_is_one_build_on_vulkan_and_a_phones_cpu(tiny_gguf, tmp_path):
    ensure_native_build()
    package(tiny_gguf, "android", tmp_path / "split", "--gpu-layers", "1")
    assets = tmp_path / "split/tessera/src/main/assets/tiny"
    assert [(b["folder"], b["abi"]) for b in json.loads((assets / "tessera-package.json").read_text())["builds"]] == \
        [("vulkan-gpu1", "arm64-v8a")]
    memory = json.loads((assets / "vulkan-gpu1/memory.json").read_text())
    assert [d["device"] for d in memory["devices"]] == ["vulkan", "cpu"]
    # Its CPU half is arm64-v8a machine code for bionic, not this machine's: no runtime here has both a Vulkan
    # loader and that CPU, so the split runs on a phone only (the split itself is checked by the conformance
    # suite's vulkan+cpu builds, and the CPU half's kernels by its cpu-android-aarch64 folders).
    header = (assets / "vulkan-gpu1/cpu-android-arm64-v8a_0/kernels.so").read_bytes()[:20]
    assert int.from_bytes(header[18:20], "little") == ELF_MACHINES["cpu-arm64-v8a"]


def test_force_replaces_a_package_and_nothing_else(tiny_gguf, tmp_path, capsys):
    output = tmp_path / "out"
    package(tiny_gguf, "ios", output)
    assert main(["package", tiny_gguf, "--target", "ios", "-o", str(output)]) == 1
    assert "is not empty" in capsys.readouterr().err
    (output / "Sources/TesseraModel/Resources/tiny/stale").write_text("")
    package(tiny_gguf, "ios", output, "--force")
    assert not (output / "Sources/TesseraModel/Resources/tiny/stale").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["package", tiny_gguf, "--target", "ios", "-o", str(other), "--force"]) == 1
    assert "no package of tessera package" in capsys.readouterr().err and (other / "notes.txt").exists()


@pytest.mark.parametrize("arguments, message", [
    (["--target", "web"], "unknown --target 'web': tessera package writes android or ios"),
    (["--target", "ios", "--gpu-layers", "1"], "an iOS app cannot load a CPU build's kernels.so"),
    (["--target", "android", "--split"], "--split needs --gpu-layers N"),
    (["--target", "android", "--whole", "--gpu-layers", "1"], "it does not go with --whole"),
    (["--target", "android", "--gpu-layers", "9"], "--gpu-layers must be 0 to 2"),
])
def test_a_bad_request_is_one_line(tiny_gguf, tmp_path, capsys, arguments, message):
    assert main(["package", tiny_gguf, "-o", str(tmp_path / "out"), "--context", "64", *arguments]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_a_missing_model_is_named(tmp_path, capsys):
    assert main(["package", str(tmp_path / "nope.gguf"), "--target", "android", "-o", str(tmp_path / "out")]) == 1
    assert f"no GGUF file at {tmp_path / 'nope.gguf'}" in capsys.readouterr().err


def test_an_installation_without_the_mobile_sources_is_refused_before_anything_is_written(tiny_gguf, tmp_path,
                                                                                           monkeypatch, capsys):
    from tessera.app import package as package_module

    monkeypatch.setattr(package_module, "ROOT", tmp_path / "site-packages")  # a wheel: no mobile/, no runtime-native/
    output = tmp_path / "out"
    output.mkdir()
    (output / "tessera-package.json").write_text("{}")  # a package --force would replace
    for target in ("android", "ios"):
        assert main(["package", tiny_gguf, "--target", target, "-o", str(output), "--force"]) == 1
        error = capsys.readouterr().err
        assert "copies the" in error and "runtime-native/include/tessera.h" in error and "Traceback" not in error
    assert (output / "tessera-package.json").is_file()  # untouched


def test_without_libtessera_memory_json_is_the_compilers_plan_and_a_split_is_refused(tiny_gguf, ios, tmp_path,
                                                                                    monkeypatch, capsys):
    monkeypatch.setenv("TESSERA_NATIVE_LIB", str(tmp_path / "missing" / "libtessera.so"))
    package(tiny_gguf, "ios", tmp_path / "ios")
    metal = "Sources/TesseraModel/Resources/tiny/metal/memory.json"
    without = json.loads((tmp_path / "ios" / metal).read_text())
    assert without["plan"] == "tessera.app.memory"
    assert without["devices"] == json.loads((ios / metal).read_text())["devices"]
    assert main(["package", tiny_gguf, "--target", "android", "-o", str(tmp_path / "split"), "--context", "64",
                 "--gpu-layers", "1"]) == 1
    assert "the memory plan of a split build needs libtessera (make native)" in capsys.readouterr().err
    assert not (tmp_path / "split").exists()
