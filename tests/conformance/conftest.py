"""The conformance build, made once per session before any adapter runs, and a summary at the end."""

import pytest

from conformance.generate import DEFAULT_ROOT, generate

# Every case report of the session, in order: test_python_vm.py appends, the summary prints them.
REPORTS = []
# Targets an adapter has no device for, with the reason.
NOT_RUN: dict[str, str] = {}


@pytest.fixture(scope="session")
def conformance_index():
    """Every (target, case) folder up to date under build/conformance; the JS adapters read them next."""
    return generate(DEFAULT_ROOT)


def pytest_terminal_summary(terminalreporter):
    if not REPORTS:
        return
    passed = sum(r.passed for r in REPORTS)
    terminalreporter.write_sep("-", f"conformance: {passed} of {len(REPORTS)} (target, case) pairs pass")
    for target, reason in NOT_RUN.items():
        terminalreporter.write_line(f"not run: target {target}: {reason}")
    for report in REPORTS:
        terminalreporter.write_line(report.line(), red=not report.passed)
