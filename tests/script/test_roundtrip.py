"""Every module of the test catalogue prints, parses back and prints identically."""

import pytest
from modules import CATALOGUE, PAPER_TEXTS
from tessera.ir import well_formed
from tessera.script import from_source


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_catalogue_module_round_trips(name):
    mod = CATALOGUE[name]()
    well_formed(mod)
    text = mod.script()
    reparsed = from_source(text)
    assert reparsed.script() == text
    well_formed(reparsed)


@pytest.mark.parametrize("name", sorted(PAPER_TEXTS))
def test_paper_examples_round_trip(name):
    text = from_source(PAPER_TEXTS[name]).script()
    assert from_source(text).script() == text


def test_weights_keep_their_names():
    """A bound weight is a constant with its model path: the executable's tensor cache uses it."""
    import numpy as np
    from tessera import op
    from tessera.ir import BlockBuilder, Constant, Tensor, Var

    x = Var("x", Tensor((2,), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        bb.emit_func_output(op.add(x, Constant(np.array([1.5, -2.0], np.float32), name="model.bias")))
    text = bb.get().script()
    assert 'R.add(x, R.const([1.5, -2.0], "float32", name="model.bias"))' in text
    parsed = from_source(text)
    assert parsed["main"].body.body.args[1].name == "model.bias"
    assert parsed.script() == text
