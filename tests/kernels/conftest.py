import pytest
from tessera.vm.kernel_runner import default_runner


@pytest.fixture(scope="session")
def runner():
    """The WebGPU device (llvmpipe on a CPU-only machine); make setup installs its driver."""
    return default_runner()
