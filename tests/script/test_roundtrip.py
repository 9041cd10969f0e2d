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
