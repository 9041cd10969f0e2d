"""`tessera chat`: talk to a compiled model on this machine, through the Python VM.

A chat keeps its KV cache across turns: a new turn prefills only its new tokens. Tokens are chosen
on the device by the executable's ``sample`` functions; only the id comes back.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass

import numpy as np
from tessera.ir import RuntimeCheckError, TesseraError


class ChatError(TesseraError):
    """A turn that cannot be run (e.g. longer than the context window)."""


@dataclass
class Sampling:
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: all
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None


class NativeChatSession:
    """The same chat on runtime-native (tessera.native over libtessera's C API): the C runtime renders
    the conversation with the chat format of chat-config.json, tokenizes, prefills what its KV cache
    lacks, samples and streams."""

    def __init__(self, directory: str, n_threads: int = 0):
        from tessera.native import NativeModel

        self.model = NativeModel(directory, n_threads=n_threads)
        self.session = self.model.session()

    def reset(self) -> None:
        self.session.reset()

    def reply(self, messages: list[dict], max_tokens: int, sampling: Sampling, on_text=None) -> dict:
        from tessera.native import NativeError

        try:
            return self.session.chat(messages, max_tokens=max_tokens, temperature=sampling.temperature,
                                     top_p=sampling.top_p, top_k=sampling.top_k,
                                     repetition_penalty=sampling.repetition_penalty, seed=sampling.seed or 0,
                                     on_piece=on_text)
        except NativeError as error:
            raise ChatError(str(error)) from None


class ChatSession:
    def __init__(self, directory: str):
        from tessera.vm import Executable, VirtualMachine

        from .bundle_json import build_files
        from .chat_files import read_chat_config, read_tokenizer

        files = build_files(directory)  # a build in a bundle shares the bundle's weights and tokenizer
        self.tokenizer = read_tokenizer(files.tokenizer)
        self.config = read_chat_config(files.chat_config, self.tokenizer.get_vocab_size())
        # Whatever the build's target: the VM picks the device that runs it, or says why it cannot.
        self.vm = VirtualMachine(Executable.load(directory, files.tensor_cache))
        self.context_length = self.config["context_length"]
        # The bound prefill's new positions (its symbol n) were planned for: this build's own, where
        # chat-config.json may be shared by a bundle's builds; older builds plan the whole context.
        bound = self.vm.exe.functions.get("prefill", {}).get("symbols", {}).get("n", {}).get("upper_bound")
        self.prefill_chunk = min(int(bound or self.config.get("prefill_chunk") or self.context_length),
                                 self.context_length)
        self.stop_ids = set(self.config["stop_token_ids"])
        self.tokens: list[int] = []  # what the KV cache holds

    def reset(self) -> None:
        self.vm.reset_state()
        self.tokens = []

    def encode_chat(self, messages: list[dict]) -> list[int]:
        from tessera.frontend.tokenizer import render_chat

        text = render_chat(self.config["chat_template"], messages, bos_token=self.config.get("bos_token", ""),
                           eos_token=self.config.get("eos_token", "")) if self.config.get("chat_template") else \
            "".join(m["content"] for m in messages)
        return self.tokenizer.encode(text).ids

    def _prefill(self, prompt_ids: list[int], common: int):
        """Prefill ``prompt_ids[common:]`` in chunks of at most the build's prefill chunk, each call after
        the last; the last chunk's logits are the prompt's."""
        chunk = self.prefill_chunk
        logits = None
        for begin in range(common, len(prompt_ids), chunk):
            end = min(begin + chunk, len(prompt_ids))
            logits = self.vm.call_on_device("prefill", np.asarray(prompt_ids[begin:end], np.int32), end)
        return logits

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
            logits = self._prefill(prompt_ids, common)
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

    def reply(self, messages: list[dict], max_tokens: int, sampling: Sampling, on_text=None) -> dict:
        """One turn: the reply to the conversation ``messages`` (the whole of it so far)."""
        return self.generate(self.encode_chat(messages), max_tokens, sampling, on_text)

    def next_token(self, logits, history: list[int], sampling: Sampling, rng) -> int:
        """The next id, chosen on the device by the executable's ``sample`` functions: only the id
        comes back. ``history`` is what the repetition penalty applies to; ``rng`` draws the uniform
        number a seeded sample needs."""
        greedy = sampling.temperature <= 0
        params = np.array([sampling.temperature, sampling.top_k, sampling.top_p, sampling.repetition_penalty,
                           0.0 if greedy else rng.random()], np.float32)
        ids = np.asarray(history[-self.context_length:], np.int32)
        return int(self.vm["sample_greedy" if greedy else "sample"](logits, ids, params)[0])


def chat_once(session: ChatSession, prompt: str, max_tokens: int, sampling: Sampling, as_json: bool = False) -> None:
    """One turn: the reply streams to stdout, then its speeds to stderr; or everything as JSON."""
    result = session.reply([{"role": "user", "content": prompt}], max_tokens, sampling,
                           on_text=None if as_json else _stream)
    if as_json:
        print(json.dumps(result))
    else:
        _print_speeds(result)


def chat_interactive(session: ChatSession, max_tokens: int, sampling: Sampling) -> None:
    """Turns read from stdin until an empty line or end of input; a failed turn is reported and the
    conversation goes on without it."""
    messages: list[dict] = []
    print("Chat with the model; an empty line or Ctrl-D ends.", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            return
        if not line.strip():
            return
        messages.append({"role": "user", "content": line})
        try:
            result = session.reply(messages, max_tokens, sampling, on_text=_stream)
        except ChatError as error:
            messages.pop()
            print(f"error: {error}", file=sys.stderr)
            continue
        _print_speeds(result)
        messages.append({"role": "assistant", "content": result["reply"]})


def _stream(piece: str) -> None:
    print(piece, end="", flush=True)


def _print_speeds(result: dict) -> None:
    print(f"\n[prefill {result['prefill_tokens_per_s']:.1f} tok/s, decode "
          f"{result['decode_tokens_per_s']:.1f} tok/s]", file=sys.stderr)
