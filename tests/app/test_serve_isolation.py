"""`tessera serve` makes its pages cross-origin isolated (issue 37): every response, a bundle's files, the
chat page and the API alike, carries Cross-Origin-Opener-Policy: same-origin and
Cross-Origin-Embedder-Policy: require-corp, without which a browser gives a page no SharedArrayBuffer
and runtime-js's WASM build runs on one thread (docs/web.md)."""

import http.client
import threading
import time

import pytest
from tessera.app.bundle import render_page, web_folder
from tessera.app.http_server import create_app
from tessera.app.serve import uvicorn_server

ISOLATION = {"cross-origin-opener-policy": "same-origin", "cross-origin-embedder-policy": "require-corp"}
HANG_GUARD_S = 60  # a guard against a hang, not a time anything must keep


@pytest.fixture
def serve_app():
    """Serve an application with serve.py's uvicorn server in a thread; yields a function giving its port."""
    running = []

    def start(app) -> int:
        server, sock, _ = uvicorn_server(app)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        running.append((server, thread))
        deadline = time.monotonic() + HANG_GUARD_S
        while not server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        return sock.getsockname()[1]

    yield start
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=HANG_GUARD_S)


def headers_of(port: int, path: str) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_GUARD_S)
    connection.request("GET", path)
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status, {name.lower(): value for name, value in response.getheaders()}


def test_a_bundles_site_is_cross_origin_isolated(tmp_path, serve_app):
    (tmp_path / "index.html").write_text("<p>the page</p>")
    (tmp_path / "kernels-threads.wasm").write_bytes(b"\0asm\1\0\0\0")
    port = serve_app(create_app(None, site=str(tmp_path)))
    for path, status in (("/", 200), ("/index.html", 200), ("/kernels-threads.wasm", 200), ("/missing.js", 404)):
        got, headers = headers_of(port, path)
        assert got == status, path
        assert {name: headers.get(name) for name in ISOLATION} == ISOLATION, path
    assert headers_of(port, "/kernels-threads.wasm")[1]["content-type"] == "application/wasm"


def test_the_chat_page_and_its_scripts_are_cross_origin_isolated(serve_app):
    page = render_page("tiny", api_url="v1/")
    port = serve_app(create_app(None, page_html=page, page_files=str(web_folder() / "static")))
    for path in ("/", "/chat.js", "/http-engine.js"):
        status, headers = headers_of(port, path)
        assert status == 200, path
        assert {name: headers.get(name) for name in ISOLATION} == ISOLATION, path
