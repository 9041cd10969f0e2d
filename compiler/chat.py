"""Compile a GGUF chat model and talk to it: the engine behind `tessera compile` and `tessera chat`.

A compiled model is a directory (docs/cli.md): the executable with the weights in its tensor
cache, ``tokenizer.json`` (Hugging Face format, rebuilt from the GGUF vocabulary) and
``chat-config.json`` (context length, stop tokens, chat template). ``tessera chat`` compiles into
an on-disk cache keyed by the model file's hash and the compiler (version and source digest), so later runs start
from the cache. A chat keeps its KV cache across turns: a new turn prefills only its new tokens.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass

import numpy as np

from . import __version__
from .ir.errors import RuntimeCheckError, TesseraError

CHAT_CONFIG = "chat-config.json"


class ChatError(TesseraError):
    """A turn that cannot be run (e.g. longer than the context window)."""


def compile_model(gguf_path: str, output: str, target="llvmpipe", context_length: int = 1024) -> str:
    from . import build, nn
    from .frontend import load_gguf
    from .frontend.tokenizer import build_tokenizer
    from .models.from_gguf import llama_from_gguf
    from .models.llama import export_llm

    model_file = load_gguf(gguf_path)
    model, weights = llama_from_gguf(model_file)
    context_length = min(context_length, model_file.config.context_length)
    exe = build(nn.bind_weights(export_llm(model, context_length), weights), target)
    os.makedirs(output, exist_ok=True)
    exe.save(output)
    spec = model_file.tokenizer
    build_tokenizer(spec).save(os.path.join(output, "tokenizer.json"))
    stops = sorted({i for i, t in enumerate(spec.tokens) if t in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>")}
                   | ({spec.eos_token_id} if spec.eos_token_id is not None else set()))
    config = {"model": os.path.basename(gguf_path), "context_length": context_length,
              "stop_token_ids": stops, "chat_template": spec.chat_template, "bos_token_id": spec.bos_token_id,
              "add_bos_token": spec.add_bos_token, "compiler_version": __version__}
    with open(os.path.join(output, CHAT_CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)
    return output


def cached_compile(gguf_path: str, target="llvmpipe", context_length: int = 1024) -> str:
    """The compiled directory for this file, target and context, compiling it on first use."""
    digest = hashlib.sha256()
    with open(gguf_path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    name = (f"{digest.hexdigest()[:16]}-tessera{__version__}+{compiler_fingerprint()}-"
            f"{getattr(target, 'name', target)}-ctx{context_length}")
    root = os.environ.get("TESSERA_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "tessera"))
    directory = os.path.join(root, name)
    if not os.path.exists(os.path.join(directory, CHAT_CONFIG)):  # written last: a complete compile
        compile_model(gguf_path, directory + ".partial", target, context_length)
        if os.path.exists(directory):
            import shutil

            shutil.rmtree(directory)
        os.replace(directory + ".partial", directory)
    return directory


def compiler_fingerprint() -> str:
    """A digest of the compiler's own source: a compile cached by an older (or edited) compiler
    is not reused, even when the version number did not change."""
    import tessera
    from tessera import codegen

    digest = hashlib.sha256()
    for package in (tessera, codegen):
        root = os.path.dirname(package.__file__)
        for folder, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    digest.update(f.read())
    return digest.hexdigest()[:10]


@dataclass
class Sampling:
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: all
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None


class ChatSession:
    def __init__(self, directory: str):
        from tokenizers import Tokenizer

        from .vm import Executable, VirtualMachine

        with open(os.path.join(directory, CHAT_CONFIG), encoding="utf-8") as f:
            self.config = json.load(f)
        self.tokenizer = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
        self.vm = VirtualMachine(Executable.load(directory))
        self.context_length = self.config["context_length"]
        self.stop_ids = set(self.config["stop_token_ids"])
        self.tokens: list[int] = []  # what the KV cache holds

    def reset(self) -> None:
        self.vm.reset_state()
        self.tokens = []

    def encode_chat(self, messages: list[dict]) -> list[int]:
        from .frontend.tokenizer import render_chat

        text = render_chat(self.config["chat_template"], messages) if self.config.get("chat_template") else \
            "".join(m["content"] for m in messages)
        return self.tokenizer.encode(text).ids

    def generate(self, prompt_ids: list[int], max_tokens: int = 128, sampling: Sampling | None = None,
                 on_text=None) -> dict:
        """Continue the cached conversation with ``prompt_ids`` (all tokens of the conversation so far;
        the part already in the cache is not computed again) and generate up to ``max_tokens``."""
        sampling = sampling or Sampling()
        common = 0
        while common < min(len(self.tokens), len(prompt_ids)) and self.tokens[common] == prompt_ids[common]:
            common += 1
        # Cache rows past the common prefix are stale: the prefill overwrites them from `common` on.
        common = min(common, len(prompt_ids) - 1)  # at least one token to compute logits from
        new = prompt_ids[common:]
        if len(prompt_ids) + 1 > self.context_length:
            raise ChatError(f"the prompt has {len(prompt_ids)} tokens; the context window is {self.context_length}")
        rng = np.random.default_rng(sampling.seed)
        start = time.perf_counter()
        try:
            logits = self.vm.call_on_device("prefill", np.asarray(new, np.int32), len(prompt_ids))
        except RuntimeCheckError as error:
            self.reset()
            raise ChatError(str(error)) from None
        self.tokens = list(prompt_ids)
        generated: list[int] = []
        token = self.next_token(logits, self.tokens, sampling, rng)
        prefill_seconds = time.perf_counter() - start  # to the first token, as users feel it
        text = ""
        start = time.perf_counter()
        while token not in self.stop_ids:
            generated.append(token)
            piece = self.tokenizer.decode(generated)
            if on_text is not None and len(piece) > len(text):
                on_text(piece[len(text):])
            text = piece
            if len(generated) >= max_tokens or len(self.tokens) + 1 >= self.context_length:
                break
            self.tokens.append(token)
            logits = self.vm.call_on_device("decode", np.array([token], np.int32), len(self.tokens))
            token = self.next_token(logits, self.tokens, sampling, rng)
        decode_seconds = time.perf_counter() - start
        return {"reply": text, "prompt_tokens": len(new), "completion_tokens": len(generated),
                "prefill_tokens_per_s": len(new) / prefill_seconds if prefill_seconds else 0.0,
                "decode_tokens_per_s": max(len(generated) - 1, 0) / decode_seconds if decode_seconds else 0.0}


    def next_token(self, logits, history: list[int], sampling: Sampling, rng) -> int:
        """The next id, chosen on the device by the executable's ``sample`` functions: only the id
        comes back. ``history`` is what the repetition penalty applies to; ``rng`` draws the uniform
        number a seeded sample needs."""
        greedy = sampling.temperature <= 0
        params = np.array([sampling.temperature, sampling.top_k, sampling.top_p, sampling.repetition_penalty,
                           0.0 if greedy else rng.random()], np.float32)
        ids = np.asarray(history[-self.context_length:], np.int32)
        return int(self.vm["sample_greedy" if greedy else "sample"](logits, ids, params)[0])
