"""`tessera serve`: a bundle over HTTP on this machine (docs/web.md)."""

from __future__ import annotations

import functools
import os
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

from .bundle import BundleError


def serve(directory: str, port: int = 8000, host: str = "127.0.0.1", ready=None) -> None:
    """Serve ``directory`` over HTTP on ``host`` (127.0.0.1: a secure context, where WebGPU works)."""
    if not os.path.exists(os.path.join(directory, "index.html")):
        raise BundleError(f"{directory} has no index.html; make one with `tessera bundle -o {directory}`")

    class Handler(SimpleHTTPRequestHandler):
        extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript",
                          ".mjs": "text/javascript", ".wasm": "application/wasm", ".json": "application/json"}

        def end_headers(self):
            # Pages and the runtime change between bundles; the weights are cached by the runtime.
            self.send_header("Cache-Control", "no-cache")
            super().end_headers()

        def log_message(self, format, *args):  # noqa: A002 (the base class's name)
            if os.environ.get("TESSERA_SERVE_LOG"):
                super().log_message(format, *args)

    server = ThreadingHTTPServer((host, port), functools.partial(Handler, directory=directory))
    url = f"http://{host}:{server.server_address[1]}/"
    print(f"serving {directory} at {url}", flush=True)
    if ready is not None:
        ready(url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    finally:
        server.server_close()
