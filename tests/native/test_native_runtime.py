"""runtime-native through its C API (tessera.native) and tessera-run, on a tiny random-weight Llama
compiled for the cpu target: chat with KV-cache reuse, the same replies as the Python VM, no
allocation while decoding, memory known before loading, and a clear error (never a crash) for
every kind of bad folder or request."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from tessera.app.chat import ChatSession, Sampling
from tessera.native import NativeError, NativeModel

from native.build import ensure_native_build

GREEDY = Sampling(temperature=0.0)


@pytest.fixture(scope="module")
def build():
    return ensure_native_build()


def compile_tiny(gguf_path: str, folder: str, target: str = "cpu", context: int = 64, prefill_chunk=None) -> str:
    from tessera.app.compile import compile_model

    compile_model(gguf_path, folder, target, context, prefill_chunk=prefill_chunk)
    return folder


@pytest.fixture(scope="module")
def tiny_cpu(tiny_gguf, tmp_path_factory):
    return compile_tiny(tiny_gguf, str(tmp_path_factory.mktemp("tiny") / "cpu"))


@pytest.fixture()
def copy_of(tiny_cpu, tmp_path):
    """A fresh copy of the compiled folder, for tests that damage it."""
    folder = str(tmp_path / "copy")
    shutil.copytree(tiny_cpu, folder)
    return folder


def test_a_second_turn_prefills_only_what_the_cache_lacks(build, tiny_cpu):
    model = NativeModel(tiny_cpu, n_threads=2)
    session = model.session()
    first = [{"role": "user", "content": "Hi"}]
    one = session.chat(first, max_tokens=6)
    assert one["prefilled_tokens"] == one["prompt_tokens"] > 0 and one["completion_tokens"] > 0
    second = first + [{"role": "assistant", "content": one["reply"]}, {"role": "user", "content": "And then?"}]
    two = session.chat(second, max_tokens=6)
    assert two["prefilled_tokens"] < two["prompt_tokens"] - one["prompt_tokens"] + 8
    # The reused cache gives the reply a fresh session gives for the whole conversation.
    fresh = NativeModel(tiny_cpu, n_threads=1).session().chat(second, max_tokens=6)
    assert fresh["prefilled_tokens"] == fresh["prompt_tokens"]
    assert fresh["reply"] == two["reply"]


def test_a_piece_callback_ends_the_reply_by_returning_true_or_raising(build, tiny_cpu):
    """As the C API's callback: a true result stops the reply there, with its usage (`tessera serve` stops at
    a stop string this way); an exception stops it too and comes out of chat() once the C call returns."""
    session = NativeModel(tiny_cpu, n_threads=1).session()
    messages = [{"role": "user", "content": "Hello there"}]
    whole = session.chat(messages, max_tokens=8)
    pieces = []
    stopped = session.chat(messages, max_tokens=8, on_piece=lambda piece: pieces.append(piece) or len(pieces) == 2)
    assert stopped["completion_tokens"] == 2 and stopped["reply"] == "".join(pieces)
    assert whole["reply"].startswith(stopped["reply"]) and whole["completion_tokens"] == 8

    def leave(piece):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        session.chat(messages, max_tokens=8, on_piece=leave)
    assert session.chat(messages, max_tokens=8)["reply"] == whole["reply"], "the session goes on"


def test_replies_equal_the_python_vms_on_the_same_build(build, tiny_cpu):
    native = NativeModel(tiny_cpu, n_threads=2).session()
    python = ChatSession(tiny_cpu)
    for prompt in ("Hi", "What is the capital of France?", "Write a haiku 🌊"):
        messages = [{"role": "user", "content": prompt}]
        assert native.chat(messages, max_tokens=8)["reply"] == python.reply(messages, 8, GREEDY)["reply"], prompt
        native.reset()
        python.reset()


def test_a_prompt_longer_than_a_prefill_chunk_is_prefilled_in_chunks(build, tiny_gguf, tiny_cpu, tmp_path):
    """A build that prefills at most 4 positions per call answers, in runtime-native and in the Python
    VM, what the build that prefills the whole prompt at once answers."""
    chunked = compile_tiny(tiny_gguf, str(tmp_path / "chunked"), prefill_chunk=4)
    with open(os.path.join(chunked, "chat-config.json"), encoding="utf-8") as f:
        assert json.load(f)["prefill_chunk"] == 4
    whole = ChatSession(tiny_cpu)
    for prompt in ("What is the capital of France?", "Write a haiku 🌊"):
        messages = [{"role": "user", "content": prompt}]
        want = whole.reply(messages, 8, GREEDY)
        assert want["prompt_tokens"] > 8
        assert NativeModel(chunked, n_threads=2).session().chat(messages, max_tokens=8)["reply"] == want["reply"]
        assert ChatSession(chunked).reply(messages, 8, GREEDY)["reply"] == want["reply"]
        whole.reset()


def test_the_tokenizer_equals_the_python_one(build, tiny_cpu):
    from tokenizers import Tokenizer

    model = NativeModel(tiny_cpu)
    reference = Tokenizer.from_file(os.path.join(tiny_cpu, "tokenizer.json"))
    for text in ("Hello, world!", "<|im_start|>user\nHi<|im_end|>\n", "naïve café 12345 😀", "  a\n\n\tb  "):
        ids = model.tokenize(text)
        assert ids == reference.encode(text).ids, text
        assert model.detokenize(ids) == reference.decode(ids, skip_special_tokens=True), text


def test_decode_allocates_nothing(build, tiny_cpu):
    """The memory plan is allocated at load; after one warm-up, prefill and decode reuse it."""
    model = NativeModel(tiny_cpu, n_threads=2)
    ids = np.array([1, 2, 3, 4, 5], np.int32)
    for _ in range(2):  # the second round sees the pool and the outputs as the first left them
        model.reset_state()
        logits = model.call("prefill", ids, len(ids))[0]
        token = int(logits[0].argmax())
        before = model.allocation_count
        for step in range(16):
            logits = model.call("decode", np.array([token], np.int32), len(ids) + step + 1)[0]
            token = int(logits[0].argmax())
    assert model.allocation_count == before
    session = model.session()
    turn = [{"role": "user", "content": "Hi"}]
    session.chat(turn, max_tokens=8)
    session.reset()
    before = model.allocation_count
    session.chat(turn, max_tokens=8)
    assert model.allocation_count == before


def test_memory_is_known_before_loading(build, tiny_cpu):
    from tessera.app.memory import device_memory
    from tessera.vm import Executable

    model = NativeModel(tiny_cpu)
    memory = model.memory()
    planned = device_memory(Executable.load(tiny_cpu))
    assert memory["kv_cache"] == planned.kv_cache
    assert memory["weights"] >= planned.weights
    assert memory["total"] == memory["weights"] + memory["arena"] + memory["kv_cache"]


def tessera_run(build, *args, stdin=None):
    return subprocess.run([os.path.join(build, "tessera-run"), *args], input=stdin, capture_output=True, text=True,
                          timeout=120)


def test_tessera_run_answers_once_with_json_and_chats_interactively(build, tiny_cpu):
    once = tessera_run(build, tiny_cpu, "--prompt", "Hi", "--max-tokens", "4", "--json", "--threads", "2")
    assert once.returncode == 0, once.stderr
    result = json.loads(once.stdout)
    assert result["completion_tokens"] >= 1 and result["prompt_tokens"] == result["prefilled_tokens"]
    python = ChatSession(tiny_cpu).reply([{"role": "user", "content": "Hi"}], 4, GREEDY)["reply"]
    assert result["reply"] == python
    chat = tessera_run(build, tiny_cpu, "--max-tokens", "4", stdin="Hi\nMore?\n\n")
    assert chat.returncode == 0, chat.stderr
    assert chat.stderr.count("[prompt ") == 2  # two turns, each with its speeds
    assert chat.stdout.startswith(python)


@pytest.mark.parametrize("args,message", [
    (["--max-tokens", "0"], "--max-tokens expects a number"),
    (["--temperature", "-1"], "--temperature expects a number"),
    (["--bogus", "1"], "unknown option --bogus"),
])
def test_tessera_run_refuses_bad_options(build, tiny_cpu, args, message):
    result = tessera_run(build, tiny_cpu, "--prompt", "Hi", *args)
    assert result.returncode == 2 and message in result.stderr


def test_a_prompt_longer_than_the_context_is_refused_by_name(build, tiny_cpu):
    session = NativeModel(tiny_cpu).session()
    with pytest.raises(NativeError, match="context window is 64") as error:
        session.chat([{"role": "user", "content": "word " * 200}], max_tokens=4)
    assert "TESSERA_ERROR_CONTEXT_FULL" in str(error.value)
    # The session goes on after a refused turn.
    assert session.chat([{"role": "user", "content": "Hi"}], max_tokens=2)["completion_tokens"] >= 1


def _rewrite_json(path, change):
    with open(path) as f:
        doc = json.load(f)
    change(doc)
    with open(path, "w") as f:
        json.dump(doc, f)


def _shard(folder):
    return os.path.join(folder, "params_shard_0.bin")


def _truncate(folder):
    with open(_shard(folder), "r+b") as f:
        f.truncate(os.path.getsize(_shard(folder)) - 10)


def _corrupt(folder):
    with open(_shard(folder), "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))


def _escape_path(folder):
    _rewrite_json(os.path.join(folder, "tensor-cache.json"),
                  lambda d: d["records"][0].__setitem__("dataPath", "../params_shard_0.bin"))


def _symlink_out(folder):
    outside = os.path.join(os.path.dirname(folder), "outside.bin")
    shutil.copy(_shard(folder), outside)
    os.remove(_shard(folder))
    os.symlink(outside, _shard(folder))


def _fifo_shard(folder):
    os.remove(_shard(folder))
    os.mkfifo(_shard(folder))


def _wrong_version(folder):
    _rewrite_json(os.path.join(folder, "executable.json"), lambda d: d.__setitem__("version", 2))


def _unknown_instruction(folder):
    def change(doc):
        doc["functions"]["decode"]["code"].insert(0, {"op": "teleport"})
    _rewrite_json(os.path.join(folder, "executable.json"), change)


def _corrupt_kernels(folder):
    with open(os.path.join(folder, "kernels.so"), "r+b") as f:
        f.seek(200)
        f.write(b"\0\0\0\0")


def _garbage_json(folder):
    with open(os.path.join(folder, "executable.json"), "w") as f:
        f.write('{"format": "tessera-executable", "version": 3, "functions": [')


def _kernel_out_of_range(folder):
    def change(doc):
        next(op for op in doc["functions"]["decode"]["code"] if op["op"] == "launch")["kernel"] = 10 ** 6
    _rewrite_json(os.path.join(folder, "executable.json"), change)


@pytest.mark.parametrize("damage,message", [
    (lambda folder: os.remove(_shard(folder)), "params_shard_0.bin"),
    (_truncate, "truncated"),
    (_corrupt, "corrupted"),
    (_escape_path, "../params_shard_0.bin"),
    (_symlink_out, "leaves the folder"),
    (_fifo_shard, "not a regular file"),
    (_wrong_version, "format version 2"),
    (_unknown_instruction, "unknown instruction 'teleport'"),
    (_corrupt_kernels, "kernels.so"),
    (_garbage_json, "executable.json"),
    (_kernel_out_of_range, "kernel index out of range"),
], ids=["missing-shard", "truncated-shard", "corrupt-shard", "path-escape", "symlink-out", "fifo", "version",
        "unknown-op", "corrupt-kernels", "bad-json", "kernel-index"])
def test_a_damaged_folder_is_refused_with_a_message_naming_the_problem(build, copy_of, damage, message):
    damage(copy_of)
    with pytest.raises(NativeError) as error:
        NativeModel(copy_of)
    assert message in str(error.value)
    run = tessera_run(build, copy_of, "--prompt", "Hi")
    assert run.returncode == 1 and run.stderr.startswith("error: ") and message in run.stderr


def _chat_config(folder, change):
    _rewrite_json(os.path.join(folder, "chat-config.json"), lambda doc: change(doc["program"]))


def _no_program(folder):
    _rewrite_json(os.path.join(folder, "chat-config.json"), lambda doc: doc.pop("program"))


def _program_version(folder):
    _chat_config(folder, lambda program: program.__setitem__("version", 2))


def _function_the_executable_lacks(folder):
    _chat_config(folder, lambda program: program["functions"].__setitem__("decode", "decode_v2"))


def _sampler_layout(folder):
    _chat_config(folder, lambda program: program.__setitem__("sampler", ["temperature", "top_p"]))


def _state_names(folder):
    _chat_config(folder, lambda program: program["state"].reverse())


@pytest.mark.parametrize("damage,message", [
    (_no_program, 'chat-config.json has no "program" section (the functions a chat runtime calls): the model was '
                  "compiled by an older tessera; compile it again with this one"),
    (_program_version, "chat-config.json's program has version 2; this runtime reads version 1"),
    (_function_the_executable_lacks, "chat-config.json's program.functions.decode names function 'decode_v2', which "
                                     "executable.json does not have"),
    (_sampler_layout, "chat-config.json's program.sampler is [\"temperature\", \"top_p\"]; this runtime knows "
                      "[\"temperature\", \"top_k\", \"top_p\", \"repetition_penalty\", \"random\"]"),
    (_state_names, "function prefill's state parameter 0 is 'cache_k_0'"),
], ids=["missing", "version", "missing-function", "sampler-layout", "state-order"])
def test_a_bad_program_section_is_refused_naming_the_member(build, copy_of, damage, message):
    damage(copy_of)
    with pytest.raises(NativeError) as error:
        NativeModel(copy_of)
    assert message in str(error.value)
    run = tessera_run(build, copy_of, "--prompt", "Hi")
    assert run.returncode == 1 and run.stderr.startswith("error: ") and message in run.stderr


def test_the_functions_called_are_the_ones_the_program_section_names(build, tiny_cpu, copy_of):
    """Renamed in executable.json and in chat-config.json's program, prefill and decode chat as before."""
    renamed = {"prefill": "first_chunk", "decode": "next_token"}

    def rename(doc):
        doc["functions"] = {renamed.get(name, name): f for name, f in doc["functions"].items()}
    _rewrite_json(os.path.join(copy_of, "executable.json"), rename)
    _chat_config(copy_of, lambda program: program["functions"].update(renamed))
    messages = [{"role": "user", "content": "Hi"}]
    want = NativeModel(tiny_cpu, n_threads=1).session().chat(messages, max_tokens=6)
    assert NativeModel(copy_of, n_threads=1).session().chat(messages, max_tokens=6)["reply"] == want["reply"]


