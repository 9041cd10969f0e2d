"""docs/executable.schema.json states format version 2; it accepts what the compiler writes and
rejects what a reader must refuse."""

import json
import os

import jsonschema
import pytest
import tessera
from tessera import op
from tessera.ir import BlockBuilder, Tensor, Var

SCHEMA = json.load(open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "executable.schema.json")))


def small_executable(target):
    x = Var("x", Tensor(("n", 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x], attrs={"tir_var_upper_bound": {"n": 64}}):
        with bb.dataflow():
            y = bb.emit_output(op.nn.softmax(op.exp(x)), "y")
        bb.emit_func_output(y)
    return tessera.build(bb.get(), target).to_json()


@pytest.mark.parametrize("target,backend", [("llvmpipe", "wgsl"), ("wasm", "c-wasm"), ("cpu", "c-native")])
def test_what_the_compiler_writes_matches_the_schema(target, backend):
    doc = small_executable(target)
    jsonschema.validate(doc, SCHEMA)
    backends = {k["backend"] for k in doc["kernels"]}
    assert backends == {backend}
    assert {k["module"] for k in doc["kernels"]} <= {m["path"] for m in doc["modules"]}


@pytest.mark.parametrize("path", ["../x.wgsl", "/abs.wgsl", "a/../../b", "a//b", "a\\b", "C:/x", "./x", "dir/"])
def test_paths_outside_the_folder_do_not_match(path):
    doc = small_executable("llvmpipe")
    doc["modules"][0]["path"] = path
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)


def test_version_1_records_do_not_match():
    doc = small_executable("llvmpipe")
    doc["version"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)
    doc = small_executable("llvmpipe")
    doc["kernels"][0]["wgsl"] = "fn main() {}"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)
