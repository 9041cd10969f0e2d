"""The request queue behind `tessera serve` (docs/serve.md): what the HTTP layer submits, and the engine
that runs it.

The HTTP layer knows only ``Engine``: ``submit(Generation)`` returns a ``RequestHandle`` whose
``next_event()`` yields ``Piece`` events (text to show) and ends with one ``Finished`` or ``Failed``;
``cancel()`` withdraws the request (a client that went away) and frees its slot at once. A full queue
raises ``QueueFull``. ``SerialEngine`` runs one request at a time on one chat session, in a worker
thread, so the event loop never waits on a kernel; ``BatchEngine`` (batch_engine.py) decodes up to
``max_batch`` requests together over a paged KV cache, behind the same interface. Both keep their
queue with ``QueuedEngine``.

Stop strings are the engine's business, not the HTTP layer's: the engine stops generating at the
first one (the text before it is the reply) instead of decoding tokens nobody will see.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from tessera.ir import TesseraError

from .chat import NativeChatSession, Sampling


class QueueFull(TesseraError):
    """Every slot is running and the queue is full: the client should retry after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Generation:
    """One request as the engine runs it: checked already (tessera.app.openai_api)."""

    messages: list[dict]
    max_tokens: int | None  # None: until a stop token or the context is full
    sampling: Sampling = field(default_factory=Sampling)
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Completion:
    """What a finished request produced, in OpenAI's terms: ``finish_reason`` "stop" (a stop token or
    string) or "length" (max_tokens, or the context is full); ``prompt_tokens`` the whole conversation,
    of which ``cached_tokens`` were in the KV cache already."""

    text: str
    finish_reason: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float


@dataclass(frozen=True)
class Piece:
    text: str


@dataclass(frozen=True)
class Finished:
    completion: Completion


@dataclass(frozen=True)
class Failed:
    error: Exception


Event = Piece | Finished | Failed


class Engine(Protocol):
    model_id: str
    context_length: int
    max_batch: int

    def submit(self, generation: Generation) -> RequestHandle: ...
    def load(self) -> dict: ...
    def close(self) -> None: ...


class RequestHandle:
    """One submitted request: its events, delivered on the event loop that submitted it."""

    def __init__(self, generation: Generation, loop: asyncio.AbstractEventLoop, on_cancel):
        self.generation = generation
        self.cancelled = threading.Event()
        self._loop = loop
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._on_cancel = on_cancel

    async def next_event(self) -> Event:
        return await self._events.get()

    def cancel(self) -> None:
        """Withdraw the request: a queued one leaves the queue, a running one stops at its next token.
        Idempotent, and harmless once it has finished."""
        if not self.cancelled.is_set():
            self.cancelled.set()
            self._on_cancel(self)

    def emit(self, event: Event) -> None:
        """Deliver ``event`` (from the worker thread)."""
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)
        except RuntimeError:  # the loop has closed: the server is shutting down, nobody listens
            pass


class _Stopped(Exception):
    """Raised from the session's text callback to end a generation early (a stop string, a cancel)."""


