"""A small HTTP server that speaks the OpenAI API, for provider tests.

Real HTTP on 127.0.0.1 (`ThreadingHTTPServer` in a background thread), so the
client's real transport, timeouts and connection handling are exercised. Each
test scripts replies per path (`script("/v1/embeddings", Reply(429, ...), ...)`);
when a path's queue is empty the server answers like a healthy provider:
deterministic embeddings (in REVERSED order, so clients must sort by `index`)
and an echoing chat completion. Every request is logged with its headers, body
and arrival time.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

__all__ = ["FakeOpenAIServer", "Recorded", "Reply", "vector_for"]

EMBEDDINGS = "/v1/embeddings"
CHAT = "/v1/chat/completions"


def vector_for(text: str, dimension: int) -> list[float]:
    """The server's deterministic embedding of `text`: values in [-1, 1]."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    return [float(x) for x in rng.uniform(-1.0, 1.0, size=dimension).astype(np.float32)]


@dataclass
class Reply:
    """One scripted answer. `body` (raw bytes) wins over `json`; `delay` sleeps
    before answering; `drop` closes the connection without any answer."""

    status: int = 200
    json: Any = None
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes
    at: float


class FakeOpenAIServer:
    """Scripted OpenAI-compatible server; `url` is its base URL (no `/v1`)."""

    def __init__(self, dimension: int = 8) -> None:
        self.dimension = dimension
        self.requests: list[Recorded] = []
        self._scripts: dict[str, deque[Reply]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control -----------------------------------------------------------------

    def start(self) -> None:
        server = self

        class Handler(_Handler):
            fake = server

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        httpd.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._wake.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self, dimension: int = 8) -> None:
        """Forget scripts and the request log; wake any handler still sleeping."""
        self._wake.set()
        with self._lock:
            self.dimension = dimension
            self.requests = []
            self._scripts = {}
        self._wake = threading.Event()

    def script(self, path: str, *replies: Reply) -> None:
        """Queue `replies` for `path`, answered in order before the default behaviour."""
        with self._lock:
            self._scripts.setdefault(path, deque()).extend(replies)

    def requests_to(self, path: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    # -- used by the handler -----------------------------------------------------

    def _take(self, request: Recorded) -> tuple[Reply | None, threading.Event]:
        with self._lock:
            self.requests.append(request)
            queue = self._scripts.get(request.path)
            return (queue.popleft() if queue else None), self._wake

    def default_reply(self, request: Recorded) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        if request.path == EMBEDDINGS:
            inputs = body.get("input")
            if isinstance(inputs, str):
                inputs = [inputs]
            if not isinstance(inputs, list):
                return Reply(400, {"error": {"message": "'input' is required"}})
            dim = body.get("dimensions", self.dimension)
            data = [
                {"object": "embedding", "index": i, "embedding": vector_for(text, dim)}
                for i, text in enumerate(inputs)
            ]
            data.reverse()  # clients must order by index, not by position
            return Reply(
                200, {"object": "list", "data": data, "model": body.get("model"), "usage": {}}
            )
        if request.path == CHAT:
            messages = body.get("messages") or [{"content": ""}]
            content = f"echo: {messages[-1].get('content', '')}"
            return Reply(
                200,
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "model": body.get("model"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop",
                        }
                    ],
                },
            )
        return Reply(404, {"error": {"message": f"no route {request.path}"}})


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAIServer
    protocol_version = "HTTP/1.1"  # keep-alive, like real providers
    disable_nagle_algorithm = True  # headers and body go out in separate writes

    def log_message(self, format: str, *args: Any) -> None:  # silence
        return

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            parsed: Any = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        request = Recorded(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=parsed,
            raw=raw,
            at=time.monotonic(),
        )
        reply, wake = self.fake._take(request)
        if reply is None:
            reply = self.fake.default_reply(request)
        if reply.delay:
            wake.wait(reply.delay)
        if reply.drop:
            self.close_connection = True
            return
        payload = reply.body if reply.body is not None else json.dumps(reply.json).encode()
        try:
            self.send_response(reply.status)
            if not any(k.lower() == "content-type" for k in reply.headers):
                self.send_header("Content-Type", "application/json")
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
