"""Every build these tests make checks its module after each pass: well formed, kernels verified
(docs/passes.md, "Watching the pipeline"), the module-scoped fixtures' builds too (an autouse fixture
is set up before the other fixtures of its scope). Here, as in tests/transform and tests/script, and
not in the root conftest: over tests/vm and the tiny-Llama model tests the checks took about 9 of 40
CPU seconds in the test process (kernel verification at three sizes two thirds of it), a sixth more
in all, more than a whole run should pay."""

import pytest


@pytest.fixture(autouse=True, scope="module")
def _check_every_pass():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TESSERA_CHECK_PASSES", "1")
        yield
