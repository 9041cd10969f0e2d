"""legalize_storage: tensors a language cannot hold become 32-bit words, in tir.

WebGPU storage buffers cannot hold ``bool`` (not host-shareable), ``int64`` (no 64-bit integers) or
bytes and halfwords (no 8- or 16-bit integers),
and a thread must be able to write an element alone, so those tensors live in whole words:

- ``bool``: one ``u32`` word per element, 0 or 1;
- ``int64``: two ``i32`` words per element, the low word first and then the high word, which
  holds the sign (kernels compute int64 tensors in i32, as ``tessera.tir.compute`` says).
- ``uint64``: two ``u32`` words, the high one zero (computed in u32);
- ``int8``, ``uint8``, ``int16``, ``uint16``: one ``i32`` or ``u32`` word per element, the value
  sign- or zero-extended, wrapped to the dtype's range when stored.

This module is the one place that says so. ``legalize_storage`` rewrites the kernel's loads and
stores of such buffers into word loads and stores plus the compare, select or sign the rule
needs; after it, every global buffer holds a dtype the language can hold, so renderers have no
storage special cases. The byte sizes that memory planning and the runtimes use
(``element_bytes``) and the host layout of a tensor (``host_dtype``) are derived from the same
rules. The two other runtimes state the host side again in their own language: runtime-js in
``runtime-js/src/host.js``, runtime-native in ``src/vm/storage.c`` (both widen on upload and keep the
low bits on read-back, as here).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

import numpy as np

from ... import arith
from ..compute import NARROW_BITS, VALUE_DTYPE, wrap
from ..ir import (
    Assign,
    Binary,
    Buffer,
    Const,
    Declare,
    Evaluate,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Select,
    Span,
    Stmt,
    Store,
    TExpr,
    ThreadLoop,
    binary,
    map_children,
    vector_of,
)
from .names import NameSupply

WORD_BYTES = 4


class WordStorage:
    """Elements of a tensor dtype kept as ``words`` 32-bit words of tensor dtype ``word`` each."""

    word: str
    words: int
    host: str  # the numpy dtype whose little-endian bytes are this layout

    @property
    def bytes(self) -> int:
        return self.words * WORD_BYTES

    def read(self, first_word: TExpr, lanes: int) -> TExpr:
        """The element's value, from a load of its first word."""
        raise NotImplementedError

    def write(self, value: TExpr, lanes: int) -> tuple[TExpr, ...]:
        """The element's words, in order, from its value (read once per word: keep it a leaf)."""
        raise NotImplementedError


class _BoolWords(WordStorage):
    word, words, host = "uint32", 1, "uint32"

    def read(self, first_word, lanes):
        return Binary("!=", first_word, Const(0, vector_of("u32", lanes)), vector_of("bool", lanes))

    def write(self, value, lanes):
        word = vector_of("u32", lanes)
        return (Select(value, Const(1, word), Const(0, word), word),)


class _Int64Words(WordStorage):
    # A little-endian int64 is its low word, then its high word: numpy's own bytes are the layout.
    word, words, host = "int32", 2, "int64"

    def read(self, first_word, lanes):
        return first_word

    def write(self, value, lanes):
        return (value, Select(binary("<", value, Const(0)), Const(-1), Const(0), "i32"))


class _Uint64Words(WordStorage):
    # Computed in u32, as int64 is in i32: the high word is zero.
    word, words, host = "uint32", 2, "uint64"

    def read(self, first_word, lanes):
        return first_word

    def write(self, value, lanes):
        return (value, Const(0, "u32"))


class _NarrowWords(WordStorage):
    """int8, uint8, int16, uint16: one word per element, holding the value sign- or zero-extended (a
    thread must be able to write an element alone); stored values are wrapped to the dtype's range."""

    words = 1

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.word = self.host = "uint32" if dtype.startswith("u") else "int32"

    def read(self, first_word, lanes):
        return first_word

    def write(self, value, lanes):
        if lanes > 1:
            raise NotImplementedError(f"vector stores of {self.dtype} tensors")
        return (wrap(value, self.dtype),)


WORD_STORAGE: dict[str, WordStorage] = {"bool": _BoolWords(), "int64": _Int64Words(), "uint64": _Uint64Words(),
                                        **{dtype: _NarrowWords(dtype) for dtype in NARROW_BITS}}

