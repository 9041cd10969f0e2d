import pytest
from tessera.vm.kernel_runner import default_runner


@pytest.fixture(scope="session")
def runner():
    """The WebGPU device (llvmpipe on a CPU-only machine); make setup installs its driver."""
    return default_runner()


def pytest_sessionfinish(session, exitstatus):
    """When every kernel test ran and passed, every operator with a kernel must have been run."""
    from harness import COVERED_OPS
    from tessera.op import get_op, list_ops

    options = session.config.option
    complete = not options.keyword and not options.markexpr and not getattr(options, "lf", False)
    ran_kernels = any("tests/kernels" in str(item.fspath) for item in session.items)
    if exitstatus != 0 or not complete or not ran_kernels or session.testscollected != len(session.items):
        return
    everything = [item for item in session.items if "tests/kernels" in str(item.fspath)]
    if len(everything) < 100:  # a single file was asked for
        return
    missing = sorted(n for n in list_ops() if get_op(n).legalize is not None and n not in COVERED_OPS)
    if missing:
        session.exitstatus = 1
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        reporter.write_line("")
        reporter.write_line(f"operators with kernels that no kernel test ran: {', '.join(missing)}", red=True)
