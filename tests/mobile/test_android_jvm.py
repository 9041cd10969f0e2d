"""The Android library's JVM tests (mobile/android/tessera/src/test/kotlin, JUnit 4), run on this host: the
Kotlin API and its JNI bridge built by mobile/android/scripts/build-host.sh against build/native/release.

pytest prepares what the JVM cannot make itself and passes it as files in one folder (-Dtessera.test.data,
read by TestData.kt): compiled models (the tiny random-weight Llama and SmolLM2, each for the cpu and the
vulkan target; Vulkan is lavapipe here), the Python VM's greedy replies to compare with, the C plan of each
model's memory, damaged copies of a model, and conformance cases' inputs. Each JUnit class runs in a JVM of
its own, under -Xcheck:jni: a "WARNING in native method" on stderr fails the test as a failed assertion
would. What the JVM writes back (Module.run's outputs, the RSS of the load/chat/close cycles) is checked here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time

import numpy as np
import pytest
from conformance.caseio import compare, read_array, read_case
from native.build import ensure_native_build
from tessera.app.chat import ChatSession, Sampling

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_SCRIPT = os.path.join(ROOT, "mobile", "android", "scripts", "build-host.sh")
HOST = os.path.join(ROOT, "build", "android-host")
GREEDY = Sampling(temperature=0.0)
# The conversation every chat test sends (TestData.MESSAGES in Kotlin is the same).
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello there"}]
# A character outside the BMP (four UTF-8 bytes, which JNI's modified UTF-8 would mangle) and accents
# (TestData.UNICODE_MESSAGES in Kotlin is the same).
UNICODE_MESSAGES = [{"role": "user", "content": "Sea \U0001F30A and sky, na\u00efve caf\u00e9"}]
# name -> (model, target, context, reply tokens). SmolLM2 on lavapipe takes about 1 s a token in each runtime.
CHAT_MODELS = {"tiny-cpu": ("tiny", "cpu", 64, 12), "tiny-vulkan": ("tiny", "vulkan", 64, 8),
               "smollm2-cpu": ("smollm2", "cpu", 128, 6), "smollm2-vulkan": ("smollm2", "vulkan", 128, 4)}
# Non-LLM conformance cases Module.run must answer: the CNN, a GEMM, a convolution, int32 inputs and
# seven outputs (layout), and a 0-d output beside int32 ones (reductions).
MODULE_CASES = ["cnn-mobilenet", "gemm", "conv-pool", "layout", "reductions"]
RSS_GROWTH_LIMIT_KIB = 8 * 1024


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


@pytest.fixture(scope="module")
def classpath():
    """build-host.sh's outputs (it rebuilds only what changed), after the release build it links."""
    ensure_native_build()
    start = time.perf_counter()
    result = subprocess.run(["bash", BUILD_SCRIPT], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    print(f"build-host.sh: {time.perf_counter() - start:.1f} s\n{result.stdout}")
    with open(os.path.join(HOST, "test.classpath"), encoding="utf-8") as f:
        return f.read().strip()


@pytest.fixture(scope="module")
def java(classpath):
    """The java of the JDK build-host.sh compiled against."""
    with open(os.path.join(HOST, "test.java"), encoding="utf-8") as f:
        return f.read().strip()


def compiled(tiny_gguf: str, model: str, target: str, context: int) -> str:
    from tessera.app.compile import cached_compile
    from tessera.frontend import bundled_smollm2_path

    return cached_compile(tiny_gguf if model == "tiny" else bundled_smollm2_path(), target, context)


@pytest.fixture(scope="module")
def data(tiny_gguf, tmp_path_factory):
    """The folder the JVM tests read (see TestData.kt for its layout)."""
    from tessera.app.memory import device_memory
    from tessera.native import plan_devices
    from tessera.vm import Executable

    root = str(tmp_path_factory.mktemp("android-jvm"))
    for name, (model, target, context, tokens) in CHAT_MODELS.items():
        folder = compiled(tiny_gguf, model, target, context)
        want = ChatSession(folder).reply(MESSAGES, tokens, GREEDY)
        base = os.path.join(root, "chat", name)
        write(os.path.join(base, "dir"), folder)
        write(os.path.join(base, "device"), target)
        write(os.path.join(base, "max_tokens"), str(tokens))
        write(os.path.join(base, "reply"), want["reply"])
        write(os.path.join(base, "prompt_tokens"), str(want["prompt_tokens"]))
        write(os.path.join(base, "completion_tokens"), str(want["completion_tokens"]))
        plan = plan_devices(folder)
        write(os.path.join(base, "plan"), "".join(f"{d['device']} {d['weights']} {d['arena']} {d['kv_cache']} "
                                                  f"{d['total']}\n" for d in plan))
        # The C plan that EngineTest compares Engine.memory with is the Python plan (tessera.app.memory).
        python = device_memory(Executable.load(folder))
        assert [(d["weights"], d["arena"], d["kv_cache"]) for d in plan] == \
            [(python.weights, python.arena, python.kv_cache)], (name, plan, python)
    tiny = read_text(root, "chat/tiny-cpu/dir")
    unicode = ChatSession(tiny).reply(UNICODE_MESSAGES, CHAT_MODELS["tiny-cpu"][3], GREEDY)
    write(os.path.join(root, "unicode", "reply"), unicode["reply"])
    write(os.path.join(root, "unicode", "prompt_tokens"), str(unicode["prompt_tokens"]))
    write_stop_case(root)
    write_damaged_models(root)
    write_module_cases(root)
    write_named_module(root)
    os.makedirs(os.path.join(root, "out"))
    return root


def write_stop_case(root: str) -> None:
    """A stop string from the middle of tiny-cpu's greedy reply: the reply must end right before it."""
    reply = read_text(root, "chat/tiny-cpu/reply")
    assert len(reply) >= 4, f"the tiny model's reply is too short to cut: {reply!r}"
    stop = reply[len(reply) // 2:len(reply) // 2 + 2]
    write(os.path.join(root, "stop", "stop"), stop)
    write(os.path.join(root, "stop", "reply"), reply[:reply.index(stop)])


def write_damaged_models(root: str) -> None:
    """Copies of the tiny cpu build, each broken one way, with words the runtime's message must contain."""
    source = read_text(root, "chat/tiny-cpu/dir")

    def damaged(name: str, words: list[str], damage) -> None:
        folder = os.path.join(root, "damaged", name, "model")
        shutil.copytree(source, folder, ignore=shutil.ignore_patterns(".tessera-cache"))
        damage(folder)
        write(os.path.join(root, "damaged", name, "dir"), folder)
        write(os.path.join(root, "damaged", name, "words"), "\n".join(words))

    def truncate(folder):
        shard = os.path.join(folder, "params_shard_0.bin")
        with open(shard, "r+b") as f:
            f.truncate(os.path.getsize(shard) - 10)

    def break_json(folder):
        with open(os.path.join(folder, "executable.json"), "w") as f:
            f.write('{"format": "tessera-executable", "version": 3, "functions": [')

    damaged("truncated-shard", ["params_shard_0.bin", "truncated"], truncate)
    damaged("broken-executable-json", ["executable.json"], break_json)
    missing = os.path.join(root, "damaged", "missing", "model")
    write(os.path.join(root, "damaged", "missing", "dir"), missing)
    write(os.path.join(root, "damaged", "missing", "words"), f"{missing}\nNo such file or directory")


def write_module_cases(root: str) -> None:
    """Each case's folder (copied: GPU caches and the JVM's writes stay out of build/conformance) and, per
    call, its inputs as raw little-endian files listed in inputs.txt: `NAME DTYPE DIMS FILE` per line, DIMS
    comma-separated (`-` for a 0-d tensor), NAME the function's parameter name in executable.json."""
    from conformance.generate import DEFAULT_ROOT, generate

    generate(DEFAULT_ROOT, cases=MODULE_CASES, targets=["cpu"], log=lambda line: None)
    for case in MODULE_CASES:
        source = os.path.join(DEFAULT_ROOT, "cpu", case)
        base = os.path.join(root, "module", case)
        shutil.copytree(source, os.path.join(base, "model"))
        record = read_case(source)
        with open(os.path.join(source, "executable.json"), encoding="utf-8") as f:
            functions = json.load(f)["functions"]
        write(os.path.join(base, "dir"), os.path.join(base, "model"))
        write(os.path.join(base, "calls"), str(len(record["calls"])))
        for index, call in enumerate(record["calls"]):
            params = [p["name"] for p in functions[call["function"]]["params"] if not p.get("state")]
            assert len(params) == len(call["args"]) and all("data" in a for a in call["args"]), case
            lines = []
            for name, entry in zip(params, call["args"]):
                array = read_array(source, entry)
                file = f"in-{name}.bin"
                os.makedirs(os.path.join(base, f"call{index}"), exist_ok=True)
                array.astype(array.dtype.newbyteorder("<")).tofile(os.path.join(base, f"call{index}", file))
                lines.append(f"{name} {array.dtype.name} {dims(array.shape)} {file}\n")
            write(os.path.join(base, f"call{index}", "function"), call["function"])
            write(os.path.join(base, f"call{index}", "inputs.txt"), "".join(lines))


def write_named_module(root: str) -> None:
    """named/dir: main(x0: (n, 4), x1: (n, 4)) -> (sum, (product, difference)) for the cpu, n at most 8, its
    output names recorded as an importer records them (ModuleTest reads them through the C API)."""
    import tessera
    from conformance.cases import one_function
    from tessera import op
    from tessera.ir import Tensor, Tuple
    from tessera.ir.result_names import output_names_attr

    module = one_function(lambda x, y: (op.add(x, y), Tuple([op.multiply(x, y), op.subtract(x, y)])),
                          [Tensor(("n", 4), "float32"), Tensor(("n", 4), "float32")], {"n": 8},
                          attrs=output_names_attr(["sum", "product", "difference"]))
    folder = os.path.join(root, "named", "model")
    tessera.build(module, "cpu").save(folder)
    write(os.path.join(root, "named", "dir"), folder)


def dims(shape) -> str:
    return ",".join(str(d) for d in shape) or "-"


def read_text(root: str, key: str) -> str:
    with open(os.path.join(root, key), encoding="utf-8") as f:
        return f.read()


def run_junit(java: str, classpath: str, data: str, test_class: str, jvm_args=(),
              timeout: int = 600) -> subprocess.CompletedProcess:
    """One JUnit class in a JVM of its own, under -Xcheck:jni; fails on a test failure or a JNI warning.
    file.encoding is UTF-8, as it always is on Android (a JVM 17's default follows the locale)."""
    command = [java, "-Xcheck:jni", *jvm_args, f"-Djava.library.path={HOST}", f"-Dtessera.test.data={data}",
               "-Dfile.encoding=UTF-8", "-cp", classpath, "org.junit.runner.JUnitCore", f"ai.tessera.{test_class}"]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    seconds = time.perf_counter() - start
    print(f"{test_class}: {seconds:.1f} s\n{result.stdout}\n{result.stderr}")
    assert result.returncode == 0 and re.search(r"^OK \(\d+ tests?\)", result.stdout, re.M), \
        f"{test_class} failed (exit {result.returncode}):\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    # HotSpot prints -Xcheck:jni's warnings on stdout (its tty), among JUnit's lines; stderr is checked too.
    warnings = [line for line in (result.stdout + result.stderr).splitlines() if "WARNING in native method" in line]
    assert not warnings, f"-Xcheck:jni warned in {test_class}:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    return result


def test_chat_streams_the_python_vms_greedy_reply_on_cpu_and_vulkan(java, classpath, data):
    run_junit(java, classpath, data, "ChatTest")


def test_the_engine_reports_memory_resets_serializes_threads_and_closes(java, classpath, data):
    run_junit(java, classpath, data, "EngineTest")


def test_bad_folders_and_options_throw_the_runtimes_message(java, classpath, data):
    run_junit(java, classpath, data, "ErrorTest")


def test_module_run_gives_the_conformance_outputs(java, classpath, data):
    run_junit(java, classpath, data, "ModuleTest")
    for case in MODULE_CASES:
        record = read_case(os.path.join(data, "module", case, "model"))
        for index, call in enumerate(record["calls"]):
            got = read_outputs(os.path.join(data, "out", "module", case, f"call{index}"))
            assert len(got) == len(call["outputs"]), (case, index, len(got))
            for position, (array, entry) in enumerate(zip(got, call["outputs"])):
                expected = read_array(os.path.join(data, "module", case, "model"), entry)
                result = compare(array, expected, entry)
                assert result.passed, f"{case} call {index} output {position}: {result.message}"


def read_outputs(folder: str) -> list[np.ndarray]:
    """What ModuleTest wrote: outputs.txt (`NAME DTYPE DIMS FILE` per line, in the order Module.run's map
    gives them) and the raw little-endian files."""
    arrays = []
    for line in read_text(folder, "outputs.txt").splitlines():
        _, dtype, shape, file = line.split(" ")
        shape = [] if shape == "-" else [int(d) for d in shape.split(",")]
        raw = np.fromfile(os.path.join(folder, file), np.dtype(dtype).newbyteorder("<"))
        arrays.append(raw.astype(dtype).reshape(shape))
    return arrays


def test_load_chat_close_cycles_leave_the_rss_flat(java, classpath, data):
    # The heap fixed and touched from the start: its growth would hide (or fake) a native leak.
    run_junit(java, classpath, data, "LeakTest", jvm_args=["-Xms96m", "-Xmx96m", "-XX:+AlwaysPreTouch"])
    warm, end, cycles = (int(v) for v in read_text(data, "out/rss.txt").split())
    print(f"RSS after the warm-up: {warm} KiB; after {cycles} cycles: {end} KiB (growth {end - warm} KiB)")
    assert end - warm < RSS_GROWTH_LIMIT_KIB, f"the JVM's RSS grew by {end - warm} KiB over the cycles"
