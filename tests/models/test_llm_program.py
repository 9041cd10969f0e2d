"""The LLM program contract (tessera.models.llm_program): the section of chat-config.json that names
what the runtimes call, its JSON Schema, the Python app's check of it, and a split export that takes
its placement as an argument instead of changing the model."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from tessera.app.batch_engine import BatchBuildError, PagedModel
from tessera.app.chat import ChatError, ChatSession, Sampling
from tessera.app.chat_files import ChatFilesError
from tessera.app.compile import compile_model
from tessera.models import LlamaForCausalLM, export_llm, program_section, read_program
from tessera.models.llm_program import SAMPLER_LAYOUT, ProgramError
from tessera.vm import check_against_schema
from tiny_llama import LAYERS, tiny_config

STATE = ["cache_k_0", "cache_v_0", "cache_k_1", "cache_v_1"]
ONE_SEQUENCE = {"version": 1, "functions": {"prefill": "prefill", "decode": "decode", "sample": "sample",
                                            "sample_greedy": "sample_greedy"},
                "state": STATE, "sampler": ["temperature", "top_k", "top_p", "repetition_penalty", "random"]}
BATCHED = {"version": 1, "functions": {"prefill_paged": "prefill_paged", "decode_batch": "decode_batch",
                                       "sample": "sample", "sample_greedy": "sample_greedy"},
           "state": STATE, "sampler": list(SAMPLER_LAYOUT), "page_size": 16, "max_batch": 4}
FUNCTIONS = ("prefill", "decode", "sample", "sample_greedy")


def test_the_section_names_each_role_the_state_and_the_sampler_layout():
    assert LAYERS == 2
    assert program_section(export_llm(LlamaForCausalLM(tiny_config("gqa-2x")), 32)) == ONE_SEQUENCE
    assert program_section(export_llm(LlamaForCausalLM(tiny_config("gqa-2x")), 32, max_batch=4)) == BATCHED


def test_a_split_export_leaves_the_model_as_it_was():
    """The placement is an argument of the export: after a split export the model exports as a fresh one."""
    model = LlamaForCausalLM(tiny_config("mqa"))
    split = export_llm(model, 32, gpu_layers=1, devices=("webgpu", "wasm"))
    assert len(split.global_infos["vdevice"]) == 2
    assert export_llm(model, 32).script() == export_llm(LlamaForCausalLM(tiny_config("mqa")), 32).script()
    assert not hasattr(model, "split_at") and not hasattr(model, "cpu_vdevice")


def check(program: dict) -> None:
    check_against_schema({"context_length": 32, "stop_token_ids": [], "program": program}, "chat-config",
                         "chat-config.json", ChatFilesError)


@pytest.mark.parametrize("change, problem", [
    ({"version": 2}, "program.version"),
    ({"functions": {"prefill": "prefill", "decode": "decode", "sample": "sample"}}, "program.functions"),
    ({"functions": {"prefill": "prefill", "decode_batch": "d", "sample": "s", "sample_greedy": "g"}},
     "program.functions"),
    ({"functions": {"prefill": "p", "decode": "d", "decode_batch": "b", "sample": "s", "sample_greedy": "g"}},
     "program.functions"),
    ({"functions": {**ONE_SEQUENCE["functions"], "prefill": ""}}, "program.functions.prefill"),
    ({"state": [f"cache_{i}" for i in range(2049)]}, "program.state"),
    ({"extra": 1}, "program"),
])
def test_the_schema_refuses_a_malformed_section(change, problem):
    check(ONE_SEQUENCE)
    check(BATCHED)
    with pytest.raises(ChatFilesError, match=f"^chat-config.json is malformed: {problem}"):
        check(ONE_SEQUENCE | change)
    with pytest.raises(ChatFilesError, match="page_size"):
        check({k: v for k, v in BATCHED.items() if k != "page_size"})


def test_a_runtime_refuses_a_missing_section_an_unknown_sampler_and_a_missing_function():
    program = read_program({"program": ONE_SEQUENCE}, FUNCTIONS)
    assert (program.function("decode"), program.state, program.batched) == ("decode", tuple(STATE), False)
    assert read_program({"program": BATCHED}, ("prefill_paged", "decode_batch", "sample", "sample_greedy")).batched
    with pytest.raises(ProgramError, match=r"^m/chat-config.json has no program section \(it was compiled by an older "
                                           r"Tessera\): compile the model again with this compiler \(tessera compile\)$"):
        read_program({"context_length": 32}, FUNCTIONS, "m/chat-config.json")
    swapped = ONE_SEQUENCE | {"sampler": ["top_k", "temperature", "top_p", "repetition_penalty", "random"]}
    with pytest.raises(ProgramError, match=r"^chat-config.json's program.sampler is \['top_k', 'temperature', 'top_p', "
                                           r"'repetition_penalty', 'random'\]; this runtime knows \['temperature', "
                                           r"'top_k', 'top_p', 'repetition_penalty', 'random'\]$"):
        read_program({"program": swapped}, FUNCTIONS)
    renamed = ONE_SEQUENCE | {"functions": ONE_SEQUENCE["functions"] | {"decode": "decode_v2"}}
    with pytest.raises(ProgramError, match=r"program.functions.decode names 'decode_v2', a function executable.json "
                                           r"does not have$"):
        read_program({"program": renamed}, FUNCTIONS)


@pytest.fixture(scope="module")
def compiled(tiny_gguf, tmp_path_factory):
    return compile_model(tiny_gguf, str(tmp_path_factory.mktemp("program") / "tiny"), "llvmpipe", 32).directory


def with_program(compiled, folder, program) -> str:
    shutil.copytree(compiled, folder)
    path = os.path.join(folder, "chat-config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config.pop("program")
    if program is not None:
        config["program"] = program
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    return str(folder)


def test_the_python_app_calls_the_functions_the_section_names(compiled, tmp_path):
    """A section that names sample_greedy for the role sample makes a hot, seeded reply the greedy one."""
    with open(os.path.join(compiled, "chat-config.json"), encoding="utf-8") as f:
        assert json.load(f)["program"] == ONE_SEQUENCE
    session = ChatSession(compiled)
    prompt = session.encode_chat([{"role": "user", "content": "Hi"}])
    greedy = session.generate(prompt, 6)["reply"]
    hot = Sampling(temperature=5.0, seed=1)
    assert greedy and session.generate(prompt, 6, hot)["reply"] != greedy
    always_greedy = ONE_SEQUENCE | {"functions": ONE_SEQUENCE["functions"] | {"sample": "sample_greedy"}}
    assert ChatSession(with_program(compiled, tmp_path / "greedy", always_greedy)).generate(prompt, 6, hot)[
        "reply"] == greedy


def test_the_python_app_refuses_a_build_without_the_section_or_its_functions(compiled, tmp_path):
    with pytest.raises(ChatError, match=r"chat-config.json has no program section \(it was compiled by an older "
                                        r"Tessera\): compile the model again with this compiler"):
        ChatSession(with_program(compiled, tmp_path / "old", None))
    renamed = ONE_SEQUENCE | {"functions": ONE_SEQUENCE["functions"] | {"decode": "decode_v2"}}
    with pytest.raises(ChatError, match="program.functions.decode names 'decode_v2'"):
        ChatSession(with_program(compiled, tmp_path / "renamed", renamed))
    with pytest.raises(BatchBuildError, match="is not a batched build"):
        PagedModel(compiled)
