"""The Starlette application of `tessera serve` (docs/serve.md): the OpenAI chat API over an engine,
and the chat page or a bundle's static files.

    GET  /health                  {"status": "ok", "model", "running", "queued", ...}
    GET  /v1/models               the one model served
    GET  /v1/models/{id}          it, or 404
    POST /v1/chat/completions     a reply, whole or as server-sent events
    GET  /, /chat.js, ...         the chat page talking to this API, or a bundle's site as it is

Every response carries the COOP/COEP headers that make the page cross-origin isolated (WebAssembly on
threads, docs/web.md). Errors under /v1/ have OpenAI's shape. With an API key, /v1/ needs ``Authorization: Bearer KEY``;
/health and the page do not (the page asks for the key). A client that goes away cancels its request.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time

import anyio
import h11
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from tessera.frontend.chat_template import ChatTemplateError
from uvicorn.protocols.http.h11_impl import H11Protocol

from .chat import ChatError
from .engine import Engine, Failed, Piece, QueueFull, RequestHandle
from .openai_api import APIError, ReplyIds, model_card, models_list, parse_chat_request, usage

MAX_BODY_BYTES = 1 << 20  # a conversation that fills a 32k context is a few hundred KiB of JSON
BODY_TIMEOUT_S = 30.0  # to send the whole body once the headers are in
HEAD_TIMEOUT_S = 10.0  # from a connection's opening (or a later request's first byte) to the end of its headers
CONTENT_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm",
                 ".json": "application/json", ".css": "text/css", ".html": "text/html; charset=utf-8"}


class SiteFiles(StaticFiles):
    """A folder's files, as StaticFiles serves them (no listings; nothing outside the folder, symlinks
    included: a path is resolved before it is checked), with the runtime's content types and no caching
    of pages and scripts (they change between bundles; the runtime caches the weights itself)."""

    def __init__(self, directory: str):
        super().__init__(directory=directory, html=True, follow_symlink=False)

    def file_response(self, full_path, stat_result, scope, status_code: int = 200) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        suffix = str(full_path)[str(full_path).rfind("."):].lower()
        if suffix in CONTENT_TYPES:
            response.headers["content-type"] = CONTENT_TYPES[suffix]
        response.headers["cache-control"] = "no-cache"
        return response


def create_app(engine: Engine | None, *, site: str | None = None, page_html: str | None = None,
               page_files: str | None = None, api_key: str | None = None,
               max_body_bytes: int = MAX_BODY_BYTES, body_timeout: float = BODY_TIMEOUT_S) -> Starlette:
    """The application. ``engine``: the model behind /v1/ (None: no API, the files only); ``site``: a
    bundle's folder served as it is; else ``page_html`` at / with ``page_files`` (the chat page's
    script and style) beside it."""
    created = int(time.time())
    routes = []
    if engine is not None:
        api = _ChatAPI(engine, max_body_bytes, body_timeout)
        routes += [Route("/health", api.health, methods=["GET"]),
                   Route("/v1/models", lambda r: JSONResponse(models_list(engine.model_id, created)), methods=["GET"]),
                   Route("/v1/models/{model:path}", lambda r: _model(engine, r, created), methods=["GET"]),
                   Route("/v1/chat/completions", api.chat_completions, methods=["POST"])]
    if site is not None:
        routes.append(Mount("/", SiteFiles(site)))
    elif page_html is not None:
        routes += [Route("/", lambda r: HTMLResponse(page_html, headers={"cache-control": "no-cache"})),
                   Route("/index.html", lambda r: HTMLResponse(page_html, headers={"cache-control": "no-cache"}))]
        if page_files is not None:
            routes.append(Mount("/", SiteFiles(page_files)))
    middleware = [Middleware(_CrossOriginIsolated)] + ([Middleware(_RequireKey, key=api_key)] if api_key else [])
    return Starlette(routes=routes, middleware=middleware,
                     exception_handlers={APIError: _api_error, HTTPException: _http_error, Exception: _server_error})


def _model(engine: Engine, request: Request, created: int) -> Response:
    model = request.path_params["model"]
    if model != engine.model_id:
        raise APIError(404, f"the model {model!r} does not exist: this server serves {engine.model_id!r}",
                       param="model", code="model_not_found")
    return JSONResponse(model_card(model, created))


class _ChatAPI:
    def __init__(self, engine: Engine, max_body_bytes: int, body_timeout: float):
        self.engine, self.max_body_bytes, self.body_timeout = engine, max_body_bytes, body_timeout

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.engine.model_id, **self.engine.load()})

    async def chat_completions(self, request: Request) -> Response:
        chat = parse_chat_request(await self._body(request), self.engine.model_id)
        try:
            handle = self.engine.submit(chat.generation)
        except QueueFull as full:
            raise APIError(503, str(full), type="server_error", code="queue_full",
                           headers={"Retry-After": str(full.retry_after)}) from None
        client = _ClientWatch(request.receive)
        ids = ReplyIds(self.engine.model_id)
        # The first event says whether the request runs at all (a prompt longer than the context fails
        # here), so an error is still an HTTP status, not an event in a stream already under way.
        first = await client.next_event(handle)
        if first is None:
            return _Gone()
        if isinstance(first, Failed):
            client.close()
            raise _failure(first.error)
        if chat.stream:
            return _EventStream(handle, first, ids, chat.include_usage, client)
        event = first
        while isinstance(event, Piece):  # the completion carries the whole text
            event = await client.next_event(handle)
            if event is None:
                return _Gone()
        client.close()
        if isinstance(event, Failed):
            raise _failure(event.error)
        return JSONResponse(ids.completion(event.completion))

    async def _body(self, request: Request) -> bytes:
        """The request's body, refused past ``max_body_bytes`` (413) or ``body_timeout`` seconds (408)."""
        too_large = APIError(413, f"the request body is larger than {self.max_body_bytes} bytes",
                             code="request_too_large")
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            raise too_large
        body = bytearray()
        try:
            with anyio.fail_after(self.body_timeout):
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > self.max_body_bytes:
                        raise too_large
        except TimeoutError:
            raise APIError(408, f"the request body did not arrive within {self.body_timeout:g} s",
                           code="request_timeout") from None
        return bytes(body)


