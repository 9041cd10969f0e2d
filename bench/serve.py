"""OpenAI-compatible servers under concurrent clients: `tessera serve` beside llama-cpp-python's
server (llama.cpp), on the bundled demo model (SmolLM2-135M-Instruct Q4_1), the same thread
count, in one run.

    make bench        # or: .venv/bin/python bench/serve.py   (needs the bench extra: llama-cpp-python[server])
    .venv/bin/python bench/serve.py --clients 1,4,8 --requests 24 --max-tokens 64

Each server runs in a process of its own on a free loopback port (Tessera with --device native,
its C runtime on the CPU, which is what `tessera serve` picks for a GGUF on a machine without a
GPU; "tessera" serves one request at a time, "tessera-batch" decodes up to --max-batch together
over a paged KV cache). For each client count, that many clients stream chat completions at once (greedy), sharing
the same ``--requests`` requests (each client takes the next when its last is done), so every
client count does the same work; one warm-up request first. Reported per server and client
count: completion tokens per second over all clients (the wall time of the whole phase), time to
first token (median and worst, queueing included) and the server's resident memory after the
phase. Tokens are counted from the usage each stream ends with (``stream_options.include_usage``),
or from the content chunks where a server sends none.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

QUESTIONS = ["What is the capital of France?", "Name three primary colors.", "Why is the sky blue?",
             "Write a haiku about the sea.", "What does a compiler do?", "How many legs does a spider have?",
             "Give me a tip for learning to cook.", "What is photosynthesis?", "Describe a cat in one sentence.",
             "What is 12 times 12?", "Suggest a name for a bakery.", "What causes rain?"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(name: str, gguf: str, port: int, threads: int, context: int, max_batch: int) -> list[str]:
    if name.startswith("tessera"):  # tessera: one request at a time; tessera-batch: continuous batching
        batch = ["--max-batch", str(max_batch)] if name == "tessera-batch" else []
        return [sys.executable, "-m", "tessera.cli", "serve", gguf, "--port", str(port), "--device", "native",
                "--threads", str(threads), "--context", str(context), "--max-queue", "16", *batch]
    # By default llama-cpp-python's server ends a running stream when another request arrives: off, so
    # that every client gets its whole reply, as from Tessera.
    return [sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--port", str(port), "--n_ctx", str(context),
            "--n_threads", str(threads), "--n_threads_batch", str(threads), "--interrupt_requests", "False"]


def wait_ready(port: int, process: subprocess.Popen, seconds: float = 600) -> str:
    """The id of the model the server serves, once /v1/models answers (a request must name it)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with status {process.returncode} before it was ready")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/v1/models")
            response = connection.getresponse()
            if response.status == 200:
                return json.loads(response.read())["data"][0]["id"]
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"no server on port {port} after {seconds:g} s")


