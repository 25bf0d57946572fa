"""One sqlite3 connection owned by one dedicated worker thread.

sqlite3 objects are not shared across threads: the connection is created, used
and closed on its worker thread only, and the event loop awaits each job via
`run_in_executor`. Jobs of one handle run in FIFO order, so `close()` (a job
queued behind every earlier one) returns only after every write submitted
before it has committed or rolled back.

Several handles (in this process or others) share one database file safely:
WAL journal, a busy timeout, and `BEGIN IMMEDIATE` for every write transaction
so that read-modify-write sequences take the write lock before they read.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal, TypeVar

from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.adapters.sqlite.schema import ensure_schema
from agent_memory.domain.errors import BackendUnavailable, InvalidInput, StorageCorrupted

__all__ = ["DEFAULT_BUSY_TIMEOUT", "SqliteConnection", "SqliteHandle", "Synchronous"]

T = TypeVar("T")
# Result codes that mean the file itself is damaged, not that it is busy or gone.
_CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})

Synchronous = Literal["NORMAL", "FULL"]
DEFAULT_BUSY_TIMEOUT = 10.0


def _check_path(path: str | os.PathLike[str]) -> str:
    if not isinstance(path, str | os.PathLike):
        raise InvalidInput("path", f"a file path is required, got {type(path).__name__}")
    text = os.fspath(path)
    if not text.strip() or text == ":memory:" or text.startswith("file:"):
        raise InvalidInput("path", f"a database file path is required, got {text!r}")
    return text


class SqliteConnection:
    """A lazily opened connection plus its single worker thread.

    Nothing happens at construction; the first job opens the file (creating its
    directory), switches it to WAL and brings the schema up to date.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        self._path = _check_path(path)
        if (
            not isinstance(busy_timeout, int | float)
            or isinstance(busy_timeout, bool)
            or not 0 < busy_timeout <= 3600
        ):
            raise InvalidInput("busy_timeout", f"seconds in (0, 3600], got {busy_timeout!r}")
        if synchronous not in ("NORMAL", "FULL"):
            raise InvalidInput("synchronous", f"'NORMAL' or 'FULL', got {synchronous!r}")
        self._busy_ms = int(busy_timeout * 1000)
        self._synchronous = synchronous
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None  # touched on the worker thread only

    @property
    def path(self) -> str:
        return self._path

    async def run(self, job: Callable[[sqlite3.Connection], T]) -> T:
        """Run `job(connection)` on the worker thread; sqlite errors become `BackendUnavailable`."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="agent-memory-sqlite")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, job)

    async def close(self) -> None:
        """Close the connection after every queued job, then stop the worker."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(executor, self._close_conn)
        finally:
            executor.shutdown(wait=False)

    def _call(self, job: Callable[[sqlite3.Connection], T]) -> T:
        try:
            conn = self._conn if self._conn is not None else self._open()
        except (sqlite3.Error, OSError) as exc:  # OSError: the directory cannot be made
            raise self._error(exc) from exc
        try:
            return job(conn)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def _error(self, exc: sqlite3.Error | OSError) -> Exception:
        """The typed error for a failed call: a damaged file says so plainly."""
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None and code & 0xFF in _CORRUPT_CODES:
            return StorageCorrupted(
                "sqlite",
                self._path,
                str(exc),
                "Stop every process that uses the file, keep a copy of it (with its -wal"
                " file), then restore it from a backup or salvage it with the sqlite3"
                " shell's `.recover` command into a new file.",
            )
        return BackendUnavailable("sqlite", f"{self._path}: {exc}")

    def _open(self) -> sqlite3.Connection:
        """Open and initialise, retrying while another connection holds the lock.

        Switching a fresh file to WAL (and creating the schema) takes an exclusive
        lock that SQLite may refuse at once, without consulting the busy handler,
        when several processes open the same new file together; retry until the
        busy timeout has passed."""
        deadline = time.monotonic() + self._busy_ms / 1000
        delay = 0.005
        while True:
            try:
                return self._open_once()
            except sqlite3.OperationalError as exc:
                message = str(exc).lower()
                if ("locked" not in message and "busy" not in message) or (
                    time.monotonic() + delay > deadline
                ):
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _open_once(self) -> sqlite3.Connection:
        Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self._path, timeout=self._busy_ms / 1000, isolation_level=None, check_same_thread=True
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise BackendUnavailable("sqlite", f"{self._path}: WAL mode refused ({mode})")
            conn.execute("PRAGMA foreign_keys = ON")
            # Deleted content is overwritten on disk, not left in free pages:
            # forgetting a user must leave no recoverable trace in the file.
            conn.execute("PRAGMA secure_delete = ON")
            ensure_schema(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class SqliteHandle:
    """Base of the SQLite adapters: one `SqliteConnection` gated by the close
    rule. `ping` runs `_ping` on the worker thread; `close` waits for in-flight
    operations, then closes the connection (once)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        what: str,
        *,
        busy_timeout: float,
        synchronous: Synchronous,
    ) -> None:
        self._db = SqliteConnection(path, busy_timeout=busy_timeout, synchronous=synchronous)
        self._life = Lifecycle(what)

    @property
    def path(self) -> str:
        return self._db.path

    def _ping(self, conn: sqlite3.Connection) -> None:
        conn.execute("SELECT 1").fetchone()

    async def ping(self) -> None:
        async with self._life.op():
            await self._db.run(self._ping)

    async def close(self) -> None:
        if await self._life.begin_close():
            await self._db.close()
