"""`tessera chat`: talk to a compiled model on this machine, through the Python VM.

A chat keeps its KV cache across turns: a new turn prefills only its new tokens. Tokens are chosen
on the device by the executable's ``sample`` functions; only the id comes back. The functions called
are those the ``program`` section of chat-config.json names (tessera.models.llm_program). A conversation that
no longer fits the context loses its oldest turns, and the user is told (conversation.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
from tessera.frontend.chat_template import ChatTemplateError
from tessera.ir import RuntimeCheckError
from tessera.models.llm_program import (
    DECODE,
    PREFILL,
    PREFILL_PAGED,
    SAMPLE,
    SAMPLE_GREEDY,
    ProgramError,
    read_program,
    sampler_params,
)

from .conversation import ChatError, FittedConversation, check_max_tokens, check_messages, fit_conversation

__all__ = ["ChatError", "ChatSession", "NativeChatSession", "Sampling", "chat_interactive", "chat_once",
           "compiled_context", "render_prompt"]


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

    def __init__(self, directory: str, n_threads: int = 0, device: str = "auto"):
        from tessera.frontend.chat_format import ChatFormat
        from tessera.native import NativeModel

        # Refuses a context past the build's, and a device that this machine lacks or that cannot run the build.
        self.model = NativeModel(directory, n_threads=n_threads, device=device)
        self.session = self.model.session()
        self.context_length = self.model.context_length
        with open(os.path.join(directory, "chat-config.json"), encoding="utf-8") as f:
            chat_format = json.load(f).get("chat_format")
        # The C runtime lays the conversation out with the chat format; so does fit, to count its tokens.
        self.chat_format = ChatFormat.from_json(chat_format) if chat_format else None

    def reset(self) -> None:
        self.session.reset()

    def fit(self, messages: list[dict], max_tokens: int) -> FittedConversation:
        """``messages`` without the oldest turns that no longer fit (conversation.fit_conversation)."""
        if self.chat_format is None:  # the C runtime refuses to chat, and says why
            check_messages(messages)
            return FittedConversation(messages, [], 0, self.context_length)
        return fit_conversation(messages, self.encode_chat, self.context_length, max_tokens)

    def encode_chat(self, messages: list[dict]) -> list[int]:
        return self.model.tokenize(self.chat_format.render(messages), add_special=True, parse_special=True)

    def reply(self, messages: list[dict], max_tokens: int, sampling: Sampling, on_text=None) -> dict:
        """One turn: the reply to ``messages`` (the whole conversation so far, its oldest turns left out
        if it no longer fits: ``dropped_messages`` says how many)."""
        from tessera.native import NativeError

        fitted = self.fit(messages, max_tokens)
        messages = fitted.messages
        try:
            return self.session.chat(messages, max_tokens=max_tokens, temperature=sampling.temperature,
                                     top_p=sampling.top_p, top_k=sampling.top_k,
                                     repetition_penalty=sampling.repetition_penalty, seed=sampling.seed or 0,
                                     on_piece=on_text) | {"dropped_messages": fitted.dropped}
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
        try:
            program = read_program(self.config, self.vm.exe.functions, files.chat_config)
        except ProgramError as error:
            raise ChatError(str(error)) from None
        if program.batched:
            raise ChatError(f"{directory} is a batched build (compiled with --max-batch), which only `tessera serve "
                            "--max-batch` runs; compile without --max-batch to chat")
        self.prefill_function, self.decode_function = program.function(PREFILL), program.function(DECODE)
        self.sample_functions = {False: program.function(SAMPLE), True: program.function(SAMPLE_GREEDY)}
        compiled = compiled_context(self.vm.exe.functions, (self.prefill_function, self.decode_function))
        if compiled is not None and self.context_length > compiled:
            raise ChatError(f"chat-config.json asks for a context of {self.context_length} tokens, but this build "
                            f"was compiled for {compiled}: recompile with --context {self.context_length}, or set "
                            f"context_length to at most {compiled}")
        # The bound prefill's new positions (its symbol n) were planned for: this build's own, where
        # chat-config.json may be shared by a bundle's builds; older builds plan the whole context.
        bound = self.vm.exe.functions.get(self.prefill_function, {}).get("symbols", {}).get("n", {}).get("upper_bound")
        self.prefill_chunk = min(int(bound or self.config.get("prefill_chunk") or self.context_length),
                                 self.context_length)
        self.stop_ids = set(self.config["stop_token_ids"])
        self.tokens: list[int] = []  # what the KV cache holds

    def reset(self) -> None:
        self.vm.reset_state()
        self.tokens = []

    def encode_chat(self, messages: list[dict]) -> list[int]:
        return self.tokenizer.encode(render_prompt(self.config, messages)).ids

    def fit(self, messages: list[dict], max_tokens: int) -> FittedConversation:
        """``messages`` without the oldest turns that no longer fit (conversation.fit_conversation)."""
        return fit_conversation(messages, self.encode_chat, self.context_length, max_tokens)

    def _prefill(self, prompt_ids: list[int], common: int):
        """Prefill ``prompt_ids[common:]`` in chunks of at most the build's prefill chunk, each call after
        the last; the last chunk's logits are the prompt's."""
        chunk = self.prefill_chunk
        logits = None
        for begin in range(common, len(prompt_ids), chunk):
            end = min(begin + chunk, len(prompt_ids))
            logits = self.vm.call_on_device(self.prefill_function, np.asarray(prompt_ids[begin:end], np.int32), end)
        return logits

    def generate(self, prompt_ids: list[int], max_tokens: int = 128, sampling: Sampling | None = None,
                 on_text=None) -> dict:
        """Continue the cached conversation with ``prompt_ids`` (all tokens of the conversation so far;
        the part already in the cache is not computed again) and generate up to ``max_tokens``."""
        sampling = sampling or Sampling()
        check_max_tokens(max_tokens)
        if not prompt_ids:
            raise ChatError("the prompt is empty once laid out by the chat template and tokenized")
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
            logits = self.vm.call_on_device(self.decode_function, np.array([token], np.int32), len(self.tokens))
            token = self.next_token(logits, self.tokens, sampling, rng)
        decode_seconds = time.perf_counter() - start
        # As runtime-native counts them: the whole prompt, and the part of it computed (the rest was cached).
        return {"reply": text, "prompt_tokens": len(prompt_ids), "prefilled_tokens": len(new),
                "completion_tokens": len(generated),
                "prefill_tokens_per_s": len(new) / prefill_seconds if prefill_seconds else 0.0,
                "decode_tokens_per_s": max(len(generated) - 1, 0) / decode_seconds if decode_seconds else 0.0}

    def reply(self, messages: list[dict], max_tokens: int, sampling: Sampling, on_text=None) -> dict:
        """One turn: the reply to the conversation ``messages`` (the whole of it so far, its oldest turns
        left out if it no longer fits: ``dropped_messages`` says how many)."""
        fitted = self.fit(messages, max_tokens)
        return self.generate(fitted.prompt_ids, max_tokens, sampling, on_text) | {"dropped_messages": fitted.dropped}

    def next_token(self, logits, history: list[int], sampling: Sampling, rng) -> int:
        """The next id, chosen on the device by the executable's ``sample`` functions: only the id
        comes back. ``history`` is what the repetition penalty applies to; ``rng`` draws the uniform
        number a seeded sample needs."""
        greedy = sampling.temperature <= 0
        params = sampler_params(sampling.temperature, sampling.top_k, sampling.top_p, sampling.repetition_penalty,
                                0.0 if greedy else rng.random())
        ids = np.asarray(history[-self.context_length:], np.int32)
        return int(self.vm[self.sample_functions[greedy]](logits, ids, params)[0])


def render_prompt(config: dict, messages: list[dict]) -> str:
    """``messages`` laid out by the chat template of chat-config.json (``config``): the prompt's text."""
    from tessera.frontend.tokenizer import render_chat

    if not config.get("chat_template"):
        return "".join(m["content"] for m in messages)
    return render_chat(config["chat_template"], messages, bos_token=config.get("bos_token", ""),
                       eos_token=config.get("eos_token", ""))


def compiled_context(functions: dict, names: tuple[str, ...] = (PREFILL, DECODE, PREFILL_PAGED)) -> int | None:
    """The context a build was compiled for: the upper bound of ``total`` (the positions in the KV
    cache) in the functions ``names`` (by default the program's roles, which name themselves in every
    build so far); None for a build that states none."""
    bounds = [f.get("symbols", {}).get("total", {}).get("upper_bound") for name, f in functions.items()
              if name in names]
    bounds = [int(b) for b in bounds if b is not None]
    return min(bounds) if bounds else None


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
    conversation goes on without it. When the conversation no longer fits the context, its oldest
    turns are left out for good, and a note on stderr says so."""
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
            fitted = session.fit(messages, max_tokens)
            if fitted.dropped:
                print(f"note: {fitted.notice}", file=sys.stderr)
                messages[:] = fitted.messages
            result = session.reply(messages, max_tokens, sampling, on_text=_stream)
        except (ChatError, ChatTemplateError) as error:
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