def test_an_executable_for_another_device_is_refused_by_name(build, tiny_gguf, tmp_path):
    folder = compile_tiny(tiny_gguf, str(tmp_path / "webgpu"), "webgpu")
    with pytest.raises(NativeError, match="backend 'wgsl'.*--target cpu"):
        NativeModel(folder)


def test_a_device_is_named_from_the_device_table(build, tiny_cpu):
    """The device table of this build (Linux) has Vulkan, OpenCL and the CPU, in the order "auto"
    prefers them; Metal (Apple's) is refused listing the table, and so is a GPU device for cpu kernels."""
    model = NativeModel(tiny_cpu, device="cpu", n_threads=1)
    assert model.memory() == NativeModel(tiny_cpu).memory()
    with pytest.raises(NativeError, match=r"device 'metal' is not in this build of libtessera "
                                          r"\(devices: auto, vulkan, opencl, cpu\)"):
        NativeModel(tiny_cpu, device="metal")
    with pytest.raises(NativeError, match=r"is for backend 'c-native' \(target cpu.*\); the vulkan device does not run "
                                          r"it: compile the model with --target vulkan"):
        NativeModel(tiny_cpu, device="vulkan")


def test_a_folder_that_is_not_a_model_is_refused(build, tmp_path):
    with pytest.raises(NativeError, match="executable.json"):
        NativeModel(str(tmp_path))