def _failure(error: Exception) -> APIError:
    if isinstance(error, ChatError):  # the conversation does not fit the context, or the like
        return APIError(400, str(error), param="messages", code="context_length_exceeded"
                        if "context window" in str(error) else None)
    if isinstance(error, ChatTemplateError):  # the model's template refuses the conversation (a role it lacks)
        return APIError(400, str(error), param="messages")
    return APIError(500, f"the model failed: {error}", type="server_error")


class _ClientWatch:
    """Whether the client is still there, while a request waits for its events: ``next_event`` returns
    None (and cancels the request) once the client has gone."""

    def __init__(self, receive):
        self._gone = asyncio.ensure_future(self._wait(receive))

    @staticmethod
    async def _wait(receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def next_event(self, handle: RequestHandle):
        event = asyncio.ensure_future(handle.next_event())
        await asyncio.wait({event, self._gone}, return_when=asyncio.FIRST_COMPLETED)
        if event.done():
            return event.result()
        event.cancel()
        handle.cancel()
        return None

    def close(self) -> None:
        self._gone.cancel()


class _Gone(Response):
    """The response to a client that has gone: nothing to send."""

    def __init__(self):
        super().__init__(status_code=499)

    async def __call__(self, scope, receive, send) -> None:
        return None


class _EventStream(Response):
    """A reply as server-sent events: chunks with ``choices[0].delta``, the last with its finish_reason,
    then (with include_usage) a chunk with the usage and no choices, then ``data: [DONE]``. The request
    is cancelled whenever the stream ends early."""

    media_type = "text/event-stream"

    def __init__(self, handle: RequestHandle, first, ids: ReplyIds, include_usage: bool, client: _ClientWatch):
        self.status_code, self.background = 200, None
        self.init_headers({"cache-control": "no-cache", "x-accel-buffering": "no"})  # no body: no content-length
        self.handle, self.first, self.ids, self.include_usage, self.client = handle, first, ids, include_usage, client

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        try:
            await self._send(send, self.ids.chunk({"role": "assistant", "content": ""}))
            event = self.first
            while isinstance(event, Piece):
                await self._send(send, self.ids.chunk({"content": event.text}))
                event = await self.client.next_event(self.handle)
            if event is None:
                return
            if isinstance(event, Failed):
                await self._send(send, _failure(event.error).body())
            else:
                completion = event.completion
                await self._send(send, self.ids.chunk({}, completion.finish_reason))
                if self.include_usage:
                    await self._send(send, self.ids.chunk({}, usage=usage(completion), choices=False))
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
        finally:
            self.handle.cancel()
            self.client.close()

    @staticmethod
    async def _send(send, data: dict) -> None:
        line = b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"
        await send({"type": "http.response.body", "body": line, "more_body": True})


# Every response says the page is cross-origin isolated: only then does a browser give it
# SharedArrayBuffer, which the runtime's WASM thread pool needs (docs/web.md). The site loads nothing
# from another origin, so require-corp costs it nothing.
ISOLATION_HEADERS = ((b"cross-origin-opener-policy", b"same-origin"),
                     (b"cross-origin-embedder-policy", b"require-corp"))


class _CrossOriginIsolated:
    """ASGI middleware: ISOLATION_HEADERS on every HTTP response."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_isolated(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *ISOLATION_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_isolated)


class _RequireKey:
    """ASGI middleware: /v1/ answers 401 without ``Authorization: Bearer KEY`` (compared in constant time)."""

    def __init__(self, app, key: str):
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                error = APIError(401, "a valid API key is required: send the header 'Authorization: Bearer KEY'",
                                 code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
                await _api_error(None, error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _api_error(request, error: APIError) -> Response:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def _http_error(request: Request, error: HTTPException) -> Response:
    """Routing's errors (404, 405): OpenAI's shape under /v1/, plain text elsewhere."""
    if request.url.path.startswith("/v1/"):
        message = (f"unknown URL: {request.method} {request.url.path}" if error.status_code == 404 else
                   f"{request.method} is not allowed on {request.url.path}")
        return _api_error(request, APIError(error.status_code, message, headers=error.headers))
    return PlainTextResponse(str(error.detail), status_code=error.status_code, headers=error.headers)


def _server_error(request: Request, error: Exception) -> Response:
    return _api_error(request, APIError(500, f"internal error: {type(error).__name__}: {error}", type="server_error"))


class HeadTimeoutProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for a request's head: a connection that has not sent a
    whole request line and headers ``head_timeout`` seconds after it opened (or after the first byte of
    a later request) is closed. uvicorn's own keep-alive timeout runs only between requests and stops at
    the first byte, so a client sending nothing, or a byte at a time, would otherwise hold its
    connection forever."""

    head_timeout: float = HEAD_TIMEOUT_S

    def connection_made(self, transport) -> None:
        self._head_deadline = None
        super().connection_made(transport)
        self._watch_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_head()

    def connection_lost(self, exc) -> None:
        self._cancel_head_deadline()
        super().connection_lost(exc)

    def _watch_head(self) -> None:
        if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
            self._cancel_head_deadline()  # the head is in; the body has its own timeout (http_server.py)
        elif self._head_deadline is None:
            self._head_deadline = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _cancel_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()
