"""`tessera compile`: a GGUF chat model in, a directory that every runtime loads out.

The directory (docs/cli.md) holds the executable with the weights in its tensor cache
(docs/format.md), ``tokenizer.json`` (Hugging Face format, rebuilt from the GGUF vocabulary) and
``chat-config.json`` (context length, stop tokens, chat template, and the ``program`` section that names
the functions the runtimes call: tessera.models.llm_program). ``cached_compile`` keeps one such
directory per model file, target and context length in an on-disk cache keyed by the file's hash and
the compiler (its version and a digest of its source); `tessera chat` and `tessera bundle` share it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import tessera
from tessera import nn
from tessera.frontend import GGUFError, check_gguf_file, load_gguf
from tessera.frontend.chat_format import analyze_chat_template
from tessera.frontend.tokenizer import build_tokenizer
from tessera.ir import BindingLimitError, MemoryPlanError, TesseraError
from tessera.models import export_llm, get_architecture, model_from_gguf, program_section
from tessera.models.llm_program import DECODE_BATCH, PAGE_SIZE, PREFILL, PREFILL_PAGED
from tessera.target import Target, presets
from tessera.vm import Executable

from .inspect import describe_target
from .memory import device_memory, mib
from .paths import check_output_folder

CHAT_CONFIG = "chat-config.json"
TOKENIZER = "tokenizer.json"

Progress = Callable[[str, int, int], None]


class CompileError(TesseraError):
    """A compile that cannot start (an unknown target preset)."""


@dataclass(frozen=True)
class CompiledModel:
    directory: str
    executable: Executable
    context_length: int
    seconds: float


def resolve_target(target: Target | str, cpu: str | None = None) -> Target:
    """The target a preset names; ``cpu`` picks the instruction set of a target built to machine
    code (``--target cpu --cpu x86-64-v3`` is the preset ``cpu-x86-64-v3``)."""
    if not isinstance(target, Target):
        try:
            target = Target.preset(target)
        except ValueError as error:
            raise CompileError(str(error)) from None
    if cpu is None or cpu == target.cpu:
        return target
    if not target.cpu:
        raise CompileError(f"--cpu applies to targets built to machine code (such as cpu); {target.name} is not")
    choices = {}  # instruction set -> the preset of this kind built for it
    for name in presets():
        preset = Target.preset(name)
        if preset.kind == target.kind and preset.cpu:
            choices.setdefault(preset.cpu, name)
    if cpu not in choices:
        raise CompileError(f"unknown --cpu {cpu!r} for {target.kind} targets; known: {', '.join(sorted(choices))}")
    return Target.preset(choices[cpu])


def split_devices(target: Target, max_batch: int = 1, split_cpu: str | None = None) -> tuple[str, str]:
    """The two vdevices of a build split by --gpu-layers: the GPU target's preset and its CPU partner
    (``split_cpu``: another preset of the partner's kind, such as a phone's cpu-android-arm64-v8a)."""
    if not target.split_partner:
        gpus = sorted(name for name in presets() if Target.preset(name).split_partner)
        raise CompileError(f"--gpu-layers splits a model between a GPU target and the CPU; {target.name} is not a GPU "
                           f"target (one of: {', '.join(gpus)})")
    if target.activation_dtype != "float32":
        raise CompileError(f"--gpu-layers does not split a {target.activation_dtype} build yet ({target.name}): the "
                           "CPU part computes in float32; use a float32 target")
    if max_batch > 1:
        raise CompileError("--gpu-layers and --max-batch cannot be combined yet: a batched build runs on one device")
    if split_cpu is None:
        return target.name, target.split_partner
    partner_kind = Target.preset(target.split_partner).kind
    if split_cpu not in presets() or Target.preset(split_cpu).kind != partner_kind:
        choices = sorted(name for name in presets() if Target.preset(name).kind == partner_kind)
        raise CompileError(f"{target.name} splits with a {partner_kind} preset (one of: {', '.join(choices)}), "
                           f"not {split_cpu!r}")
    return target.name, split_cpu


# The most sequences a batched build decodes together (--max-batch).
MAX_BATCH = 64
# The longest prefill chunk a default picks (llama.cpp's default batch and MLC's prefill chunk).
MAX_DEFAULT_PREFILL_CHUNK = 2048


def default_prefill_chunk(config, context_length: int, target: Target) -> int:
    """The positions one prefill call takes when --prefill-chunk is not given: the largest power of
    two (at most 2048 and the context) whose widest activation, a chunk of the MLP's hidden rows in
    float32, takes at most an eighth of the largest buffer a kernel may bind; the rest of the plan
    (a few such tensors live at once) then fits beside it."""
    widest = 4 * max(config.intermediate_size, config.hidden_size, config.num_heads * config.head_dim)
    room = target.limit("maxStorageBufferBindingSize") // 8
    chunk = 1
    while chunk * 2 <= min(context_length, MAX_DEFAULT_PREFILL_CHUNK) and chunk * 2 * widest <= room:
        chunk *= 2
    return min(chunk, context_length)


def compile_model(gguf_path: str, output: str, target: Target | str = "llvmpipe", context_length: int = 1024,
                  progress: Progress | None = None, cpu: str | None = None,
                  prefill_chunk: int | None = None, max_batch: int = 1,
                  gpu_layers: int | None = None, dump_ir: str | None = None,
                  split_cpu: str | None = None) -> CompiledModel:
    """Compile the model in ``gguf_path`` (of any architecture tessera.models.registry has) into the
    directory ``output`` (``cpu``: see ``resolve_target``). ``prefill_chunk``: the most positions one
    prefill call takes (a longer prompt takes several); None picks ``default_prefill_chunk``.
    ``max_batch`` > 1: the batched build `tessera serve --max-batch` runs (export_paged_llm of
    tessera.models.llm_program), for that many sequences.
    ``gpu_layers`` (llama.cpp's --n-gpu-layers): the first that many decoder layers on the GPU target,
    the rest with the head on its CPU partner (``split_devices``, ``split_cpu``); None: all on ``target``.
    ``dump_ir``: a folder that gets the module before the passes and after each one (tessera.build's).

    ``progress(stage, done, total)`` is told each stage as it starts (tessera.build's contract)."""
    target = resolve_target(target, cpu)
    progress = progress or _silent
    start = time.perf_counter()
    if prefill_chunk is not None and prefill_chunk < 1:
        raise CompileError(f"--prefill-chunk must be at least 1, got {prefill_chunk}")
    if context_length < 1:
        raise CompileError(f"--context must be at least 1, got {context_length}")
    if not 1 <= max_batch <= MAX_BATCH:
        raise CompileError(f"--max-batch must be 1 to {MAX_BATCH}, got {max_batch}")
    devices = split_devices(target, max_batch, split_cpu) if gpu_layers is not None else None
    check_output_folder(output, "the compiled model")  # now, not after a compile of minutes
    progress(f"read {os.path.basename(gguf_path)}", 0, 1)
    model_file = load_gguf(gguf_path)
    # Everything that can refuse the file is asked before anything is written: a missing or unsupported
    # tokenizer is an error here, not after the executable is in the output folder.
    spec = model_file.tokenizer
    if spec is None:
        raise GGUFError(f"{os.path.basename(gguf_path)} has no tokenizer (tokenizer.ggml.tokens): a chat model "
                        "needs one")
    tokenizer = build_tokenizer(spec)
    architecture = get_architecture(model_file.architecture, gguf_path)
    model, weights = model_from_gguf(model_file)
    context_length = min(context_length, model_file.config.context_length)
    if gpu_layers is not None and not 0 <= gpu_layers <= model.config.num_layers:
        raise CompileError(f"--gpu-layers must be 0 to {model.config.num_layers} (the model's decoder layers), "
                           f"got {gpu_layers}")
    chunk = min(prefill_chunk or default_prefill_chunk(model.config, context_length, target), context_length)
    stops = sorted({i for i, t in enumerate(spec.tokens) if t in architecture.end_of_turn_tokens}
                   | ({spec.eos_token_id} if spec.eos_token_id is not None else set()))
    # bos_token and eos_token: the spellings a chat template writes (Llama 2's puts "<s>" before
    # each [INST]); the runtimes render templates with them, as transformers does.
    config = {"model": os.path.basename(gguf_path), "context_length": context_length, "prefill_chunk": chunk,
              "stop_token_ids": stops, "chat_template": spec.chat_template, "bos_token_id": spec.bos_token_id,
              "bos_token": _token_text(spec, spec.bos_token_id), "eos_token": _token_text(spec, spec.eos_token_id),
              "add_bos_token": spec.add_bos_token, "chat_format": chat_format_json(spec, os.path.basename(gguf_path)),
              "compiler_version": tessera.__version__}
    if max_batch > 1:
        config |= {"max_batch": max_batch, "page_size": PAGE_SIZE}
    if devices is not None:
        config |= {"gpu_layers": gpu_layers, "devices": list(devices)}
    progress("export the graph", 0, 1)
    exported = export_llm(model, context_length, target.quantized_activations, chunk, max_batch, gpu_layers,
                          devices or ("webgpu", "wasm"))
    config["program"] = program_section(exported)
    mod = nn.bind_weights(exported, weights)
    try:
        exe = tessera.build(mod, target, progress=progress, dump_ir=dump_ir)
    except MemoryPlanError as error:  # the option that fixes it, for people at a command line
        fix = "--prefill-chunk" if error.function in (PREFILL, PREFILL_PAGED) else \
            "--max-batch or --context" if error.function == DECODE_BATCH else "--context"
        raise MemoryPlanError(f"{error}; a context of {context_length} positions with prefill chunks of {chunk} "
                              f"does not fit {target.name}: compile with a smaller {fix}", error.size, error.limit,
                              error.tensors, error.function) from None
    except BindingLimitError as error:
        raise BindingLimitError(f"{error}; {_binding_fix(error, context_length, chunk)}", error.tensor, error.size,
                                error.limit, error.kind, error.function) from None
    progress(f"write {output}", 0, 1)
    os.makedirs(output, exist_ok=True)
    exe.save(output)
    tokenizer.save(os.path.join(output, TOKENIZER))
    with open(os.path.join(output, CHAT_CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)
    return CompiledModel(output, exe, context_length, time.perf_counter() - start)


def _binding_fix(error: BindingLimitError, context_length: int, chunk: int) -> str:
    """The option of `tessera compile` that makes a tensor over the binding limit fit, for people."""
    if error.kind == "state":
        return f"the KV cache of {context_length} positions does not fit: compile with a smaller --context"
    if error.kind == "storage":
        fix = "--prefill-chunk" if error.function in (PREFILL, PREFILL_PAGED) else \
            "--max-batch or --context" if error.function == DECODE_BATCH else "--context"
        return (f"a context of {context_length} positions with prefill chunks of {chunk} does not fit: compile with "
                f"a smaller {fix}")
    return ("no option of this build reads that weight in parts: compile for a target whose devices allow larger "
            "bindings (--target)")


def chat_format_json(spec, model_name: str) -> dict | None:
    """The chat template reduced for runtimes without Jinja (tessera.frontend.chat_format), or None
    with a warning: the native runtime cannot chat with a model whose template does not reduce."""
    if not spec.chat_template:
        reason = "the GGUF has no chat template"
    else:
        reduction = analyze_chat_template(spec.chat_template, _token_text(spec, spec.bos_token_id),
                                          _token_text(spec, spec.eos_token_id))
        if reduction.format is not None:
            return reduction.format.to_json()
        reason = reduction.reason
    warnings.warn(f"{model_name}: chat-config.json gets no chat_format, so the native runtime will not be able to "
                  f"chat with this model: {reason}", stacklevel=2)
    return None


def _token_text(spec, index: int | None) -> str:
    return spec.tokens[index] if index is not None and 0 <= index < len(spec.tokens) else ""


def compile_summary(compiled: CompiledModel) -> str:
    """What `tessera compile` prints when it is done: the target, the kernels, the device memory."""
    exe = compiled.executable
    memory = device_memory(exe)
    rows = [("target", describe_target(exe.target)),
            ("kernels", str(len(exe.kernels))),
            ("weights", f"{mib(memory.weights)} in {memory.weight_tensors} tensors"),
            ("arena", f"{mib(memory.arena)} for {len(exe.functions)} functions"),
            ("KV cache", f"{mib(memory.kv_cache)} in {memory.state_tensors} tensors "
                         f"({compiled.context_length} positions)"),
            ("device memory", f"{mib(memory.total)} in all"),
            ("time", f"{compiled.seconds:.1f} s")]
    return "".join(f"{label + ':':<15}{value}\n" for label, value in rows)


def cached_compile(gguf_path: str, target: Target | str = "llvmpipe", context_length: int = 1024,
                   progress: Progress | None = None, prefill_chunk: int | None = None, max_batch: int = 1,
                   gpu_layers: int | None = None, split_cpu: str | None = None) -> str:
    """The compiled directory for this file, target, context (and prefill chunk, when one is asked
    for; the batch, for a batched build; the split and its CPU preset), compiling it on first use."""
    target = resolve_target(target)
    check_gguf_file(gguf_path)  # a missing file is named, and a FIFO is not opened to be hashed
    digest = hashlib.sha256()
    with open(gguf_path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    name = (f"{digest.hexdigest()[:16]}-tessera{tessera.__version__}+{compiler_fingerprint()}-"
            f"{target.name}-ctx{context_length}" + (f"-chunk{prefill_chunk}" if prefill_chunk else "")
            + (f"-batch{max_batch}" if max_batch > 1 else "")
            + (f"-gpu{gpu_layers}" if gpu_layers is not None else "")
            + (f"-{split_cpu}" if gpu_layers is not None and split_cpu else ""))
    directory = os.path.join(cache_root(), name)
    if not os.path.exists(os.path.join(directory, CHAT_CONFIG)):  # written last: a complete compile
        # A folder of this process's own: two processes (parallel test workers, two servers) may compile
        # the same model at once, and the first to finish puts its folder in place.
        partial = f"{directory}.partial-{os.getpid()}"
        compile_model(gguf_path, partial, target, context_length, progress,
                      prefill_chunk=prefill_chunk, max_batch=max_batch, gpu_layers=gpu_layers, split_cpu=split_cpu)
        if os.path.exists(directory) and not os.path.exists(os.path.join(directory, CHAT_CONFIG)):
            shutil.rmtree(directory, ignore_errors=True)  # an interrupted compile of an older version
        try:
            os.replace(partial, directory)
        except OSError:  # another process's complete compile is there already
            shutil.rmtree(partial, ignore_errors=True)
    return directory


def cache_root() -> str:
    return os.environ.get("TESSERA_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "tessera"))


def compiler_fingerprint() -> str:
    """A digest of the compiler's own source (Python, and the C the CPU backend builds kernels
    with): a compile cached by an older (or edited) compiler is not reused, even when the version
    number did not change."""
    from tessera import codegen

    digest = hashlib.sha256()
    for package in (tessera, codegen):
        root = os.path.dirname(package.__file__)
        for folder, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for name in sorted(f for f in files if f.endswith((".py", ".c"))):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    digest.update(f.read())
    return digest.hexdigest()[:10]


def _silent(stage: str, done: int, total: int) -> None:
    pass