def _has_avx512() -> bool:
    with open("/proc/cpuinfo") as f:
        return " avx512f" in f.read()


def test_a_build_for_an_instruction_set_this_cpu_lacks_is_refused_not_run(build, tmp_path):
    """An AArch64 build on this x86-64 machine, and an AVX-512 build where the CPU has none, stop at
    load with a message naming the instruction set (running them would die of SIGILL)."""
    import platform

    import tessera
    from modules import mlp_with_branch
    from tessera.target import Target

    def build_for(preset: str) -> str:
        folder = str(tmp_path / preset)
        tessera.build(mlp_with_branch(), Target.preset(preset)).save(folder)
        return folder

    other, name = ("cpu-armv8.2-a", "armv8.2-a") if platform.machine() == "x86_64" else ("cpu-x86-64-v3", "x86-64-v3")
    with pytest.raises(NativeError, match=f"built for {name}"):
        NativeModel(build_for(other))
    if platform.machine() != "x86_64":
        return
    v4 = build_for("cpu-x86-64-v4")
    if _has_avx512():
        NativeModel(v4)
    else:
        with pytest.raises(NativeError, match="x86-64-v4, which needs AVX-512"):
            NativeModel(v4)


def test_the_gguf_zoo_chats_as_the_python_vm_does_or_is_refused_by_name(build, tmp_path):
    """Qwen2 (ChatML, biases, its pre-tokenizer in the C tokenizer) replies as the Python VM does on the
    same cpu build; Llama 2's template, which folds the system prompt into the first [INST], does not
    reduce to chat-config.json's chat_format, and the native runtime says so rather than guessing."""
    import warnings

    from fixtures.zoo_gguf import write_llama_spm_gguf, write_qwen2_gguf

    qwen2 = compile_tiny(write_qwen2_gguf(str(tmp_path / "qwen2.gguf"), vocab_size=2048), str(tmp_path / "qwen2"))
    messages = [{"role": "user", "content": "What is the capital of France? 😀"}]
    native = NativeModel(qwen2, n_threads=2).session().chat(messages, max_tokens=8)
    python = ChatSession(qwen2).reply(messages, 8, GREEDY)
    assert (native["reply"], native["prompt_tokens"]) == (python["reply"], python["prompt_tokens"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        llama2 = compile_tiny(write_llama_spm_gguf(str(tmp_path / "llama2.gguf"), vocab_size=2048),
                              str(tmp_path / "llama2"))
    with pytest.raises(NativeError, match="chat_format is null: tessera compile could not reduce this model's chat "
                                          "template"):
        NativeModel(llama2).session().chat(messages, max_tokens=4)
    assert ChatSession(llama2).reply(messages, 4, GREEDY)["completion_tokens"] == 4
