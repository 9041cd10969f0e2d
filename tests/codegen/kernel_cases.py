"""Every case of the kernel tests (tests/kernels) as (test id, make, params), for backends that are
checked by compiling rather than by running: a new operator test is then checked for every
language without touching tests/codegen.

Each kernel test runs with a ``check_op`` that records its case and legalizes it for the given
target as the real one does (without running it), so the test's own assertions on the returned
kernels still hold as far as they can; a test that builds its module itself with the harness's
``build(make, params)`` contributes that call as a case too. The test then fails once it needs a
device (it has ``runner=None``), which is expected; a test that contributes no case at all is
listed by ``kernel_tests_without_cases`` unless ``BUILDS_ITS_OWN_MODULE`` names it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import itertools

import harness
from harness import build
from tessera.ir import Function
from tessera.transform import legalize_ops

KERNEL_TEST_MODULES = ("test_elementwise_kernels", "test_layout_kernels", "test_quantized_kernels",
                       "test_reduction_kernels", "test_sampling_kernels")

# Kernel tests whose module is no (make, params) case, so that they contribute none here; a test
# is listed with the reason. (Tests without a ``runner`` argument check numpy references only and
# are skipped, not listed.)
BUILDS_ITS_OWN_MODULE = {
    # BlockBuilder plus fuse_ops / fuse_tir: its fused kernels come from no single operator call.
    "test_quantized_kernels::test_epilogues_fuse_into_the_quantized_kernel",
}


def _parametrizations(test) -> list[dict]:
    """Every combination of a test function's @pytest.mark.parametrize arguments."""
    axes = []
    for mark in getattr(test, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names = mark.args[0] if isinstance(mark.args[0], (list, tuple)) else mark.args[0].split(",")
        names = [n.strip() for n in names]
        rows = []
        for value in mark.args[1]:
            value = value.values if hasattr(value, "values") and not isinstance(value, dict) else value
            rows.append(dict(zip(names, value if len(names) > 1 else (value,))))
        axes.append(rows)
    return [dict(kv for row in combo for kv in row.items()) for combo in itertools.product(*axes)]


class CaseError(Exception):
    """A kernel test's case does not legalize for the target."""


@functools.cache
def _collect(target) -> tuple[tuple[tuple[str, object, list], ...], dict[str, str]]:
    """(cases, {test function: the error it stopped on, for each test that gave no case})."""
    cases, silent = [], {}
    for module_name in KERNEL_TEST_MODULES:
        module = importlib.import_module(module_name)
        real_check_op, real_build = module.check_op, getattr(module, "build", None)

        def record(runner, make, params, *, _id=None, target=None, _default=target, **_):
            cases.append((_id[0], make, list(params)))
            try:
                lowered = legalize_ops(build(make, params), target or _default)
            except Exception as error:
                raise CaseError(f"{_id[0]}: {error}") from error
            return lowered, [f for f in lowered.functions.values() if not isinstance(f, Function)]

        def record_build(make, params, _id=None):
            cases.append((_id[0], make, list(params)))
            return build(make, params)

        for name in dir(module):
            test = getattr(module, name)
            if not name.startswith("test_") or not callable(test):
                continue
            if "runner" not in inspect.signature(test).parameters:
                continue  # runs no kernel (a numpy reference against ggml's, say)
            before, stopped = len(cases), None
            for args in _parametrizations(test):
                shown = ",".join(f"{k}={getattr(v, 'name', v)}" for k, v in sorted(args.items()))
                test_id = [f"{module_name}::{name}[{shown}]"]
                module.check_op = lambda *a, _i=test_id, **k: record(*a, _id=_i, **k)
                # Tests that legalize by hand call build (imported into the module, or from harness).
                module.build = harness.build = lambda make, params, _i=test_id: record_build(make, params, _i)
                try:
                    test(runner=None, **args)
                except CaseError:
                    raise
                except Exception as error:  # what the test does after check_op: runs kernels, asks a fixture
                    stopped = stopped or f"{type(error).__name__}: {error}"
                finally:
                    module.check_op, harness.build = real_check_op, build
                    if real_build is not None:
                        module.build = real_build
            if len(cases) == before and f"{module_name}::{name}" not in BUILDS_ITS_OWN_MODULE:
                silent[f"{module_name}::{name}"] = stopped or "returned without a case"
    return tuple(cases), silent


def kernel_test_cases(target) -> tuple[tuple[str, object, list], ...]:
    """(test id, make, params) of every check_op (or build) call in the kernel tests; ``target`` is
    what each case is legalized for while its test runs (a CaseError if one does not legalize)."""
    return _collect(target)[0]


def kernel_tests_without_cases(target) -> dict[str, str]:
    """The kernel tests that gave no case and are not in ``BUILDS_ITS_OWN_MODULE``, each with the
    error it stopped on: a test the codegen checks silently drop, which should be empty."""
    return _collect(target)[1]
