"""ctypes declarations of tessera.h, and finding libtessera."""

from __future__ import annotations

import ctypes
import os

from tessera.ir.errors import TesseraError

MAX_NDIM = 8
# tessera_model_params.memory_limit that turns the check at load off (UINT64_MAX); 0 is the machine's available memory.
NO_MEMORY_LIMIT = 2**64 - 1
DTYPES = ["float32", "float16", "int32", "uint32", "int64", "bool", "int8", "uint8"]  # tessera_dtype order


# tessera_status (tessera.h), by value: what NativeError.status holds.
STATUS_NAMES = {0: "TESSERA_OK", -1: "TESSERA_ERROR_INVALID_ARGUMENT", -2: "TESSERA_ERROR_IO",
                -3: "TESSERA_ERROR_FORMAT", -4: "TESSERA_ERROR_VERSION", -5: "TESSERA_ERROR_CHECKSUM",
                -6: "TESSERA_ERROR_UNSUPPORTED", -7: "TESSERA_ERROR_OUT_OF_MEMORY", -8: "TESSERA_ERROR_RUNTIME_CHECK",
                -9: "TESSERA_ERROR_CONTEXT_FULL", -10: "TESSERA_ERROR_LIBRARY", -11: "TESSERA_ERROR_DEVICE"}
ERROR_UNSUPPORTED = -6
ERROR_DEVICE = -11  # the device failed while running: lost, out of device memory, a validation message


class NativeError(TesseraError):
    """A failure reported by libtessera: its status (0 where the C API gives none: a constructor
    that returned NULL) and message."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)

    @property
    def status_name(self) -> str | None:
        return STATUS_NAMES.get(self.status) if self.status else None


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * MAX_NDIM)]


class Value(ctypes.Structure):
    pass


Value._fields_ = [("kind", ctypes.c_int), ("tensor", Tensor), ("value", ctypes.c_int64),
                  ("items", ctypes.POINTER(Value)), ("n_items", ctypes.c_size_t)]
VALUE_TENSOR, VALUE_INT, VALUE_TUPLE = 0, 1, 2

ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
FREE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


class Allocator(ctypes.Structure):
    _fields_ = [("alloc", ALLOC_FN), ("free", FREE_FN), ("user", ctypes.c_void_p)]


LIBRARY_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Value), ctypes.c_size_t, ctypes.POINTER(Tensor),
                              ctypes.c_size_t, ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t,
                              ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p)


class Library(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("fn", LIBRARY_FN), ("user", ctypes.c_void_p)]


class ModelParams(ctypes.Structure):
    _fields_ = [("n_threads", ctypes.c_int32), ("device", ctypes.c_char_p), ("allocator", Allocator),
                ("libraries", ctypes.POINTER(Library)), ("n_libraries", ctypes.c_size_t),
                ("cache_dir", ctypes.c_char_p), ("memory_limit", ctypes.c_uint64)]


class Memory(ctypes.Structure):
    _fields_ = [("weights", ctypes.c_uint64), ("arena", ctypes.c_uint64), ("kv_cache", ctypes.c_uint64),
                ("total", ctypes.c_uint64)]


class DeviceMemory(ctypes.Structure):
    _fields_ = [("device", ctypes.c_char * 16), ("weights", ctypes.c_uint64), ("arena", ctypes.c_uint64),
                ("kv_cache", ctypes.c_uint64), ("total", ctypes.c_uint64)]


class CompileStats(ctypes.Structure):
    _fields_ = [("kernels", ctypes.c_uint32), ("compiled", ctypes.c_uint32), ("from_cache", ctypes.c_uint32),
                ("shader_modules", ctypes.c_uint32), ("seconds", ctypes.c_double)]


class SamplingParams(ctypes.Structure):
    _fields_ = [("temperature", ctypes.c_float), ("top_p", ctypes.c_float), ("top_k", ctypes.c_int32),
                ("repetition_penalty", ctypes.c_float), ("seed", ctypes.c_uint64), ("max_tokens", ctypes.c_int32)]


class Message(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class Usage(ctypes.Structure):
    _fields_ = [("prompt_tokens", ctypes.c_int32), ("prefilled_tokens", ctypes.c_int32),
                ("completion_tokens", ctypes.c_int32), ("prefill_tokens_per_s", ctypes.c_double),
                ("decode_tokens_per_s", ctypes.c_double)]


class KernelProfile(ctypes.Structure):
    _fields_ = [("kernel", ctypes.c_char_p), ("launches", ctypes.c_uint64), ("seconds", ctypes.c_double)]


PIECE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)

_SIGNATURES = {
    "tessera_last_error": (ctypes.c_char_p, []),
    "tessera_library_error": (None, [ctypes.c_char_p]),
    "tessera_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "tessera_model_default_params": (ModelParams, []),
    "tessera_model_load": (ctypes.c_void_p, [ctypes.c_char_p, ctypes.POINTER(ModelParams)]),
    "tessera_model_device": (ctypes.c_char_p, [ctypes.c_void_p]),
    "tessera_model_compile_stats": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(CompileStats)]),
    "tessera_model_memory": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(Memory)]),
    "tessera_model_plan": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(Memory)]),
    "tessera_model_plan_devices": (ctypes.c_int32, [ctypes.c_char_p, ctypes.POINTER(DeviceMemory), ctypes.c_int32]),
    "tessera_model_memory_devices": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(DeviceMemory), ctypes.c_int32]),
    "tessera_model_context_length": (ctypes.c_int32, [ctypes.c_void_p]),
    "tessera_model_vocab_size": (ctypes.c_int32, [ctypes.c_void_p]),
    "tessera_model_allocation_count": (ctypes.c_uint64, [ctypes.c_void_p]),
    "tessera_model_free": (None, [ctypes.c_void_p]),
    "tessera_model_call": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(Value), ctypes.c_size_t,
                                          ctypes.POINTER(ctypes.POINTER(Tensor)), ctypes.POINTER(ctypes.c_size_t)]),
    "tessera_model_reset_state": (None, [ctypes.c_void_p]),
    "tessera_model_set_profiling": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "tessera_model_kernel_profile": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32]),
    "tessera_tokenize": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                          ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, ctypes.c_int, ctypes.c_int]),
    "tessera_detokenize": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int32,
                                            ctypes.c_char_p, ctypes.c_int32]),
    "tessera_sampling_default_params": (SamplingParams, []),
    "tessera_session_new": (ctypes.c_void_p, [ctypes.c_void_p]),
    "tessera_chat_completion": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(Message), ctypes.c_size_t,
                                               ctypes.POINTER(SamplingParams), PIECE_FN, ctypes.c_void_p,
                                               ctypes.POINTER(Usage)]),
    "tessera_session_reset": (None, [ctypes.c_void_p]),
    "tessera_session_free": (None, [ctypes.c_void_p]),
}

_LOADED: dict[str, ctypes.CDLL] = {}


def library_path() -> str:
    """Where libtessera is: $TESSERA_NATIVE_LIB, else this checkout's release build."""
    path = os.environ.get("TESSERA_NATIVE_LIB")
    if path:
        return path
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "build", "native", "release", "libtessera.so")