class StopText:
    """The part of a growing reply that may be shown, given stop strings: text that could be the start of
    one is held back until the next piece says whether it is."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops = tuple(s for s in stops if s)
        self.text = ""
        self.shown = 0
        self.stopped = False

    def add(self, piece: str) -> str:
        """The newly showable text after ``piece``; sets ``stopped`` at a stop string (which is not shown)."""
        self.text += piece
        hits = [i for i in (self.text.find(s, self.shown) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            return self._show(min(hits))
        held = max((k for s in self.stops for k in range(1, len(s)) if self.text.endswith(s[:k])), default=0)
        return self._show(len(self.text) - held)

    def flush(self) -> str:
        """What was held back, at the end of a reply that met no stop string."""
        return "" if self.stopped else self._show(len(self.text))

    def _show(self, end: int) -> str:
        new, self.shown = self.text[self.shown:max(end, self.shown)], max(end, self.shown)
        return new

    @property
    def reply(self) -> str:
        return self.text[:self.shown]


class QueuedEngine:
    """The queue in front of an engine's worker thread: up to ``max_batch`` requests running and
    ``max_queue`` more waiting their turn in order; ``_work`` (the subclass's) runs them."""

    max_batch = 1

    def __init__(self, model_id: str, context_length: int, max_queue: int):
        self.model_id = model_id
        self.context_length = context_length
        self.max_queue = max_queue
        self._lock = threading.Condition()
        self._queue: deque[RequestHandle] = deque()
        self._running: list[RequestHandle] = []
        self._seconds_per_request = 1.0  # a running mean, for Retry-After
        self._closed = False
        self._worker = threading.Thread(target=self._work, name="tessera-decode", daemon=True)
        self._worker.start()

    def submit(self, generation: Generation) -> RequestHandle:
        handle = RequestHandle(generation, asyncio.get_running_loop(), self._withdraw)
        with self._lock:
            if self._closed:
                raise QueueFull("the server is shutting down", retry_after=1)
            if len(self._queue) + self._running_count() >= self.max_batch + self.max_queue:
                wait = math.ceil(self._seconds_per_request * (len(self._queue) + 1) / self.max_batch)
                raise QueueFull(f"the server is busy: {self.max_batch} request(s) running and {len(self._queue)} "
                                f"waiting, the most it queues; retry in {wait} s", retry_after=max(1, wait))
            self._queue.append(handle)
            self._lock.notify()
        return handle

    def load(self) -> dict:
        """Requests running and waiting now (cancelled ones no longer count)."""
        with self._lock:
            return {"running": self._running_count(), "queued": len(self._queue), "max_batch": self.max_batch,
                    "max_queue": self.max_queue}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for handle in list(self._queue) + self._running:
                handle.cancelled.set()
            self._queue.clear()
            self._lock.notify_all()
        self._worker.join(timeout=30)

    def _running_count(self) -> int:
        return sum(not handle.cancelled.is_set() for handle in self._running)

    def _withdraw(self, handle: RequestHandle) -> None:
        with self._lock:
            if handle in self._queue:
                self._queue.remove(handle)

    def _took(self, seconds: float) -> None:
        """A request finished after ``seconds``: the mean Retry-After is reckoned from."""
        self._seconds_per_request = 0.8 * self._seconds_per_request + 0.2 * seconds

    def _work(self) -> None:
        raise NotImplementedError


class SerialEngine(QueuedEngine):
    """One request at a time on one chat session (tessera.app.chat's ChatSession or NativeChatSession),
    decoded in a worker thread; up to ``max_queue`` more wait their turn in order."""

    def __init__(self, session, model_id: str, max_queue: int = 8):
        self.session = session
        super().__init__(model_id, _context_length(session), max_queue)

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                handle = self._queue.popleft()
                self._running = [handle]
            start = time.perf_counter()
            try:
                handle.emit(Finished(self._run(handle)))
            except _Stopped:
                pass  # cancelled: nobody is listening
            except Exception as error:  # noqa: BLE001 (the request fails, the server goes on)
                handle.emit(Failed(error))
            finally:
                with self._lock:
                    self._running = []
                self._took(time.perf_counter() - start)

    def _run(self, handle: RequestHandle) -> Completion:
        generation, session = handle.generation, self.session
        visible = StopText(generation.stop)
        max_tokens = self.context_length if generation.max_tokens is None else generation.max_tokens
        native = isinstance(session, NativeChatSession)  # runtime-native stops where its callback says so

        def on_text(piece: str) -> bool:
            if handle.cancelled.is_set():
                raise _Stopped
            shown = visible.add(piece)
            if shown:
                handle.emit(Piece(shown))
            if visible.stopped and native:
                return True  # and still counts the usage
            if visible.stopped:
                raise _Stopped
            return False

        try:
            result = session.reply(generation.messages, max_tokens, generation.sampling, on_text=on_text)
        except _Stopped:
            if handle.cancelled.is_set() or not visible.stopped:
                raise
            # A stop string ended the reply: ChatSession.generate raised out of on_text after appending
            # the last token it sampled to its list but before adding it to the KV cache's.
            prompt_tokens = len(session.fit(generation.messages, max_tokens).prompt_ids)
            generated = len(session.tokens) - prompt_tokens + 1
            return Completion(visible.reply, "stop", prompt_tokens, 0, generated, 0.0, 0.0)
        tail = visible.flush()
        if tail:
            handle.emit(Piece(tail))
        # Both runtimes count the whole prompt (as fitted to the context) and the part they computed.
        prompt_tokens, computed = result["prompt_tokens"], result.get("prefilled_tokens", result["prompt_tokens"])
        completion_tokens = result["completion_tokens"]
        full = completion_tokens >= max_tokens or prompt_tokens + completion_tokens >= self.context_length
        return Completion(visible.reply, "length" if full and not visible.stopped else "stop", prompt_tokens,
                          prompt_tokens - computed, completion_tokens, result["prefill_tokens_per_s"],
                          result["decode_tokens_per_s"])


def _context_length(session) -> int:
    """The context window of a chat session of either runtime."""
    if hasattr(session, "context_length"):
        return int(session.context_length)
    return int(session.model.context_length)
