"""A real `agent-memory serve` process on a free loopback port, for the tests
and benchmarks/server_load.py. Keys are written to a key file (digests only);
the raw keys stay in memory here."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from agent_memory.entrypoints.server.keys import hash_key, new_key

__all__ = ["LiveServer", "free_port", "unique"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """`agent-memory serve` in a subprocess. `keys` maps a name to a key-file
    entry without digest (`tenant`, optional `read_only`, `rate`, `burst`); the
    raw key of each is `server.key[name]`."""

    def __init__(
        self,
        url: str,
        keys: dict[str, dict[str, Any]],
        *,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.url = url
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.dir = Path(tempfile.mkdtemp(prefix="agent-memory-http-"))
        self.key_file = self.dir / "keys.json"
        self.log_file = self.dir / "server.log"
        self.key: dict[str, str] = {}
        self._entries: dict[str, dict[str, Any]] = {}
        for name, entry in keys.items():
            token = new_key()
            self.key[name] = token
            self._entries[name] = {"id": name, "sha256": hash_key(token), **entry}
        self.write_keys()
        self.extra_args = extra_args
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def write_keys(self) -> None:
        tmp = self.key_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"keys": list(self._entries.values())}))
        os.replace(tmp, self.key_file)

    def revoke(self, name: str) -> None:
        self._entries[name]["revoked"] = True
        self.write_keys()

    def headers(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key[name]}"}

    def start(self, timeout: float = 30.0) -> LiveServer:
        cmd = [
            sys.executable, "-m", "agent_memory.entrypoints.cli", "serve", "--url", self.url,
            "--host", "127.0.0.1", "--port", str(self.port), "--keys", str(self.key_file),
            *self.extra_args,
        ]  # fmt: skip
        env = {**os.environ, **(self.env or {})}
        env.pop("AGENT_MEMORY_SERVER_KEYS", None)
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.base + "/v1/ready", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server not ready in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def terminate(self) -> None:
        """Send SIGTERM (graceful shutdown) without waiting."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def close(self) -> None:
        """Stop the server and remove its directory (keys and log)."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def stop(self, timeout: float = 30.0) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"
