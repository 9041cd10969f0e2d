"""Only a backend's own folder (codegen/<lang>/) and target.py know which language or target kind
they deal with: the rest of the compiler asks the target by capability and the codegen registry by
name. The devices of the Python VM (vm/devices/) name the backends whose modules they run."""

import os
import re

ROOT = os.path.join(os.path.dirname(__file__), "..")
KIND_QUESTION = re.compile(r"\btarget\.kind\s*(==|!=|\bin\b|\bnot in\b)|\bkind\s*==\s*[\"'](webgpu|wasm)[\"']")
LANGUAGE_LITERAL = re.compile(r"[\"'](wgsl|c-wasm|spirv|spir-v|opencl|metal|msl)[\"']", re.IGNORECASE)
LANGUAGE_IMPORT = re.compile(r"\b(tessera\.codegen|\.\.?codegen)\.(wgsl|c|spirv|opencl|metal)\b")
ALLOWED = ("target.py", os.path.join("vm", "devices") + os.sep)


def python_files(folder):
    for base, _, files in os.walk(os.path.join(ROOT, folder)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(base, name)
                yield os.path.relpath(path, os.path.join(ROOT, folder)), path


def test_no_code_outside_a_backend_asks_which_language_or_kind():
    found = []
    for rel, path in python_files("compiler"):
        if rel.startswith(ALLOWED):
            continue
        for number, line in enumerate(open(path, encoding="utf-8"), 1):
            code = line.split("#")[0]
            if KIND_QUESTION.search(code) or LANGUAGE_LITERAL.search(code) or LANGUAGE_IMPORT.search(code):
                found.append(f"compiler/{rel}:{number}: {line.strip()}")
    assert not found, "language or target-kind questions outside codegen/ and target.py:\n" + "\n".join(found)


def test_the_registry_knows_the_builtin_backends():
    from tessera import codegen
    from tessera.target import Target

    assert {"wgsl", "c-wasm"} <= set(codegen.backends())
    assert codegen.backend_for(Target.preset("llvmpipe")).device_kinds == ("webgpu",)
    assert codegen.backend_for(Target.preset("wasm")).binary