# Bytes per element of the dtypes that are stored as themselves.
NATIVE_BYTES = {"float32": 4, "int32": 4, "uint32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1,
                "uint8": 1, "int16": 2, "uint16": 2}


def element_bytes(dtype: str) -> int:
    """Bytes one element of a ``dtype`` tensor takes in device memory."""
    if dtype in WORD_STORAGE:
        return WORD_STORAGE[dtype].bytes
    return NATIVE_BYTES[dtype] if dtype in NATIVE_BYTES else np.dtype(dtype).itemsize


def host_dtype(dtype: str) -> str:
    """The numpy dtype whose bytes are a ``dtype`` tensor's device layout (bool: uint32 words)."""
    return WORD_STORAGE[dtype].host if dtype in WORD_STORAGE else dtype


def legalize_storage(func: PrimFunc, storage_types: Collection[str]) -> PrimFunc:
    """``func`` with every global buffer whose tensor dtype is not in ``storage_types`` rewritten into
    words (``WORD_STORAGE``); an error for a dtype that has no such rule."""
    words: dict[Buffer, tuple[Buffer, WordStorage]] = {}
    for buf in func.params:
        if buf.storage_dtype in storage_types:
            continue
        rule = WORD_STORAGE.get(buf.storage_dtype)
        if rule is None:
            raise NotImplementedError(f"kernel {func.name}: {buf.name} holds {buf.storage_dtype} tensors, which the "
                                      f"target cannot store (it holds {', '.join(sorted(storage_types))})")
        shape = buf.shape + ((arith.IntImm(rule.words),) if rule.words > 1 else ())
        words[buf] = (Buffer(buf.name, VALUE_DTYPE[rule.word], shape, "global", rule.word), rule)
    if not words:
        return func
    names = NameSupply(func)

    def word_index(index: TExpr, rule: WordStorage, lanes: int, word: int = 0) -> TExpr:
        if rule.words > 1 and lanes > 1:
            raise NotImplementedError(f"kernel {func.name}: vector access to a tensor stored in word pairs")
        return binary("+", binary("*", index, Const(rule.words)), Const(word))

    def expr(e: TExpr) -> TExpr:
        if isinstance(e, Load) and e.buffer in words:
            buf, rule = words[e.buffer]
            return rule.read(Load(buf, word_index(expr(e.index), rule, e.lanes), e.lanes), e.lanes)
        if isinstance(e, Span) and e.buffer in words:
            raise NotImplementedError(f"kernel {func.name}: a micro-kernel reads {e.buffer.name}, which the target "
                                      f"stores in words")
        return map_children(e, expr)

    def store(s: Store) -> list[Stmt]:
        buf, rule = words[s.buffer]
        index, value = expr(s.index), expr(s.value)
        out: list[Stmt] = []
        if rule.words > 1 and not isinstance(value, (Local, Const)):
            temp = Local(names.fresh(f"{buf.name}_value"), value.dtype)
            out.append(Declare(temp, value))
            value = temp
        for k, word in enumerate(rule.write(value, s.lanes)):
            out.append(Store(buf, word_index(index, rule, s.lanes, k), word, s.lanes))
        return out

    def stmts(body) -> tuple[Stmt, ...]:
        return tuple(out for s in body for out in stmt(s))

    def stmt(s: Stmt) -> list[Stmt]:
        if isinstance(s, Store) and s.buffer in words:
            return store(s)
        if isinstance(s, Store):
            return [Store(s.buffer, expr(s.index), expr(s.value), s.lanes)]
        if isinstance(s, (Declare, Assign, Evaluate)):
            return [replace(s, value=expr(s.value))]
        if isinstance(s, IfThen):
            return [IfThen(expr(s.cond), stmts(s.then), stmts(s.otherwise))]
        if isinstance(s, For):
            return [replace(s, start=expr(s.start), stop=expr(s.stop), body=stmts(s.body))]
        if isinstance(s, ThreadLoop):
            return [replace(s, body=stmts(s.body))]
        return [s]

    def param(buf: Buffer) -> Buffer:
        return words[buf][0] if buf in words else buf

    return replace(func, inputs=tuple(param(b) for b in func.inputs), outputs=tuple(param(b) for b in func.outputs),
                   body=stmts(func.body))
