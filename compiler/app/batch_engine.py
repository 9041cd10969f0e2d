"""Continuous batching behind `tessera serve --max-batch B` (docs/serve.md): up to B requests decode
together, one step at a time, over a KV cache in pages that all of them share.

A batched build (`tessera compile --max-batch B`: export_paged_llm of tessera.models.llm_program) has
two functions where a chat build has prefill and decode, named by the ``program`` section of its
chat-config.json: ``prefill_paged`` computes a chunk of one
sequence's prompt into that sequence's pages, ``decode_batch`` one token of each running sequence
at once (the projections become GEMMs over the batch; attention reads each sequence's own pages,
tessera.op.paged). ``PagePool`` hands out the pool's pages: a sequence takes one more each
``page_size`` positions and gives them all back when it finishes, so a short request never holds a
whole context's worth; the full ones are remembered, and a later request whose prompt starts with
the same tokens shares them and prefills only the rest (prefix caching). The pool has room for B
sequences of the whole context, so an admitted request never waits for pages.

``BatchEngine``'s worker thread, in a loop: admits waiting requests while fewer than B run (each is
laid out by the chat template, fitted to the context and prefilled, then samples its first token),
runs one ``decode_batch`` step for every running request, and streams each one's new text; a
request that finishes (a stop token or string, max_tokens, the context) or is cancelled leaves
between steps without stopping the others. Tokens are chosen on the host from the step's logits by
the sampler's own statement (the reference of tessera.op's sample_token, what the ``sample``
kernels compute), so a request's greedy reply does not depend on what else is in the batch: its row
is computed by the same kernels whatever the other rows hold.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np
from tessera.ir import TesseraError
from tessera.models.llm_program import DECODE_BATCH, PREFILL_PAGED, ProgramError, read_program, sampler_params
from tessera.op import get_op

from .chat import ChatError, Sampling, render_prompt
from .conversation import check_max_tokens, fit_conversation
from .engine import Completion, Failed, Finished, Piece, QueuedEngine, RequestHandle, StopText

# The sampler's own statement (the numpy reference of the operator the ``sample`` kernels compute).
sample_reference = get_op("sample_token").reference


class BatchBuildError(TesseraError):
    """A folder that holds no batched build, or one this engine cannot run."""


class PagePool:
    """The pool's pages: handed out one at a time, given back together, and kept as a prefix cache.

    A full page's keys and values depend only on the tokens up to its end, so when a request ends,
    each of its full pages is remembered under the tokens it completes (a chain of page keys, as
    vLLM's automatic prefix caching keys its blocks). A new request whose prompt starts with the same
    tokens (the chat template's system prompt; the earlier turns of the conversation it continues)
    shares those pages, read-only (a request writes only past them), and prefills only the rest. A
    remembered page no request holds is evicted when the free pages run out, the least recently
    used first (the tail of a prefix before its head)."""

    def __init__(self, pages: int, page_size: int):
        self.page_size = page_size
        self._free = list(range(pages - 1, -1, -1))  # pop() hands out page 0 first
        self._key_of: dict[int, tuple] = {}  # a remembered page -> its key
        self._page_of: dict[tuple, int] = {}  # a key -> its remembered page
        self._holders: dict[int, int] = {}  # a remembered page -> the requests holding it
        self._used: dict[int, int] = {}  # a remembered page -> when it was last matched (a counter)
        self._clock = 0

    @property
    def free(self) -> int:
        """Pages a request could take now: the free ones and the remembered ones nobody holds."""
        return len(self._free) + sum(1 for page in self._key_of if not self._holders[page])

    @property
    def remembered(self) -> int:
        return len(self._key_of)

    def take(self) -> int:
        if not self._free:
            idle = [page for page in self._key_of if not self._holders[page]]
            if not idle:  # the pool is sized so that this cannot happen
                raise ChatError("the KV cache has no free page left")
            self._forget(min(idle, key=lambda page: self._used[page]))
        return self._free.pop()

    def match(self, tokens: list[int]) -> list[int]:
        """The remembered pages that hold the longest whole-page prefix of ``tokens`` (all but its last
        token: a prompt computes one position at least), now held by the caller."""
        pages, key = [], ()
        size = self.page_size
        for end in range(size, len(tokens), size):
            key = (key, tuple(tokens[end - size:end]))
            page = self._page_of.get(key)
            if page is None:
                break
            pages.append(page)
        for page in reversed(pages):  # the head of a prefix is used last, so evicted last
            self._clock += 1
            self._used[page] = self._clock
            self._holders[page] += 1
        return pages

    def give_back(self, pages: list[int], tokens: list[int] | None = None) -> None:
        """Return a request's pages; with ``tokens`` (what they hold, in order), remember its full ones."""
        key = ()
        size = self.page_size
        for index, page in enumerate(pages):
            if page in self._key_of:  # shared: the prefix it holds is remembered already
                self._holders[page] -= 1
                key = self._key_of[page]
                continue
            end = (index + 1) * size
            if tokens is not None and end <= len(tokens) and key is not None:
                key = (key, tuple(tokens[end - size:end]))
                if key not in self._page_of:
                    self._remember(page, key)
                    continue
            key = None  # past the first page that is not remembered, nothing can be matched
            self._free.append(page)
        pages.clear()

    def _remember(self, page: int, key: tuple) -> None:
        self._clock += 1
        self._key_of[page], self._page_of[key], self._holders[page], self._used[page] = key, page, 0, self._clock

    def _forget(self, page: int) -> None:
        del self._page_of[self._key_of.pop(page)]
        del self._holders[page], self._used[page]
        self._free.append(page)


class PagedModel:
    """A batched build, its tokenizer and chat configuration, on the Python VM or runtime-native."""

    def __init__(self, directory: str, runtime: str = "python", n_threads: int = 0, device: str = "auto"):
        from .chat_files import read_chat_config, read_tokenizer

        path = os.path.join(directory, "chat-config.json")
        self.tokenizer = read_tokenizer(os.path.join(directory, "tokenizer.json"))
        self.config = read_chat_config(path, self.tokenizer.get_vocab_size())
        try:
            program = read_program(self.config, executable_functions(directory), path)
        except ProgramError as error:
            raise BatchBuildError(str(error)) from None
        if not program.batched:
            raise BatchBuildError(f"{directory} is not a batched build: its program has no {PREFILL_PAGED} and "
                                  f"{DECODE_BATCH} (compile it with --max-batch B)")
        # The batch and the page size are the program section's (chat-config.schema.json requires both there).
        self.prefill_function, self.decode_function = program.function(PREFILL_PAGED), program.function(DECODE_BATCH)
        self.max_batch = program.max_batch
        self.context_length = self.config["context_length"]
        self.page_size = program.page_size
        self.pages_per_sequence = -(-self.context_length // self.page_size)
        self.prefill_chunk = min(int(self.config.get("prefill_chunk") or self.context_length), self.context_length)
        self.stop_ids = set(self.config["stop_token_ids"])
        if runtime == "native":
            from tessera.native import NativeError, NativeModel

            try:
                native = NativeModel(directory, n_threads=n_threads, device=device)
            except NativeError as error:
                raise BatchBuildError(str(error)) from None
            self._call = lambda name, *args: native.call(name, *args)[0]
            self._keep = native
        else:
            from tessera.vm import Executable, VirtualMachine

            vm = VirtualMachine(Executable.load(directory))
            self._call = lambda name, *args: vm.call_on_device(name, *args).numpy()
            self._keep = vm

    def encode_chat(self, messages: list[dict]) -> list[int]:
        return self.tokenizer.encode(render_prompt(self.config, messages)).ids

    def table(self, pages_of_rows: list[list[int]]) -> np.ndarray:
        """The page table of some sequences: their pages, then page 0 where they have none yet (the
        kernels never read a position a sequence has not reached)."""
        table = np.zeros((len(pages_of_rows), self.pages_per_sequence), np.int32)
        for row, pages in enumerate(pages_of_rows):
            table[row, :len(pages)] = pages
        return table

    def prefill(self, ids: list[int], total: int, pages: list[int]) -> np.ndarray:
        """Logits (vocab,) of the last of ``ids``, positions total - len(ids) .. total - 1."""
        return self._call(self.prefill_function, np.asarray(ids, np.int32), total, self.table([pages]))[0]

    def decode(self, ids: list[int], positions: list[int], pages_of_rows: list[list[int]]) -> np.ndarray:
        """Logits (b, vocab): token ``ids[i]`` at ``positions[i]`` of sequence i."""
        return self._call(self.decode_function, np.asarray(ids, np.int32), np.asarray(positions, np.int32),
                          self.table(pages_of_rows))


def executable_functions(directory: str) -> list[str]:
    """The functions of the build in ``directory`` by its executable.json (checked as a whole when a
    runtime loads it), for checking the program section before either runtime loads the build."""
    from tessera.vm import read_json

    document = read_json(directory, "executable.json", "executable", error=BatchBuildError)
    functions = document.get("functions") if isinstance(document, dict) else None
    return list(functions) if isinstance(functions, dict) else []


@dataclass
class _Sequence:
    """One running request: what its pages hold, what it has said."""

    handle: RequestHandle
    max_tokens: int
    prompt_tokens: int
    visible: StopText
    rng: np.random.Generator
    tokens: list[int]  # in the KV cache, in order
    pages: list[int] = field(default_factory=list)
    cached_tokens: int = 0  # of the prompt, found in remembered pages
    generated: list[int] = field(default_factory=list)
    text: str = ""
    next_token: int = -1  # sampled, to be fed at position len(tokens)
    finish_reason: str = ""
    started: float = 0.0  # when it was admitted
    prefill_tokens_per_s: float = 0.0
    decode_started: float = 0.0


class BatchEngine(QueuedEngine):
    """Requests decoded ``max_batch`` at a time on a batched build (see the module's docstring)."""

    def __init__(self, model: PagedModel, model_id: str, max_queue: int = 8):
        self.model = model
        self.max_batch = model.max_batch
        self.pages = PagePool(model.max_batch * model.pages_per_sequence, model.page_size)
        self.widest_step = 0  # the most requests one decode step has run together
        super().__init__(model_id, model.context_length, max_queue)

    def _work(self) -> None:
        running: list[_Sequence] = []
        while True:
            with self._lock:
                while not self._queue and not running and not self._closed:
                    self._lock.wait()
                if self._closed:
                    for sequence in running:
                        self.pages.give_back(sequence.pages)
                    return
                admitted = []
                while self._queue and len(running) + len(admitted) < self.max_batch:
                    admitted.append(self._queue.popleft())
                self._running = [s.handle for s in running] + admitted
            for handle in admitted:  # a new request's prefill joins between decode steps
                sequence = self._start(handle)
                if sequence is not None:
                    running.append(sequence)
            running = [s for s in running if not self._leave_if_done(s)]
            if running:
                self._step(running)
                running = [s for s in running if not self._leave_if_done(s)]
            with self._lock:
                self._running = [s.handle for s in running]

    def _start(self, handle: RequestHandle) -> _Sequence | None:
        """Fit, prefill and sample the first token of a new request; None when it failed at once."""
        model, generation = self.model, handle.generation
        started = time.perf_counter()
        sequence = None
        try:
            max_tokens = model.context_length if generation.max_tokens is None else generation.max_tokens
            check_max_tokens(max_tokens)
            fitted = fit_conversation(generation.messages, model.encode_chat, model.context_length, max_tokens)
            prompt = fitted.prompt_ids
            if not prompt:
                raise ChatError("the prompt is empty once laid out by the chat template and tokenized")
            if len(prompt) + 1 > model.context_length:
                raise ChatError(f"the prompt has {len(prompt)} tokens; the context window is {model.context_length}")
            sequence = _Sequence(handle, max_tokens, len(prompt), StopText(generation.stop),
                                 np.random.default_rng(generation.sampling.seed), list(prompt), started=started)
            # The prompt's head may be in remembered pages already (PagePool): only the rest is computed.
            sequence.pages = self.pages.match(prompt)
            sequence.cached_tokens = len(sequence.pages) * model.page_size
            logits = None
            for begin in range(sequence.cached_tokens, len(prompt), model.prefill_chunk):
                end = min(begin + model.prefill_chunk, len(prompt))
                self._reserve(sequence, end)
                logits = model.prefill(prompt[begin:end], end, sequence.pages)
            self._sampled(sequence, logits)
            seconds = time.perf_counter() - started
            computed = len(prompt) - sequence.cached_tokens
            sequence.prefill_tokens_per_s = computed / seconds if seconds else 0.0
            sequence.decode_started = time.perf_counter()
            return sequence
        except Exception as error:  # noqa: BLE001 (the request fails, the others go on)
            if sequence is not None:
                self.pages.give_back(sequence.pages)
            handle.emit(Failed(error))
            return None

    def _reserve(self, sequence: _Sequence, positions: int) -> None:
        """Pages for positions 0 .. positions - 1."""
        while len(sequence.pages) * self.model.page_size < positions:
            sequence.pages.append(self.pages.take())

    def _step(self, running: list[_Sequence]) -> None:
        """One decode step of every running request: each feeds its sampled token and samples the next."""
        for sequence in running:
            self._reserve(sequence, len(sequence.tokens) + 1)
        self.widest_step = max(self.widest_step, len(running))
        try:
            logits = self.model.decode([s.next_token for s in running], [len(s.tokens) for s in running],
                                       [s.pages for s in running])
        except Exception as error:  # noqa: BLE001 (a failed step fails the requests in it, not the server)
            for sequence in running:
                sequence.finish_reason = "failed"
                sequence.handle.emit(Failed(error))
            return
        for row, sequence in enumerate(running):
            sequence.tokens.append(sequence.next_token)
            self._sampled(sequence, logits[row])

    def _sampled(self, sequence: _Sequence, logits: np.ndarray) -> None:
        """Choose the next token from ``logits`` and show what it adds (ChatSession.generate's rules:
        the same tokens count, so usage agrees with the serial engine)."""
        sampling: Sampling = sequence.handle.generation.sampling
        greedy = sampling.temperature <= 0
        params = sampler_params(sampling.temperature, sampling.top_k, sampling.top_p, sampling.repetition_penalty,
                                0.0 if greedy else sequence.rng.random())
        token = int(sample_reference(logits, np.asarray(sequence.tokens, np.int32), params, greedy)[0])
        if token in self.model.stop_ids:
            sequence.finish_reason = "stop"
            return
        sequence.generated.append(token)
        piece = self.model.tokenizer.decode(sequence.generated)
        if len(piece) > len(sequence.text):
            shown = sequence.visible.add(piece[len(sequence.text):])
            if shown:
                sequence.handle.emit(Piece(shown))
        sequence.text = piece
        if sequence.visible.stopped:
            sequence.finish_reason = "stop"
        elif len(sequence.generated) >= sequence.max_tokens or len(sequence.tokens) + 1 >= self.context_length:
            sequence.finish_reason = "length"
        sequence.next_token = token

    def _leave_if_done(self, sequence: _Sequence) -> bool:
        """True (its pages given back) once the request is finished, failed or cancelled."""
        handle = sequence.handle
        if not sequence.finish_reason and not handle.cancelled.is_set():
            return False
        if sequence.finish_reason not in ("", "failed") and not handle.cancelled.is_set():
            tail = sequence.visible.flush()
            if tail:
                handle.emit(Piece(tail))
            seconds = time.perf_counter() - sequence.decode_started
            decoded = max(len(sequence.generated) - 1, 0)
            handle.emit(Finished(Completion(sequence.visible.reply, sequence.finish_reason, sequence.prompt_tokens,
                                            sequence.cached_tokens, len(sequence.generated),
                                            sequence.prefill_tokens_per_s, decoded / seconds if seconds > 0 else 0.0)))
            self._took(time.perf_counter() - sequence.started)
        # What the pages hold is known unless a step failed: their full ones are remembered.
        self.pages.give_back(sequence.pages, None if sequence.finish_reason == "failed" else sequence.tokens)
        return True
