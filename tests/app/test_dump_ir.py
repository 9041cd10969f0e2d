"""`tessera compile --dump-ir DIR`: the module before the passes and after each one, each file a module
that `tessera check` reads back and prints back unchanged; weights appear by name, dtype and shape."""

import numpy as np
import pytest
from tessera import cli
from tessera.ir import ScriptError
from tessera.script import from_source
from tessera.target import Target
from tessera.transform.pipeline import Pipeline

WEIGHT = '''\
# from tessera.script import ir as I, relax as R, tir as T


@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((2, 3), dtype="float32")) -> R.Tensor((2, 3), dtype="float32"):
        lv0: R.Tensor((2, 3), dtype="float32") = R.add(x, R.const(..., "float32", shape=[2, 3], name="model.w"))
        return lv0
'''


def test_a_weight_without_its_values_reads_back_and_prints_as_it_was_written():
    mod = from_source(WEIGHT)
    assert mod.script() == WEIGHT
    (binding,) = mod.functions["main"].body.blocks[0].bindings
    weight = binding.value.args[1]
    assert weight.name == "model.w" and weight.data.shape == (2, 3) and not weight.data.any()
    with pytest.raises(ScriptError, match="a weight without its values names its shape and name"):
        from_source(WEIGHT.replace(', name="model.w"', ""))


def test_dump_ir_writes_one_file_per_pass_and_each_reads_back(tiny_gguf, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TESSERA_CHECK_PASSES", "1")  # and the build checks its module after each pass
    dump = tmp_path / "ir"
    dump.mkdir()
    (dump / "25-an_earlier_pass.py").write_text("stale")
    (dump / "notes.txt").write_text("the user's")
    assert cli.main(["compile", tiny_gguf, "-o", str(tmp_path / "out"), "--context", "64", "-q",
                     "--dump-ir", str(dump)]) == 0
    capsys.readouterr()
    passes = [name for name, _ in Pipeline.default(Target.preset("webgpu")).passes]
    written = sorted(p.name for p in dump.iterdir())
    assert written == ["00-input.py"] + [f"{i:02d}-{name}.py" for i, name in enumerate(passes, 1)] + ["notes.txt"]
    for name in written[:-1]:
        text = (dump / name).read_text()
        # The embedding alone is 49,152 x 64 weights: by shape only, a file is the program's size.
        assert len(text) < 1_000_000 and 'R.const(..., "uint32", shape=[' in text, name
        assert cli.main(["check", str(dump / name)]) == 0, capsys.readouterr().err
        assert capsys.readouterr().out == text, name
    last = (dump / written[-2]).read_text()
    assert "@T.prim_func" in last and '"memory_plan"' in last


def test_print_back_of_the_default_text_keeps_every_value():
    """Without elision a weight's values stay in the text: the text round-trips them."""
    mod = from_source(WEIGHT.replace('R.const(..., "float32", shape=[2, 3], name="model.w")',
                                     'R.const([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "float32", name="model.w")'))
    (binding,) = mod.functions["main"].body.blocks[0].bindings
    np.testing.assert_array_equal(binding.value.args[1].data, [[1, 2, 3], [4, 5, 6]])
    assert "[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]" in mod.script()
