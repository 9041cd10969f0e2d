"""tessera_model_params.memory_limit through tessera.native: a load whose plan exceeds the limit is refused
before anything is allocated, with a message giving the plan and the limit; no limit loads; the default
(0) compares with what this machine has available now, which the tiny model fits."""

import re

import pytest
from tessera.native import NO_MEMORY_LIMIT, NativeError, NativeModel, plan_devices

from native.build import ensure_native_build


@pytest.fixture(scope="module")
def tiny_cpu(tiny_gguf, tmp_path_factory):
    from tessera.app.compile import compile_model

    ensure_native_build()
    folder = str(tmp_path_factory.mktemp("tiny") / "cpu")
    compile_model(tiny_gguf, folder, "cpu", 64)
    return folder


def test_a_model_over_the_limit_is_refused_with_its_plan(tiny_cpu):
    need = sum(row["total"] for row in plan_devices(tiny_cpu))
    with pytest.raises(NativeError) as refused:
        NativeModel(tiny_cpu, n_threads=1, memory_limit=need - 1)
    message = str(refused.value)
    assert re.search(r"model needs \S+ \S+ \(weights .*, arena .*, KV cache .*\) but only .* is available "
                     r"\(memory_limit\); free memory or pass a larger memory_limit", message), message
    assert tiny_cpu in message


def test_a_limit_at_the_plan_no_limit_and_the_default_load(tiny_cpu):
    need = sum(row["total"] for row in plan_devices(tiny_cpu))
    for limit in (need, NO_MEMORY_LIMIT, 0):
        with NativeModel(tiny_cpu, n_threads=1, memory_limit=limit) as model:
            assert model.session().chat([{"role": "user", "content": "Hi"}], max_tokens=2)["completion_tokens"] > 0


def test_a_limit_out_of_range_is_a_python_error(tiny_cpu):
    with pytest.raises(ValueError, match="memory_limit"):
        NativeModel(tiny_cpu, memory_limit=-1)