def load_library(path: str | None = None) -> ctypes.CDLL:
    path = path or library_path()
    if path in _LOADED:
        return _LOADED[path]
    if not os.path.exists(path):
        raise NativeError(-2, f"the native runtime is not built ({path} is missing): run `make native` in the "
                              "Tessera checkout, or set TESSERA_NATIVE_LIB to a libtessera.so")
    lib = ctypes.CDLL(path)
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    _LOADED[path] = lib
    return lib


def device_memory_rows(lib: ctypes.CDLL, function, handle) -> list[dict]:
    """What ``function`` (tessera_model_plan_devices or _memory_devices) says of each device of ``handle``."""
    count = function(handle, None, 0)
    if count < 0:
        raise_last(lib, count)
    rows = (DeviceMemory * max(count, 1))()
    count = function(handle, rows, count)
    if count < 0:
        raise_last(lib, count)
    return [{"device": r.device.decode(), "weights": r.weights, "arena": r.arena, "kv_cache": r.kv_cache,
             "total": r.total} for r in rows[:count]]


def raise_null(lib: ctypes.CDLL, function: str) -> None:
    """After a constructor returned NULL: the C API gives a message, not a status, so none is named."""
    message = (lib.tessera_last_error() or b"").decode("utf-8", "replace")
    raise NativeError(0, message or f"{function} failed")


def raise_last(lib: ctypes.CDLL, status: int) -> None:
    message = (lib.tessera_last_error() or b"").decode("utf-8", "replace")
    name = lib.tessera_status_name(status).decode()
    raise NativeError(status, f"{message} ({name})" if message else name)
