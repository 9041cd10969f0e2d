"""Every build these tests make checks its module after each pass: well formed, kernels verified
(docs/passes.md, "Watching the pipeline")."""

import pytest


@pytest.fixture(autouse=True)
def _check_every_pass(monkeypatch):
    monkeypatch.setenv("TESSERA_CHECK_PASSES", "1")
