"""The LLM program contract: the functions a compiled chat model offers the runtimes, written once.

Any registered architecture's model (tessera.models.registry) exports to these functions, and
``tessera compile`` names them in the ``program`` section of chat-config.json (docs/models.md, "The
LLM program contract"; its JSON Schema is docs/chat-config.schema.json), from which the Python app,
runtime-js and runtime-native read what to call:

- one-sequence builds: ``prefill(input_ids (n,), total)`` and ``decode(input_ids (1,), total)``;
- batched builds (``max_batch`` > 1): ``prefill_paged(input_ids (n,), total, page_table (1, pages))``
  and ``decode_batch(input_ids (b,), positions (b,), page_table (b, pages))``;
- always ``sample(logits, history, params)`` and ``sample_greedy(...)``, ``params`` laid out as
  ``SAMPLER_LAYOUT``;

the KV cache is state shared by the model's functions (``state``: per layer its keys, then its
values). A model offers ``config`` (``num_layers``, ``num_kv_heads``, ``head_dim``, ``vocab_size``)
and the methods ``step(input_ids, total, *caches, placement=None)``, ``prefill_paged(input_ids,
total, page_table, *caches, page_size)`` and ``decode_batch(input_ids, positions, page_table,
*caches, page_size)``, as tessera.models.llama's LlamaForCausalLM does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .. import arith, op
from ..ir import TesseraError

PROGRAM_VERSION = 1
# Roles: the keys of program.functions.
PREFILL, DECODE, PREFILL_PAGED, DECODE_BATCH = "prefill", "decode", "prefill_paged", "decode_batch"
SAMPLE, SAMPLE_GREEDY = "sample", "sample_greedy"
ONE_SEQUENCE_ROLES, BATCHED_ROLES = (PREFILL, DECODE), (PREFILL_PAGED, DECODE_BATCH)
SAMPLING_ROLES = (SAMPLE, SAMPLE_GREEDY)
# The float32 params vector of ``sample``, in order (tessera.op.sampling reads it so).
SAMPLER_LAYOUT = ("temperature", "top_k", "top_p", "repetition_penalty", "random")
PAGE_SIZE = 16  # positions per page of a batched build's KV cache


class ProgramError(TesseraError):
    """A chat-config.json whose program section this runtime cannot run."""


@dataclass(frozen=True)
class Placement:
    """A build split across two devices (export_llm's ``gpu_layers``): the decoder layers from
    ``split_at`` on, the final norm, the head and the sampler on the vdevice ``cpu_vdevice``; the
    embedding and the layers before on the module's first vdevice."""

    split_at: int
    cpu_vdevice: str


def state_names(num_layers: int) -> list[str]:
    """The KV cache's state tensors, in order: each layer's keys, then its values."""
    return [f"cache_{kind}_{index}" for index in range(num_layers) for kind in ("k", "v")]


def export_llm(model, context_length: int, quantized_activations: str = "", prefill_chunk: int | None = None,
               max_batch: int = 1, gpu_layers: int | None = None, devices: tuple[str, str] = ("webgpu", "wasm")):
    """``prefill(input_ids (n,), total)`` and ``decode(input_ids (1,), total)``, sharing a KV cache of
    ``context_length`` positions kept as state: each writes its positions into the cache and returns
    the last position's logits. ``total`` counts every position so far, this call's included.
    ``prefill_chunk`` bounds n (default: the context): a longer prompt is prefilled by several calls,
    each continuing after the last, so prefill's memory plan grows with the chunk, not the context.
    ``quantized_activations`` ("q8"): decode's quantized GEMVs read x rounded to 8 bits, for a
    target's integer SIMD kernels (transform/quantize_activations.py; ``Target.quantized_activations``).
    ``max_batch`` > 1: the batched build of export_paged_llm instead.
    ``gpu_layers`` (llama.cpp's --n-gpu-layers): the first that many decoder layers, with the embedding,
    on the vdevice ``devices[0]`` (a GPU target), the rest with the final norm, the head and the
    sampler on ``devices[1]`` (a CPU target): a module split across two devices (docs/vdevice.md),
    passed to the model as a Placement; None: one device, the build's."""
    from ..ir import PrimStructInfo, Tensor
    from ..ir.module import IRModule, VDevice
    from ..nn import export
    from ..transform import quantize_activations

    if max_batch > 1:
        if gpu_layers is not None:
            raise ValueError("a batched build (max_batch > 1) cannot be split across devices (gpu_layers)")
        return export_paged_llm(model, context_length, max_batch, prefill_chunk, quantized_activations)
    c = model.config
    start = IRModule()
    placement = None
    if gpu_layers is not None:
        if not 0 <= gpu_layers <= c.num_layers:
            raise ValueError(f"gpu_layers must be 0 .. {c.num_layers} (the model's layers), got {gpu_layers}")
        start = IRModule({}, {"vdevice": [VDevice(devices[0]), VDevice(devices[1])]})
        placement = Placement(gpu_layers, start.vdevice_name(1))
    cpu = placement.cpu_vdevice if placement is not None else None
    caches = {}
    for name in state_names(c.num_layers):
        layer = int(name.rsplit("_", 1)[1])
        on = cpu if placement is not None and layer >= placement.split_at else None
        caches[name] = Tensor((context_length, c.num_kv_heads, c.head_dim), "float32", vdevice=on)
    chunk = min(prefill_chunk or context_length, context_length)
    if chunk < 1:
        raise ValueError(f"prefill_chunk must be at least 1, got {prefill_chunk}")
    attrs = {"tir_var_upper_bound": {"n": chunk, "total": context_length},
             "tir_var_lower_bound": {"n": 1, "total": 1}, "state_params": list(caches)}
    total = PrimStructInfo("int64", arith.Var("total"))
    options = {"placement": placement}
    mod = export(model, PREFILL, {"input_ids": Tensor(("n",), "int32"), "total": total, **caches},
                 method="step", attrs=attrs, module=start, options=options)
    mod = export(model, DECODE, {"input_ids": Tensor((1,), "int32"), "total": total, **caches},
                 method="step", attrs=attrs, module=mod, options=options)
    if gpu_layers is not None:  # the CPU part reads activations as its target asks; the GPU part as they are
        from ..target import Target

        cpu_activations = Target.preset(devices[1]).quantized_activations
        if cpu_activations:
            mod = quantize_activations(mod, cpu_activations, functions=(DECODE,), vdevice=cpu)
    elif quantized_activations:
        mod = quantize_activations(mod, quantized_activations, functions=(DECODE,))
    return add_sampling(mod, c.vocab_size, context_length, cpu)


def export_paged_llm(model, context_length: int, max_batch: int, prefill_chunk: int | None = None,
                     quantized_activations: str = "", page_size: int = PAGE_SIZE):
    """The build behind `tessera serve --max-batch B` (continuous batching): a KV cache in pages of
    ``page_size`` positions, one pool per layer's keys and values (pages, kv heads, head dim)
    kept as state and shared by every sequence (op/paged.py), with room for ``max_batch`` sequences
    of ``context_length`` positions. ``prefill_paged(input_ids (n,), total, page_table (1, pages))``
    computes a chunk of one sequence; ``decode_batch(input_ids (b,), positions (b,), page_table (b,
    pages))`` one token of each of b <= max_batch sequences, logits (b, vocab). The caller (the
    engine's page allocator, tessera.app.batch_engine) gives each sequence its pages.
    ``quantized_activations``: as for export_llm, decode_batch's rows (one token of each sequence)."""
    from ..ir import PrimStructInfo, Tensor
    from ..nn import export

    c = model.config
    pages = -(-context_length // page_size)
    pool_rows = max_batch * pages * page_size
    caches = {name: Tensor((pool_rows, c.num_kv_heads, c.head_dim), "float32") for name in state_names(c.num_layers)}
    chunk = min(prefill_chunk or context_length, context_length)
    if chunk < 1:
        raise ValueError(f"prefill_chunk must be at least 1, got {prefill_chunk}")
    attrs = {"tir_var_upper_bound": {"n": chunk, "b": max_batch, "total": context_length},
             "tir_var_lower_bound": {"n": 1, "b": 1, "total": 1}, "state_params": list(caches),
             "page_size": page_size}
    total = PrimStructInfo("int64", arith.Var("total"))
    options = {"page_size": page_size}
    mod = export(model, PREFILL_PAGED, {"input_ids": Tensor(("n",), "int32"), "total": total,
                                        "page_table": Tensor((1, pages), "int32"), **caches},
                 method="prefill_paged", attrs=attrs, options=options)
    mod = export(model, DECODE_BATCH, {"input_ids": Tensor(("b",), "int32"), "positions": Tensor(("b",), "int32"),
                                       "page_table": Tensor(("b", pages), "int32"), **caches},
                 method="decode_batch", attrs=attrs, module=mod, options=options)
    if quantized_activations:
        from ..transform import quantize_activations

        mod = quantize_activations(mod, quantized_activations, functions=(DECODE_BATCH,), batched=True)
    return add_sampling(mod, c.vocab_size, context_length)


def add_sampling(mod, vocab_size: int, context_length: int, vdevice: str | None = None):
    """``sample(logits, history, params)`` and ``sample_greedy(...)``: the next token on the device
    (tessera.op.sampling), so that a step reads back one id rather than the vocabulary's logits.
    ``history`` holds the ids the repetition penalty applies to: at most the context; ``params`` is
    laid out as SAMPLER_LAYOUT. ``vdevice``: where the logits are (a split build samples on its CPU
    device)."""
    from ..ir import BlockBuilder, Tensor, Var

    for name, greedy in ((SAMPLE, False), (SAMPLE_GREEDY, True)):
        params = [Var("logits", Tensor((1, vocab_size), "float32", vdevice=vdevice)),
                  Var("history", Tensor(("m",), "int32", vdevice=vdevice)),
                  Var("params", Tensor((len(SAMPLER_LAYOUT),), "float32", vdevice=vdevice))]
        bb = BlockBuilder(mod)
        attrs = {"tir_var_upper_bound": {"m": context_length}, "tir_var_lower_bound": {"m": 1}}
        with bb.function(name, params, attrs=attrs):
            with bb.dataflow():
                out = bb.emit_output(op.sample_token(*params, greedy=greedy), "token")
            bb.emit_func_output(out)
        mod = bb.get()
    return mod


def sampler_params(temperature: float, top_k: int, top_p: float, repetition_penalty: float,
                   random: float) -> np.ndarray:
    """``sample``'s params vector (float32, laid out as SAMPLER_LAYOUT); ``random``: the uniform number
    in [0, 1) a draw uses."""
    values = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "repetition_penalty": repetition_penalty,
              "random": random}
    return np.array([values[name] for name in SAMPLER_LAYOUT], np.float32)


def program_section(mod) -> dict:
    """chat-config.json's ``program`` for the module export_llm (or export_paged_llm) gave: the
    function of each role it has, its state tensors, the sampler layout and, for a batched build, the
    page size and the batch."""
    batched = PREFILL_PAGED in mod
    roles = (BATCHED_ROLES if batched else ONE_SEQUENCE_ROLES) + SAMPLING_ROLES
    first = mod[roles[0]]
    program = {"version": PROGRAM_VERSION, "functions": {role: role for role in roles},
               "state": list(first.attr("state_params")), "sampler": list(SAMPLER_LAYOUT)}
    if batched:
        program |= {"page_size": first.attr("page_size"), "max_batch": first.attr("tir_var_upper_bound")["b"]}
    return program


@dataclass(frozen=True)
class Program:
    """A compiled model's program section, checked against its executable (``read_program``)."""

    functions: dict[str, str]  # role -> function name
    state: tuple[str, ...]
    page_size: int | None = None
    max_batch: int | None = None

    @property
    def batched(self) -> bool:
        return PREFILL_PAGED in self.functions

    def function(self, role: str) -> str:
        return self.functions[role]


def read_program(config: dict, functions: Iterable[str], path: str = "chat-config.json") -> Program:
    """The program section of the chat configuration ``config`` (read from ``path``, already checked
    against docs/chat-config.schema.json) of an executable with ``functions``; a ProgramError, one line,
    for a configuration without one (a model compiled before the section existed), a sampler layout
    this runtime does not know, or a function the executable lacks."""
    program = config.get("program")
    if program is None:
        raise ProgramError(f"{path} has no program section (it was compiled by an older Tessera): compile the model "
                           "again with this compiler (tessera compile)")
    if not isinstance(program, dict) or not isinstance(program.get("functions"), dict):
        raise ProgramError(f"{path}: program is not an object with the object functions (docs/chat-config.schema.json)")
    if program.get("version") != PROGRAM_VERSION:
        raise ProgramError(f"{path}: program.version is {program.get('version')!r}; this runtime knows version "
                           f"{PROGRAM_VERSION}")
    if program.get("sampler") != list(SAMPLER_LAYOUT):
        raise ProgramError(f"{path}'s program.sampler is {program.get('sampler')}; this runtime knows "
                           f"{list(SAMPLER_LAYOUT)}")
    named = dict(program["functions"])
    batched = PREFILL_PAGED in named or DECODE_BATCH in named
    for role in (BATCHED_ROLES if batched else ONE_SEQUENCE_ROLES) + SAMPLING_ROLES:
        if role not in named:
            raise ProgramError(f"{path}: program.functions has no {role!r}")
    available = set(functions)
    for role, name in named.items():
        if name not in available:
            raise ProgramError(f"{path}: program.functions.{role} names {name!r}, a function executable.json does "
                               "not have")
    return Program(named, tuple(program.get("state", ())), program.get("page_size"), program.get("max_batch"))
