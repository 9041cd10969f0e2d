"""Running compiled code from Python: the executable format and the VM in three layers.

- ``program``: the VirtualMachine (bytecode, shape heap, match checks), device-independent;
- ``storage``: tensors as device bytes, the weights, the state, each function's memory;
- ``devices``: WebGPU (wgpu-py) and WASM (wasmtime) behind one ``Device`` interface.

``kernel_runner`` and ``wasm_runner`` run single kernels for tests and benchmarks.
"""

from .devices import Device, DeviceError, View, device_kinds, register_device
from .executable import CACHE_FORMAT, CACHE_VERSION, RECORD_ALIGNMENT, SHARD_BYTES, Executable, ExecutableError
from .files import FileCheckError, parse_json, path_problem, read_inside, read_json, read_regular, resolve_inside
from .program import DeviceTensor, VirtualMachine
from .schema import check_against_schema


def webgpu_adapter_infos() -> list[dict]:
    """The info of each WebGPU adapter on this machine (for choosing a build); see devices.webgpu."""
    from .devices.webgpu import webgpu_adapter_infos as infos

    return infos()
