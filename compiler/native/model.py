"""NativeModel and NativeSession: Python objects over libtessera's handles."""

from __future__ import annotations

import ctypes
import os

import numpy as np

from .binding import (
    DTYPES,
    LIBRARY_FN,
    MAX_NDIM,
    NO_MEMORY_LIMIT,
    PIECE_FN,
    VALUE_INT,
    VALUE_TENSOR,
    VALUE_TUPLE,
    CompileStats,
    KernelProfile,
    Library,
    Memory,
    Message,
    NativeError,
    SamplingParams,
    Tensor,
    Usage,
    Value,
    device_memory_rows,
    load_library,
    raise_last,
    raise_null,
)


def _numpy_view(tensor: Tensor) -> np.ndarray:
    """The tensor's bytes as a numpy array (a view: valid as long as the library keeps them)."""
    dtype = np.dtype(DTYPES[tensor.dtype])
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0 or not tensor.data:
        return np.zeros(shape, dtype)
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(tensor.data)
    return np.frombuffer(raw, dtype, count).reshape(shape)


class NativeModel:
    """An executable folder loaded by libtessera on the device ``device`` names from libtessera's
    device table: "auto" (the first that runs the executable's kernels: a GPU before the CPU), or a
    device's name (tessera.target.NATIVE_DEVICE_LABELS), with ":N" for the N-th device of its kind ("vulkan:1").
    ``cache_dir``: where a GPU device keeps its compiled pipelines or programs (None: a
    .tessera-cache folder in ``directory``, when it is writable). ``memory_limit``: bytes the model may
    take, checked against its plan before the weights and arenas are allocated (0: what the machine has available now;
    NO_MEMORY_LIMIT: no check)."""

    def __init__(self, directory: str, n_threads: int = 0, device: str = "auto", libraries: dict | None = None,
                 library_path: str | None = None, cache_dir: str | None = None, memory_limit: int = 0):
        self._lib = load_library(library_path)
        lib = self._lib
        params = lib.tessera_model_default_params()
        params.n_threads = n_threads
        params.device = device.encode()
        params.cache_dir = os.fsencode(cache_dir) if cache_dir is not None else None
        if not 0 <= memory_limit <= NO_MEMORY_LIMIT:
            raise ValueError(f"memory_limit {memory_limit} is out of range (0 .. 2**64 - 1 bytes)")
        params.memory_limit = memory_limit
        # Library callbacks must outlive the model: keep them on it.
        self._callbacks = [self._library(name, fn) for name, fn in (libraries or {}).items()]
        if self._callbacks:
            array = (Library * len(self._callbacks))(*[c[0] for c in self._callbacks])
            self._library_array = array
            params.libraries = array
            params.n_libraries = len(self._callbacks)
        self._handle = lib.tessera_model_load(directory.encode(), ctypes.byref(params))
        if not self._handle:
            raise_null(lib, "tessera_model_load")
        self.directory = directory

    def _library(self, name: str, fn):
        lib = self._lib

        def call(args, n_args, outs, n_outs, scalars, n_scalars, result, user):
            try:
                inputs = [_numpy_view(args[i].tensor) if args[i].kind == VALUE_TENSOR else int(args[i].value)
                          for i in range(n_args)]
                arrays = [_numpy_view(outs[i]) for i in range(n_outs)]
                returned = fn(*inputs, *arrays, *[int(scalars[i]) for i in range(n_scalars)])
                if returned is not None:
                    result[0] = int(returned)
                return 0
            except Exception as error:  # reported by the runtime as the library's failure, with its name
                lib.tessera_library_error(f"{type(error).__name__}: {error}".encode("utf-8", "replace"))
                return 1

        callback = LIBRARY_FN(call)
        return Library(name.encode(), callback, None), callback

    def close(self) -> None:
        if getattr(self, "_handle", None):
            self._lib.tessera_model_free(self._handle)
            self._handle = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- functions ---------------------------------------------------------------------------

    def _value(self, arg, keep: list) -> Value:
        value = Value()
        if isinstance(arg, (tuple, list)):
            items = (Value * max(len(arg), 1))(*[self._value(a, keep) for a in arg])
            keep.append(items)
            value.kind, value.items, value.n_items = VALUE_TUPLE, items, len(arg)
        elif isinstance(arg, (int, np.integer)) and not isinstance(arg, (bool, np.bool_)):
            value.kind, value.value = VALUE_INT, int(arg)
        else:
            array = np.asarray(arg)
            if not array.flags.c_contiguous:  # (ascontiguousarray would make a 0-d array 1-d)
                array = array.copy(order="C")
            if str(array.dtype) not in DTYPES:
                raise NativeError(-1, f"the native runtime takes no {array.dtype} tensors "
                                      f"(dtypes: {', '.join(DTYPES)})")
            if array.ndim > MAX_NDIM:
                raise NativeError(-1, f"a tensor of {array.ndim} dimensions (at most {MAX_NDIM})")
            keep.append(array)
            value.kind = VALUE_TENSOR
            value.tensor.data = array.ctypes.data
            value.tensor.dtype = DTYPES.index(str(array.dtype))
            value.tensor.ndim = array.ndim
            for i, d in enumerate(array.shape):
                value.tensor.shape[i] = d
        return value

    def call(self, name: str, *args) -> list[np.ndarray]:
        """Runs function ``name``; its result's tensors (tuples flattened depth-first), copied out.
        Integer results come back as 0-d int64 arrays."""
        keep: list = []
        values = (Value * max(len(args), 1))(*[self._value(a, keep) for a in args])
        outputs = ctypes.POINTER(Tensor)()
        count = ctypes.c_size_t()
        status = self._lib.tessera_model_call(self._handle, name.encode(), values, len(args), ctypes.byref(outputs),
                                              ctypes.byref(count))
        if status != 0:
            raise_last(self._lib, status)
        return [_numpy_view(outputs[i]).copy() for i in range(count.value)]

    def reset_state(self) -> None:
        self._lib.tessera_model_reset_state(self._handle)

    def profile(self, enable: bool = True) -> None:
        """Time every kernel launch from now on (clearing the totals), or stop timing."""
        self._lib.tessera_model_set_profiling(self._handle, int(enable))

    def kernel_profile(self) -> list[tuple[str, int, float]]:
        """(kernel, launches, seconds) per kernel of the executable since profiling was enabled."""
        count = self._lib.tessera_model_kernel_profile(self._handle, None, 0)
        rows = (KernelProfile * max(count, 1))()
        self._lib.tessera_model_kernel_profile(self._handle, rows, count)
        return [(r.kernel.decode(), r.launches, r.seconds) for r in rows[:count]]

    def memory(self) -> dict:
        memory = Memory()
        status = self._lib.tessera_model_memory(self._handle, ctypes.byref(memory))
        if status != 0:
            raise_last(self._lib, status)
        return {"weights": memory.weights, "arena": memory.arena, "kv_cache": memory.kv_cache, "total": memory.total}

    def compile_stats(self) -> dict:
        """What the GPU device did with the kernels at load: how many it made ready, compiled, and took
        from the disk cache (the driver's word for Vulkan), shader modules created, seconds; zeros on the CPU."""
        stats = CompileStats()
        status = self._lib.tessera_model_compile_stats(self._handle, ctypes.byref(stats))
        if status != 0:
            raise_last(self._lib, status)
        return {name: getattr(stats, name) for name, _ in CompileStats._fields_}

    def memory_devices(self) -> list[dict]:
        """``memory()`` per device: one entry, or two for a build split across a GPU and the CPU (weights
        count on each device that reads them)."""
        return device_memory_rows(self._lib, self._lib.tessera_model_memory_devices, self._handle)

    @property
    def device_description(self) -> str:
        """The device the model runs on and why it was chosen, as libtessera says it:
        "vulkan:0 (llvmpipe (LLVM 15.0.6, 256 bits)): auto: the kernels are spirv (target vulkan)"."""
        return (self._lib.tessera_model_device(self._handle) or b"").decode("utf-8", "replace")

    @property
    def allocation_count(self) -> int:
        return self._lib.tessera_model_allocation_count(self._handle)

    @property
    def context_length(self) -> int:
        return self._lib.tessera_model_context_length(self._handle)

    # -- tokenizer -----------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 16
        while True:
            ids = (ctypes.c_int32 * capacity)()
            n = self._lib.tessera_tokenize(self._handle, data, len(data), ids, capacity, int(add_special),
                                           int(parse_special))
            if n < 0:
                raise_last(self._lib, n)
            if n <= capacity:
                return list(ids[:n])
            capacity = n

    def detokenize(self, ids: list[int]) -> str:
        array = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        size = 64 + 16 * len(ids)
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self._lib.tessera_detokenize(self._handle, array, len(ids), buf, size)
            if n < 0:
                raise_last(self._lib, n)
            if n <= size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n

    def session(self) -> NativeSession:
        return NativeSession(self)


