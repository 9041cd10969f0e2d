"""`tessera serve` as docs/serve.md states it (issue 17 items 1 and 6): the official `openai` client gets the
chat session's own greedy reply, streamed and whole, with usage; every error status in OpenAI's shape; a
full queue answers 503 with Retry-After and a client that leaves frees its slot; the static files stay
inside their folder; a connection that sends no request head is closed."""

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from tessera.app.chat import ChatSession, Sampling
from tessera.app.compile import cached_compile
from tessera.app.engine import SerialEngine, StopText
from tessera.app.http_server import HeadTimeoutProtocol, create_app
from tessera.app.serve import uvicorn_server

CONTEXT = 128
HELLO = [{"role": "user", "content": "Hello there"}]
KEY = "test-key"
# How long a wait may take before the test fails instead of hanging: a guard, not a time anything must
# keep, so generous enough for a busy machine.
HANG_GUARD_S = 60


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen in {HANG_GUARD_S} s"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def compiled(tiny_gguf):
    """The tiny random-weight model built for WASM: the Python VM runs it through wasmtime, fast."""
    return cached_compile(tiny_gguf, "wasm", CONTEXT)


class Running:
    """An application served by uvicorn in a thread, on a free loopback port."""

    def __init__(self, app):
        self.server, sock, self.url = uvicorn_server(app)
        self.port = sock.getsockname()[1]
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started, "the server's start")

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=HANG_GUARD_S)

    def request(self, method, path, body=None, headers=None, raw_path=False):
        """(status, headers, parsed JSON or text) of one request."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HANG_GUARD_S)
        data = json.dumps(body).encode() if isinstance(body, dict | list) else body
        connection.request(method, path, body=data, headers={"content-type": "application/json", **(headers or {})})
        response = connection.getresponse()
        text = response.read().decode()
        connection.close()
        is_json = response.getheader("content-type", "").startswith("application/json")
        return response.status, response, json.loads(text) if is_json else text


@pytest.fixture
def serve_app():
    servers = []

    def start(app):
        servers.append(Running(app))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def engine_for(session, max_queue=8):
    return SerialEngine(session, "tiny", max_queue=max_queue)


def assert_openai_error(status, body, expected_status, param=None, code=None):
    assert status == expected_status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["message"] and body["error"]["type"]
    if param is not None:
        assert body["error"]["param"] == param, body
    if code is not None:
        assert body["error"]["code"] == code, body


def test_the_openai_client_gets_the_chat_sessions_greedy_reply_streamed_and_whole(compiled, serve_app):
    from openai import OpenAI

    reference = ChatSession(compiled)
    expected = reference.reply(HELLO, 12, Sampling(temperature=0.0))
    prompt_tokens = len(reference.encode_chat(HELLO))
    engine = engine_for(ChatSession(compiled))
    server = serve_app(create_app(engine, page_html="<p>page</p>", api_key=KEY))
    client = OpenAI(base_url=server.url + "v1", api_key=KEY, max_retries=0, timeout=HANG_GUARD_S)
    assert [m.id for m in client.models.list()] == ["tiny"]

    chunks = list(client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=12, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected["reply"] and text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == expected["completion_tokens"] == 12
    assert chunks[-1].usage.prompt_tokens == prompt_tokens

    reply = client.chat.completions.create(model="tiny", messages=HELLO, max_completion_tokens=12, temperature=0)
    assert reply.choices[0].message.content == expected["reply"]
    assert reply.choices[0].finish_reason == "length"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (
        prompt_tokens, 12, prompt_tokens + 12)
    assert reply.usage.prompt_tokens_details.cached_tokens == prompt_tokens - 1, "the same prompt: all but its last"

    # A stop string ends the reply before it, as OpenAI's `stop` does.
    word = expected["reply"].split()[1]
    stopped = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=12, temperature=0, stop=[word])
    assert stopped.choices[0].message.content == expected["reply"][:expected["reply"].index(word)]
    assert stopped.choices[0].finish_reason == "stop"
    assert 0 < stopped.usage.completion_tokens < 12


def test_each_error_status_has_openais_shape(compiled, serve_app):
    from openai import AuthenticationError, BadRequestError, NotFoundError, OpenAI

    server = serve_app(create_app(engine_for(ChatSession(compiled)), api_key=KEY, max_body_bytes=4096))
    auth = {"authorization": f"Bearer {KEY}"}
    client = OpenAI(base_url=server.url + "v1", api_key=KEY, max_retries=0, timeout=HANG_GUARD_S)
    with pytest.raises(BadRequestError) as error:
        client.chat.completions.create(model="tiny", messages=HELLO, n=2)
    assert error.value.body["param"] == "n"
    with pytest.raises(NotFoundError) as error:
        client.chat.completions.create(model="gpt-4o", messages=HELLO)
    assert error.value.body["code"] == "model_not_found"
    with pytest.raises(AuthenticationError):
        OpenAI(base_url=server.url + "v1", api_key="wrong", max_retries=0).models.list()

    chat = "/v1/chat/completions"
    for body, param in [(b"{not json", None), ([1, 2], None), ({"messages": []}, "messages"),
                        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
                        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
                        ({"messages": HELLO, "max_tokens": 0}, "max_tokens"),
                        ({"messages": HELLO, "max_completion_tokens": 2.5}, "max_completion_tokens"),
                        ({"messages": HELLO, "temperature": 2.5}, "temperature"),
                        ({"messages": HELLO, "top_p": 0}, "top_p"), ({"messages": HELLO, "seed": -1}, "seed"),
                        ({"messages": HELLO, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
                        ({"messages": HELLO, "stream_options": {"include_usage": True}}, "stream_options"),
                        ({"messages": HELLO, "tools": [{"type": "function"}]}, "tools")]:
        status, _, reply = server.request("POST", chat, body, auth)
        assert_openai_error(status, reply, 400, param)
    status, _, reply = server.request("POST", chat, {"messages": [{"role": "user", "content": "word " * 300}]}, auth)
    assert_openai_error(status, reply, 400, "messages", "context_length_exceeded")
    status, response, reply = server.request("POST", chat, {"messages": HELLO})
    assert_openai_error(status, reply, 401, code="invalid_api_key")
    assert response.getheader("www-authenticate") == "Bearer"
    assert_openai_error(*server.request("POST", chat, {"messages": HELLO}, {"authorization": "Bearer wrong"})[::2], 401)
    assert_openai_error(*server.request("GET", "/v1/models/other", None, auth)[::2], 404, "model", "model_not_found")
    assert_openai_error(*server.request("GET", "/v1/embeddings", None, auth)[::2], 404)
    assert_openai_error(*server.request("GET", chat, None, auth)[::2], 405)
    big = {"messages": [{"role": "user", "content": "x" * 5000}]}
    assert_openai_error(*server.request("POST", chat, big, auth)[::2], 413, code="request_too_large")
    status, _, health = server.request("GET", "/health")  # no key needed, as the page needs none
    assert status == 200 and health["status"] == "ok" and health["model"] == "tiny"


class EndlessSession:
    """A chat session that streams "x" every few milliseconds until its caller stops it: a slot that stays
    busy for as long as a test needs."""

    context_length = 1 << 20

    def __init__(self):
        self.tokens: list[int] = []
        self.started, self.stopped = threading.Event(), threading.Event()

    def encode_chat(self, messages):
        return [1, 2, 3]

    def reply(self, messages, max_tokens, sampling, on_text=None):
        self.started.set()
        self.tokens = [1, 2, 3]
        try:
            for _ in range(max_tokens):
                time.sleep(0.005)
                on_text("x")
                self.tokens.append(0)
        except BaseException:
            self.stopped.set()
            raise
        return {"reply": "x" * max_tokens, "prompt_tokens": 3, "completion_tokens": max_tokens,
                "prefill_tokens_per_s": 0.0, "decode_tokens_per_s": 0.0}


def open_stream(port: int) -> socket.socket:
    """A streaming request on a raw socket, read until its first event: the test decides when it ends."""
    body = json.dumps({"messages": HELLO, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD_S)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    seen = b""
    while b"data: " not in seen:
        seen += sock.recv(4096)
    assert seen.startswith(b"HTTP/1.1 200"), seen
    return sock


def test_a_full_queue_is_a_503_and_a_client_that_leaves_frees_its_slot(serve_app):
    session = EndlessSession()
    engine = engine_for(session, max_queue=0)
    server = serve_app(create_app(engine))
    first = open_stream(server.port)
    assert session.started.wait(HANG_GUARD_S)
    status, response, reply = server.request("POST", "/v1/chat/completions", {"messages": HELLO, "max_tokens": 4})
    assert_openai_error(status, reply, 503, code="queue_full")
    assert int(response.getheader("retry-after")) >= 1
    assert server.request("GET", "/health")[2]["running"] == 1

    first.close()  # mid-stream: the generation stops at its next token and the slot is free
    assert session.stopped.wait(HANG_GUARD_S), "the generation went on after its client left"
    wait_until(lambda: not server.request("GET", "/health")[2]["running"], "the slot's release")
    status, _, reply = server.request("POST", "/v1/chat/completions", {"messages": HELLO, "max_tokens": 3})
    assert status == 200 and reply["choices"][0]["message"]["content"] == "xxx"

    # A request still waiting in the queue leaves it when its client does.
    engine.max_queue = 1
    session.started.clear(), session.stopped.clear()
    running = open_stream(server.port)
    waiting = socket.create_connection(("127.0.0.1", server.port), timeout=HANG_GUARD_S)
    body = json.dumps({"messages": HELLO}).encode()
    waiting.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: " + str(len(body)).encode()
                    + b"\r\n\r\n" + body)
    wait_until(lambda: server.request("GET", "/health")[2]["queued"] == 1, "the request's queueing")
    waiting.close()
    wait_until(lambda: not server.request("GET", "/health")[2]["queued"], "the queued request's leaving")
    running.close()
    assert session.stopped.wait(HANG_GUARD_S)


def test_stop_strings_are_held_back_until_they_are_known():
    text = StopText(("</s>", "STOP"))
    assert [text.add(p) for p in ("Hello <", "/", "b> and S", "T", "OP here")] == ["Hello ", "", "</b> and ", "", ""]
    assert text.stopped and text.reply == "Hello </b> and "
    plain = StopText(("END",))
    assert plain.add("the E") == "the " and plain.flush() == "E" and not plain.stopped


def get_raw(port: int, path: bytes) -> bytes:
    """One GET with the path sent byte for byte (no client normalizing it)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD_S)
    sock.sendall(b"GET " + path + b" HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    return data


def test_static_files_stay_inside_their_folder(tmp_path, serve_app):
    site, outside = tmp_path / "site", tmp_path / "outside"
    (site / "models" / "m").mkdir(parents=True)
    outside.mkdir()
    (site / "index.html").write_text("<p>the page</p>")
    (site / "chat.js").write_text("export {};")
    (site / "models" / "m" / "bundle.json").write_text("{}")
    (outside / "secret.txt").write_text("SECRET")
    os.symlink(outside / "secret.txt", site / "leak.txt")
    os.symlink(outside, site / "leakdir")
    os.symlink(site / "chat.js", site / "alias.js")  # a link that stays inside is served
    server = serve_app(create_app(None, site=str(site)))
    assert get_raw(server.port, b"/").split(b"\r\n")[0] == b"HTTP/1.1 200 OK"
    script = get_raw(server.port, b"/chat.js")
    assert b"content-type: text/javascript" in script.lower() and b"cache-control: no-cache" in script.lower()
    assert get_raw(server.port, b"/alias.js").startswith(b"HTTP/1.1 200")
    for path in (b"/../outside/secret.txt", b"/%2e%2e/outside/secret.txt", b"/%2E%2E%2Foutside%2Fsecret.txt",
                 b"/models/../../outside/secret.txt", b"/..%5coutside%5csecret.txt", b"/leak.txt",
                 b"/leakdir/secret.txt", b"/models/", b"/models/m/", b"/models/m", b"/chat.js%00.txt",
                 b"//etc/passwd", b"/%2fetc%2fpasswd"):
        reply = get_raw(server.port, path)
        assert reply.split(b"\r\n")[0] in (b"HTTP/1.1 404 Not Found", b"HTTP/1.1 400 Bad Request"), (path, reply)
        assert b"SECRET" not in reply and b"bundle.json" not in reply and b"root:" not in reply, path
    status, _, _ = server.request("POST", "/index.html", b"{}")
    assert status == 405
    assert server.request("GET", "/v1/models")[0] == 404, "a site has no API"


def test_the_chat_page_talks_to_the_api(compiled, serve_app):
    from tessera.app.bundle import render_page, web_folder

    page = render_page("tiny", api_url="v1/")
    server = serve_app(create_app(engine_for(ChatSession(compiled)), page_html=page,
                                  page_files=str(web_folder() / "static")))
    status, _, html = server.request("GET", "/")
    assert status == 200 and 'data-api-url="v1/"' in html and 'src="chat.js"' in html
    for script in ("chat.js", "http-engine.js"):
        status, response, _ = server.request("GET", "/" + script)
        assert status == 200 and response.getheader("content-type") == "text/javascript"


def test_a_connection_without_a_request_head_is_closed(serve_app, monkeypatch):
    """One that sends nothing, and one that sends a header line six times as often as the deadline (a
    slowloris): the deadline runs from the first byte, so it closes the second while it is still sending.
    A deadline that each line renewed would keep it open through all its lines (60 s)."""
    monkeypatch.setattr(HeadTimeoutProtocol, "head_timeout", 0.3)
    server = serve_app(create_app(None, site=os.path.dirname(__file__)))
    silent = socket.create_connection(("127.0.0.1", server.port), timeout=HANG_GUARD_S)
    slow = socket.create_connection(("127.0.0.1", server.port), timeout=HANG_GUARD_S)
    slow.sendall(b"GET / HTTP/1.1\r\n")
    lines, sent = 1200, 0
    while sent < lines:
        time.sleep(0.05)
        try:
            slow.sendall(b"x-slow: 1\r\n")
        except OSError:  # the server has closed it
            break
        sent += 1
    assert sent < lines, f"the slow connection stayed open through its {lines} header lines"
    assert silent.recv(1) == b"" and slow.recv(1) == b"", "both connections are closed"


TESSERA = [sys.executable, "-m", "tessera.cli"]


def test_tessera_serve_a_gguf_batched_warns_off_loopback(tiny_gguf):
    """`tessera serve MODEL.gguf --max-batch 4` compiles the batched build and serves it; a batch out of
    range is refused by name."""
    refused = subprocess.run(TESSERA + ["serve", tiny_gguf, "--max-batch", "0"], capture_output=True, text=True,
                             timeout=HANG_GUARD_S)
    assert refused.returncode == 1
    assert "error: --max-batch 0: requests decoded together, 1 to 64" in refused.stderr

    child = subprocess.Popen(TESSERA + ["serve", tiny_gguf, "--device", "wasm", "--context", str(CONTEXT), "--host",
                                        "0.0.0.0", "--port", "0", "--max-batch", "4"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line.startswith("serving tiny (OpenAI API at /v1/, chat page at /) at http://0.0.0.0:"), line
        port = int(line.rsplit(":", 1)[1].strip("/\n"))
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_GUARD_S)
        connection.request("POST", "/v1/chat/completions", json.dumps({"messages": HELLO, "max_tokens": 3}))
        reply = json.loads(connection.getresponse().read())
        assert reply["model"] == "tiny" and reply["usage"]["completion_tokens"] == 3
    finally:
        child.terminate()
        _, stderr = child.communicate(timeout=HANG_GUARD_S)
    assert "warning: serving on 0.0.0.0, which is not a loopback address, without --api-key" in stderr
    assert "decoding up to 4 requests together" in stderr


def test_runtime_native_behind_the_engine_stops_at_a_stop_string_with_its_usage(tiny_gguf, serve_app):
    from openai import OpenAI
    from tessera.app.chat import NativeChatSession
    from tessera.native import load_library

    load_library()  # `make native` builds it before the tests: a missing or broken library fails, with its error
    session = NativeChatSession(cached_compile(tiny_gguf, "cpu", CONTEXT), n_threads=1)
    whole = session.reply(HELLO, 12, Sampling(temperature=0.0))
    server = serve_app(create_app(engine_for(session)))
    client = OpenAI(base_url=server.url + "v1", api_key="none", max_retries=0, timeout=HANG_GUARD_S)
    word = whole["reply"].split()[1]
    stopped = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=12, temperature=0, stop=word)
    assert stopped.choices[0].message.content == whole["reply"][:whole["reply"].index(word)]
    assert stopped.choices[0].finish_reason == "stop"
    assert 0 < stopped.usage.completion_tokens < 12 and stopped.usage.prompt_tokens == whole["prompt_tokens"]
    assert stopped.usage.prompt_tokens_details.cached_tokens == whole["prompt_tokens"] - 1


def test_a_bundles_model_folder_serves_its_wasm_build_and_a_compiled_folder_its_own(tiny_gguf, compiled, tmp_path):
    from tessera.app.bundle import bundle_model
    from tessera.app.serve import ServeError, open_model

    said = []
    model_dir = bundle_model(tiny_gguf, str(tmp_path / "site"), CONTEXT, targets=("wasm",))
    session, name = open_model(model_dir, say=said.append)
    assert name == "tiny" and session.vm.device.kind == "wasm"
    assert said == ["using the Python VM with the bundle's wasm build"]
    with pytest.raises(ServeError, match="has no webgpu build that runs here"):
        open_model(model_dir, "webgpu", say=said.append)
    with pytest.raises(ServeError, match="--device webgpu runs a webgpu build; .* holds a wasm build"):
        open_model(compiled, "webgpu", say=said.append)
    with pytest.raises(ServeError, match="is neither a compiled model"):
        open_model(str(tmp_path), say=said.append)
    session, name = open_model(compiled, "wasm", say=said.append)
    assert name == os.path.basename(compiled) and said[-1] == "using the Python VM: --device wasm"


def test_a_conversation_the_template_refuses_is_a_400():
    """A chat template (or a native build's chat format) that refuses the conversation, as Gemma's
    refuses a system role, is the client's error in OpenAI's shape, not the server's 500."""
    from tessera.app.http_server import _failure
    from tessera.frontend.chat_format import ChatFormat, RoleFormat

    chat_format = ChatFormat("", None, {"user": RoleFormat("<u>", "</u>")}, "<a>")
    with pytest.raises(Exception) as refused:
        chat_format.render([{"role": "system", "content": "Be brief."}])
    error = _failure(refused.value)
    assert (error.status, error.param, error.type) == (400, "messages", "invalid_request_error")
    assert "no role 'system'" in error.message