def stream_chat(port: int, model: str, question: str, max_tokens: int) -> tuple[float, int, float]:
    """(seconds to the first content, completion tokens, seconds in all) of one streamed reply."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": question}], "stream": True,
                       "max_tokens": max_tokens, "temperature": 0, "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}: {response.read()[:300]!r}")
    first, chunks, usage = None, 0, None
    for raw in response:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        event = json.loads(line[5:])
        if event.get("usage"):
            usage = event["usage"]["completion_tokens"]
        for choice in event.get("choices") or []:
            if (choice.get("delta") or {}).get("content"):
                chunks += 1
                if first is None:
                    first = time.perf_counter() - start
    return (first if first is not None else float("nan")), (usage if usage is not None else chunks), \
        time.perf_counter() - start


def resident_mib(pid: int) -> float:
    """The server's resident memory, its children included (llama-cpp-python runs in one process)."""
    total = 0
    for child in [pid] + _children(pid):
        try:
            with open(f"/proc/{child}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total / 1024


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            direct = [int(p) for p in f.read().split()]
    except OSError:
        return []
    return direct + [g for c in direct for g in _children(c)]


def run_phase(port: int, model: str, clients: int, total: int, max_tokens: int) -> dict:
    """``total`` requests (question i for request i) shared by ``clients`` clients, each taking the next
    one when its last is done: every phase does the same work, whatever its client count."""
    results, errors, lock = [], [], threading.Lock()
    pending = iter(range(total))

    def client() -> None:
        while True:
            with lock:
                index = next(pending, None)
            if index is None:
                return
            try:
                results.append(stream_chat(port, model, QUESTIONS[index % len(QUESTIONS)], max_tokens))
            except Exception as error:  # noqa: BLE001 (reported below)
                errors.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise SystemExit(f"{len(errors)} requests failed, the first: {errors[0]}")
    ttfts = [first for first, _, _ in results]
    if any(n == 0 or first != first for first, n, _ in results):  # NaN: a reply with no content at all
        raise SystemExit("a reply came back empty: the server cut a stream short")
    return {"tokens": sum(n for _, n, _ in results), "wall": wall, "tok_s": sum(n for _, n, _ in results) / wall,
            "ttft_median": statistics.median(ttfts), "ttft_max": max(ttfts)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", default="1,4,8", help="client counts, comma separated (default 1,4,8)")
    parser.add_argument("--requests", type=int, default=24,
                        help="requests per phase, shared by its clients (default 24: two of each question)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of each server (default 2)")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--servers", default="tessera,tessera-batch,llama.cpp",
                        help="tessera (one request at a time), tessera-batch (--max-batch), llama.cpp")
    parser.add_argument("--max-batch", type=int, default=8, help="tessera-batch's --max-batch (default 8)")
    args = parser.parse_args()
    from tessera.frontend import bundled_smollm2_path

    gguf = bundled_smollm2_path()
    counts = [int(c) for c in args.clients.split(",")]
    rows: dict[tuple[str, int], dict] = {}
    for name in [s.strip() for s in args.servers.split(",") if s.strip()]:
        if name == "llama.cpp":
            try:
                import llama_cpp.server.app  # noqa: F401
            except ImportError as error:
                print(f"llama.cpp: missing ({error}; install the bench extra)")
                continue
        port = free_port()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        log = tempfile.TemporaryFile()  # not a pipe: a server's chatter would fill it and stall the server
        command = server_command(name, gguf, port, args.threads, args.context, args.max_batch)
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            try:
                model = wait_ready(port, process)
            except SystemExit:
                log.seek(0)
                print(log.read()[-3000:].decode("utf-8", "replace"), file=sys.stderr)
                raise
            stream_chat(port, model, "Hello!", args.max_tokens)  # warm-up
            for clients in counts:
                rows[name, clients] = {**run_phase(port, model, clients, args.requests, args.max_tokens),
                                       "rss": resident_mib(process.pid)}
                print(f"{name}, {clients} clients: {rows[name, clients]['tok_s']:.1f} tok/s", file=sys.stderr)
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
            log.close()
    print(f"SmolLM2-135M-Instruct Q4_1, {args.threads} threads per server, greedy, up to {args.max_tokens} tokens a "
          f"reply, {args.requests} requests per client count")
    print("| server | clients | completion tok/s (all clients) | vs 1 client | TTFT median s | TTFT max s | "
          "RSS MiB | tok/s vs llama.cpp |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, clients), row in rows.items():
        single = rows.get((name, counts[0]))
        peer = rows.get(("llama.cpp", clients))
        print(f"| {name} | {clients} | {row['tok_s']:.1f} | {row['tok_s'] / single['tok_s']:.2f}x | "
              f"{row['ttft_median']:.2f} | {row['ttft_max']:.2f} | {row['rss']:.0f} | "
              + (f"{row['tok_s'] / peer['tok_s']:.2f}x |" if peer else "- |"))


if __name__ == "__main__":
    main()
