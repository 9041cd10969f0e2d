"""`tessera.native`: the native runtime (runtime-native's libtessera) from Python, over its C API.

    from tessera.native import NativeModel
    model = NativeModel("smollm2-cpu", n_threads=2)     # a folder `tessera compile --target cpu` wrote
    gpu = NativeModel("smollm2-vulkan", device="vulkan")  # --target vulkan (or opencl): a GPU device
    print(gpu.device_description)                        # which device, and why
    session = model.session()
    result = session.chat([{"role": "user", "content": "Hi"}], on_piece=print)

``NativeModel.call(name, *args)`` runs any function of the executable (numpy arrays and ints in,
numpy arrays out), as ``tessera.vm.VirtualMachine`` does: the conformance suite drives the native
runtime this way. Errors are ``NativeError``s carrying the library's own message.

The library is found at ``$TESSERA_NATIVE_LIB``, else in this checkout's ``build/native/release``
(``make native`` builds it).
"""

from __future__ import annotations

from .binding import (
    ERROR_DEVICE,
    NO_MEMORY_LIMIT,
    STATUS_NAMES,
    NativeError,
    device_memory_rows,
    library_path,
    load_library,
)
from .model import NativeModel, NativeSession


def plan_devices(directory: str, library_path: str | None = None) -> list[dict]:
    """What each device of the folder's model will hold (weights, arena, KV cache, total bytes), from
    executable.json and tensor-cache.json alone, before anything is loaded."""
    lib = load_library(library_path)
    return device_memory_rows(lib, lib.tessera_model_plan_devices, directory.encode())

__all__ = ["ERROR_DEVICE", "NO_MEMORY_LIMIT", "STATUS_NAMES", "NativeError", "NativeModel", "NativeSession",
           "library_path", "load_library", "plan_devices"]