class NativeSession:
    """A conversation on a NativeModel: its KV cache holds the turns so far."""

    def __init__(self, model: NativeModel):
        self.model = model
        self._lib = model._lib
        self._handle = self._lib.tessera_session_new(model._handle)
        if not self._handle:
            raise_null(self._lib, "tessera_session_new")


    def close(self) -> None:
        # tessera_model_free frees the sessions still open: the garbage collector may finalize the
        # model first, and then this session's handle is gone already.
        if getattr(self, "_handle", None) and self.model._handle:
            self._lib.tessera_session_free(self._handle)
        self._handle = None

    def __del__(self):
        self.close()

    def reset(self) -> None:
        self._lib.tessera_session_reset(self._handle)

    def chat(self, messages: list[dict], max_tokens: int = 256, temperature: float = 0.0, top_p: float = 1.0,
             top_k: int = 0, repetition_penalty: float = 1.0, seed: int = 0, on_piece=None) -> dict:
        """One turn: the assistant's reply to ``messages`` (the whole conversation), streamed to
        ``on_piece(text)`` (which may return True to end the reply there); a dict with the reply and the
        usage, as tessera.app.chat reports it."""
        sampling = self._lib.tessera_sampling_default_params()
        sampling.temperature, sampling.top_p, sampling.top_k = temperature, top_p, top_k
        sampling.repetition_penalty, sampling.seed, sampling.max_tokens = repetition_penalty, seed, max_tokens
        encoded = [(m["role"].encode("utf-8"), m["content"].encode("utf-8")) for m in messages]
        array = (Message * max(len(encoded), 1))(*[Message(r, c) for r, c in encoded])
        pieces: list[bytes] = []
        raised: list[BaseException] = []

        def piece(text, user):
            # As the C API's callback: a true result stops the reply. An exception cannot cross the C
            # frames, so it stops the reply too and is raised again once tessera_chat_completion returns.
            pieces.append(text)
            if on_piece is None:
                return 0
            try:
                return 1 if on_piece(text.decode("utf-8", "replace")) else 0
            except BaseException as error:  # noqa: BLE001 (re-raised below)
                raised.append(error)
                return 1

        callback = PIECE_FN(piece)
        usage = Usage()
        status = self._lib.tessera_chat_completion(self._handle, array, len(encoded), ctypes.byref(sampling),
                                                   callback, None, ctypes.byref(usage))
        if raised:
            raise raised[0]
        if status != 0:
            raise_last(self._lib, status)
        return {"reply": b"".join(pieces).decode("utf-8", "replace"), "prompt_tokens": usage.prompt_tokens,
                "prefilled_tokens": usage.prefilled_tokens, "completion_tokens": usage.completion_tokens,
                "prefill_tokens_per_s": usage.prefill_tokens_per_s,
                "decode_tokens_per_s": usage.decode_tokens_per_s}


__all__ = ["NativeModel", "NativeSession", "SamplingParams"]
