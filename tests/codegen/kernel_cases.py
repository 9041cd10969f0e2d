"""Every case of the kernel tests (tests/kernels) as (test id, make, params), for backends that are
checked by compiling rather than by running: a new operator test is then checked for every
language without touching tests/codegen.

Each kernel test runs with a ``check_op`` that records its case and legalizes it for the given
target as the real one does (without running it), so the test's own assertions on the returned
kernels still hold as far as they can.
"""

from __future__ import annotations

import functools
import importlib
import itertools

from harness import build
from tessera.ir import Function
from tessera.transform import legalize_ops

KERNEL_TEST_MODULES = ("test_elementwise_kernels", "test_layout_kernels", "test_quantized_kernels",
                       "test_reduction_kernels", "test_sampling_kernels")


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
def kernel_test_cases(target) -> tuple[tuple[str, object, list], ...]:
    """(test id, make, params) of every check_op call in the kernel tests; ``target`` is what each
    case is legalized for while its test runs (a CaseError if one does not legalize)."""
    cases = []
    for module_name in KERNEL_TEST_MODULES:
        module = importlib.import_module(module_name)
        real_check_op = module.check_op

        def record(runner, make, params, *, _id=None, target=None, _default=target, **_):
            cases.append((_id[0], make, list(params)))
            try:
                lowered = legalize_ops(build(make, params), target or _default)
            except Exception as error:
                raise CaseError(f"{_id[0]}: {error}") from error
            return lowered, [f for f in lowered.functions.values() if not isinstance(f, Function)]

        for name in dir(module):
            test = getattr(module, name)
            if not name.startswith("test_") or not callable(test):
                continue
            for args in _parametrizations(test):
                shown = ",".join(f"{k}={getattr(v, 'name', v)}" for k, v in sorted(args.items()))
                test_id = [f"{module_name}::{name}[{shown}]"]
                module.check_op = lambda *a, _i=test_id, **k: record(*a, _id=_i, **k)
                try:
                    test(runner=None, **args)
                except CaseError:
                    raise
                except Exception:
                    pass  # what the test does after check_op: runs kernels, asserts on WGSL, asks a fixture
                finally:
                    module.check_op = real_check_op
    return tuple(cases)
