"""`tessera serve` under load (issue 17's "Shown by"), as a process of its own on the tiny model:

- 8 streaming clients at once, random prompts and lengths, one request in six dropped after its
  first chunk: every completed reply equals the reply the same request gets served alone, no status
  but 200 and the 503 of a full queue, and the server's resident memory flat within 5% after warm-up.
  Each client has at least 6 requests served, however long that takes, and goes on for the load's
  duration: the counts asserted do not depend on how fast a busy machine serves them;
- one conversation of many turns: every turn answered, the history trimmed to the context (the
  prompt never outgrows it), memory flat.

Each runs on the one-request-at-a-time server and on the batched one (a --max-batch 4 build).

`make test` runs them briefly (SERVE_LOAD_SECONDS=20, SERVE_TURNS=100); the issue's five minutes and
1,000 turns: SERVE_LOAD_SECONDS=300 SERVE_TURNS=1000 pytest tests/app/test_serve_load.py
(bench/RESULTS.md records that run).
"""

import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

import pytest
from tessera.app.compile import cached_compile

CONTEXT = 128
SECONDS = float(os.environ.get("SERVE_LOAD_SECONDS", "20"))  # how long the clients keep the server busy
TURNS = int(os.environ.get("SERVE_TURNS", "100"))
CLIENTS = 8
REQUESTS = 6  # served to each client whatever the time: the sixth (and every sixth) dropped mid-stream
HTTP_TIMEOUT_S = 120  # a guard against a hang, not a time a request must keep
PROMPTS = ["Hello there", "What is the capital of France?", "Tell me a story.", "How do magnets work?",
           "Name a color.", "Why?", "Count to five.", "What is a compiler?"]
LENGTHS = (4, 9, 16)


class Server:
    """`python -m tessera.cli serve FOLDER` on a free loopback port."""

    def __init__(self, folder: str, max_queue: int):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = open(os.path.join(folder, "..", f"serve-{self.port}.log"), "w")
        self.process = subprocess.Popen([sys.executable, "-m", "tessera.cli", "serve", folder, "--port", str(self.port),
                                         "--max-queue", str(max_queue)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            assert self.process.poll() is None, f"the server exited: {open(self.log.name).read()[-2000:]}"
            assert time.monotonic() < deadline, "the server did not start"
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT_S)
                connection.request("GET", "/health")
                if connection.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT_S)
        connection.request("GET", "/v1/models")
        self.model = json.loads(connection.getresponse().read())["data"][0]["id"]

    def rss_kib(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    def chat(self, messages, max_tokens, drop_after_first_chunk=False):
        """(status, the reply's text or None when dropped, usage) of one streamed request."""
        body = json.dumps({"model": self.model, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                           "stream": True, "stream_options": {"include_usage": True}})
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT_S)
        connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            response.read()
            connection.close()
            return response.status, None, None
        text, usage = [], None
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[len("data: "):])
            usage = event.get("usage") or usage
            for choice in event.get("choices") or []:
                text.append((choice.get("delta") or {}).get("content") or "")
                if drop_after_first_chunk:
                    connection.sock.shutdown(socket.SHUT_RDWR)  # the client leaves mid-stream
                    connection.close()
                    return 200, None, None
        connection.close()
        return 200, "".join(text), usage

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


@pytest.fixture(scope="module")
def compiled(tiny_gguf):
    """The chat build (served one request at a time) and a batched build (continuous batching: four
    requests decode together; a folder holding one is served batched)."""
    return {1: cached_compile(tiny_gguf, "wasm", CONTEXT), 4: cached_compile(tiny_gguf, "wasm", CONTEXT, max_batch=4)}


@pytest.fixture(params=[1, 4], ids=["serial", "batched"])
def server(compiled, request):
    running = []

    def start(max_queue):
        running.append(Server(compiled[request.param], max_queue))
        return running[-1]

    yield start
    for s in running:
        s.stop()


def test_eight_clients_get_their_solo_replies_and_memory_stays_flat(server):
    srv = server(max_queue=4)  # 1 running + 4 waiting for 8 clients: some requests meet a full queue
    solo = {}
    for prompt in PROMPTS:
        for length in LENGTHS:
            status, text, _ = srv.chat([{"role": "user", "content": prompt}], length)
            assert status == 200
            solo[prompt, length] = text
    statuses: dict[int, int] = {}
    mismatches, completed, dropped = [], [0], [0]
    lock = threading.Lock()
    warm = {}
    # The load's duration, and when its resident memory is taken as warm: at the first response after a
    # fifth of it and two requests a client, whichever is later. The last client's last response comes
    # after both, so it is always taken. (Times that pace the load, not bounds on it.)
    deadline = time.monotonic() + SECONDS
    warm_at = time.monotonic() + SECONDS * 0.2

    def client(seed: int) -> None:
        rng = random.Random(seed)
        served = 0
        while served < REQUESTS or time.monotonic() < deadline:
            prompt, length = rng.choice(PROMPTS), rng.choice(LENGTHS)
            drop = served % 6 == 5
            status, text, _ = srv.chat([{"role": "user", "content": prompt}], length, drop)
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                if status != 503:  # a full queue's is tried again, below
                    served += 1
                    if drop:
                        dropped[0] += 1
                    elif text != solo[prompt, length]:
                        mismatches.append((prompt, length, text, solo[prompt, length]))
                    else:
                        completed[0] += 1
                if "rss" not in warm and time.monotonic() >= warm_at and statuses.get(200, 0) >= 2 * CLIENTS:
                    warm["rss"] = srv.rss_kib()
            if status == 503:
                time.sleep(0.05)

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = srv.rss_kib()
    assert not mismatches, mismatches[:3]
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.get(200, 0) == completed[0] + dropped[0], (completed, dropped, statuses)
    assert completed[0] >= CLIENTS * (REQUESTS - 1) and dropped[0] >= CLIENTS, (completed, dropped, statuses)
    assert end <= warm["rss"] * 1.05, f"RSS grew from {warm['rss']} KiB to {end} KiB"
    print(f"{SECONDS:g} s, {CLIENTS} clients: {completed[0]} replies equal to their solo replies, {dropped[0]} "
          f"dropped mid-stream, statuses {statuses}, RSS {warm['rss'] / 1024:.1f} -> {end / 1024:.1f} MiB")


def test_a_long_conversation_is_trimmed_and_always_answered(server):
    srv = server(max_queue=8)
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    rss = []
    for turn in range(TURNS):
        messages.append({"role": "user", "content": f"Turn {turn}: {PROMPTS[turn % len(PROMPTS)]}"})
        status, text, usage = srv.chat(messages, 8)
        assert status == 200 and text is not None, f"turn {turn}: {status}"
        assert usage["prompt_tokens"] + usage["completion_tokens"] <= CONTEXT, usage
        messages.append({"role": "assistant", "content": text})
        if turn == TURNS // 5 or turn == TURNS - 1:
            rss.append(srv.rss_kib())
    assert rss[-1] <= rss[0] * 1.05, f"RSS grew from {rss[0]} KiB to {rss[-1]} KiB over {TURNS} turns"
    print(f"{TURNS} turns answered; RSS {rss[0] / 1024:.1f} -> {rss[-1] / 1024:.1f} MiB")
