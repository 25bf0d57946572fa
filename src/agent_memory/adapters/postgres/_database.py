"""One PostgreSQL database: connection pool, migrations, space tables, errors.

`PostgresDatabase` is shared by the four port adapters. Nothing connects when
it is built; `open()` (called by the adapters on first use) applies the
migrations on a single connection under an advisory lock, then opens an
`AsyncConnectionPool` whose connections know pgvector's `vector` type and use
HNSW iterative scans, so filtered vector queries return the full limit
(`settings` adds session settings of your own, e.g. `statement_timeout`).

A server restart kills every pooled connection, and the pool only learns it
when one is used. So each borrowed connection is first checked without a round
trip (an idle session has nothing to read unless its server went away:
`_is_dead`) and a dead one is discarded for the next; a connection that breaks
in use makes the pool replace every connection opened before it
(`pool.drain()`), and idempotent reads (`read`, `fetch_one`, `fetch_all`) then
run once more on a new connection.
Writes are never run twice: one that might have committed fails once with
`BackendUnavailable`.

Every round trip to the server (a statement and its reply, a fetch, a commit)
waits at most `call_timeout` seconds (30 by default; `?call_timeout=` in the
URL): a server that accepts and never answers (stopped, frozen, partitioned
behind a firewall that drops packets) fails the call with `BackendUnavailable`
naming the bound instead of holding it, and the agent, for as long as it stays
away; psycopg's own cancellation of such a call takes ten seconds more. The
connection is closed (its state is unknown) and the pool replaces the ones of
its generation; the call is not retried. Schema work that may rightly take long
(migrations, HNSW index builds) has no bound.

A connection given back in a clean state while no caller waits for one is kept
aside ("parked") instead of going through the pool, and the next borrow takes
it with no pool call: psycopg_pool's `getconn` and `putconn` (a lock, logging,
stats and maintenance checks each) cost more than a short query's own Python
work. One connection at most is parked, for at most `_PARK_SECONDS` since it
left the pool (then it goes back, and the pool applies its lifetime and drain
rules), never while a caller waits in the pool, and it is checked like any
borrowed connection (`_is_dead`) before use.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import select
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import ConnStatus, TransactionStatus
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.adapters.postgres._codec import register_json_loaders
from agent_memory.adapters.postgres._migrations import (
    MIGRATION_LOCK,
    SCHEMA_VERSION,
    counts_table,
    migrate,
    zero_vectors_index,
)
from agent_memory.adapters.postgres._vector import VectorBytesLoader, register_vector
from agent_memory.domain.errors import (
    BackendUnavailable,
    ConfigurationError,
    DimensionMismatch,
    InvalidInput,
)
from agent_memory.domain.records import EmbeddingSpace

__all__ = [
    "BACKEND",
    "DEFAULT_CALL_TIMEOUT",
    "HNSW_MAX_DIMENSION",
    "NoAnswer",
    "PostgresDatabase",
    "PostgresHandle",
    "schema_for_deployment",
    "split_call_timeout",
    "unbounded",
]

BACKEND = "postgres"
HNSW_MAX_DIMENSION = 2000  # pgvector's limit for an HNSW index on `vector`
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SLUG = re.compile(r"[^a-z0-9]+")
_T = TypeVar("_T")
# How long a connection may go from one borrower to the next without passing
# through the pool (see the module docstring): the pool's own rules (lifetime,
# drain) apply to it again at least this often.
_PARK_SECONDS = 1.0


#: the default bound, in seconds, on one round trip to the server
DEFAULT_CALL_TIMEOUT = 30.0
_WAIT_INTERVAL = 0.1  # psycopg's own


class NoAnswer(psycopg.OperationalError):
    """A round trip got no answer within the connection's `call_timeout`; the
    connection was closed."""


class _Connection(AsyncConnection[Any]):
    """An async connection whose every round trip waits at most `call_timeout`
    seconds (None: no bound), set per connection by the database that opened
    it. Past it the connection is closed and `NoAnswer` raised."""

    call_timeout: float | None = None

    async def wait(
        self, gen: Any, interval: float = _WAIT_INTERVAL, timeout: float | None = None
    ) -> Any:
        bound = timeout if timeout is not None else self.call_timeout
        try:
            return await super().wait(gen, interval, bound)
        except psycopg.errors._WaitTimeout:
            if timeout is not None:  # psycopg's own bound (its cancellation)
                raise
            self.pgconn.finish()
            raise NoAnswer(
                f"no answer within {bound:g} s (call_timeout); the connection was closed"
            ) from None


@contextmanager
def unbounded(conn: AsyncConnection[Any]) -> Iterator[None]:
    """Lift `conn`'s round-trip bound inside a `with` block, for schema work that
    may rightly take long (index builds, migrations)."""
    if not isinstance(conn, _Connection):
        yield
        return
    saved, conn.call_timeout = conn.call_timeout, None
    try:
        yield
    finally:
        conn.call_timeout = saved


class ConnectionLost(BackendUnavailable):
    """The connection broke during the call (the server restarted, crashed or
    ended the session): the caller may run an idempotent call once more."""


def _no_answer(exc: BaseException) -> NoAnswer | None:
    """The `NoAnswer` that `exc` is or arose while handling (a rollback on the
    closed connection fails in turn); None when there is none."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, NoAnswer):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def split_call_timeout(url: str) -> tuple[str, float | None]:
    """The URL without `call_timeout`, and its value (seconds; `none` or `0`: no
    bound; absent: `DEFAULT_CALL_TIMEOUT`). A bad value is a `ConfigurationError`
    naming it; other parameters stay for libpq, in their order."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    values = [v for k, v in pairs if k == "call_timeout"]
    if not values:
        return url, DEFAULT_CALL_TIMEOUT
    raw = values[-1].strip().lower()
    kept = urlencode([(k, v) for k, v in pairs if k != "call_timeout"])
    stripped = urlunsplit(parts._replace(query=kept))
    if raw in ("none", "0", "off"):
        return stripped, None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise ConfigurationError(
            f"call_timeout: a positive number of seconds (or none) is required, got {raw!r}"
        )
    return stripped, value


#: How long opening a connection may take, in seconds, when the URL does not say
#: (libpq's `connect_timeout`): each connection attempt, and the pool's wait for
#: its first connections at open.
DEFAULT_CONNECT_TIMEOUT = 5.0


def connect_timeout_of(url: str) -> float:
    """The URL's libpq `connect_timeout` (seconds, a positive integer as libpq
    reads it), else `DEFAULT_CONNECT_TIMEOUT`. It bounds every connection
    attempt and the pool's wait at open alike: the pool used to pass its own
    5 s to libpq over the URL's value, and wait 5 s whatever the URL said. A
    value libpq would read as "wait forever" (0, negative) or not as a number
    is a `ConfigurationError` naming it: every call needs a bound."""
    values = [
        v
        for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True)
        if k == "connect_timeout"
    ]
    if not values:
        return DEFAULT_CONNECT_TIMEOUT
    raw = values[-1].strip()
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigurationError(
            f"connect_timeout: a positive whole number of seconds is required, got {raw!r}"
        )
    return float(value)


def schema_for_deployment(deployment: str) -> str:
    """`agent_memory` for the default deployment, else a slug plus a hash (never colliding)."""
    if deployment == "default":
        return "agent_memory"
    slug = _SLUG.sub("_", deployment.lower()).strip("_")[:24]
    digest = hashlib.sha256(deployment.encode()).hexdigest()[:10]
    return f"agent_memory_{slug}_{digest}" if slug else f"agent_memory_{digest}"


async def _applied_version(conn: AsyncConnection[Any], schema: str) -> int:
    """The schema's recorded version without taking the migration lock (0 when new)."""
    try:
        cur = await conn.execute(
            sql.SQL("SELECT coalesce(max(version), 0) FROM {}").format(
                sql.Identifier(schema, "schema_version")
            )
        )
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        return 0
    row = await cur.fetchone()
    return 0 if row is None else int(row[0])


async def _vector_oid(conn: AsyncConnection[Any]) -> int:
    cur = await conn.execute("SELECT 'vector'::regtype::oid")
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


def _is_nul_error(exc: BaseException) -> bool:
    return "NUL" in str(exc) and "0x00" in str(exc)


_POLL = hasattr(select, "poll")
_MAX_POLLERS = 256


def _readable(fd: int, pollers: dict[int, Any]) -> bool:
    """Whether the socket has input (or end-of-file) waiting, without blocking.

    `pollers` keeps one `poll` object per descriptor (a database's own, bounded),
    set up once: a poll of a descriptor number checks whatever socket holds
    that number now, which is the connection being checked."""
    if _POLL:
        poller = pollers.get(fd)
        if poller is None:
            if len(pollers) >= _MAX_POLLERS:
                pollers.clear()
            poller = pollers[fd] = select.poll()
            poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])  # pragma: no cover - Windows


async def _discard(
    pool: AsyncConnectionPool[AsyncConnection[Any]], conn: AsyncConnection[Any]
) -> None:
    """Close a dead connection and give it back: the pool opens another."""
    with suppress(psycopg.Error, OSError):
        await conn.close()
    await pool.putconn(conn)


def _is_dead(conn: AsyncConnection[Any], pollers: dict[int, Any]) -> bool:
    """An idle pooled connection whose server end is gone, found with no round
    trip. An idle autocommit session is sent nothing unasked, so any input
    waiting on its socket is the end-of-file of a server that went away, or its
    last words (the FATAL "terminating connection" a shutdown or a crash sends
    before closing): either way the session is over. (A host that vanished
    without closing the socket is not seen here; the statement then fails and
    `connection` replaces the pool's connections.)"""
    pgconn = conn.pgconn
    if pgconn.status != ConnStatus.OK:
        return True
    try:
        return _readable(pgconn.socket, pollers)
    except (psycopg.Error, OSError, ValueError):
        return True


class PostgresDatabase:
    """Connection pool + schema for one database (and one schema in it)."""

    def __init__(
        self,
        url: str,
        *,
        schema: str = "agent_memory",
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float | None = None,
        ef_search: int = 400,
        settings: Mapping[str, str] | None = None,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT,
    ) -> None:
        if not isinstance(url, str) or not url.strip():
            raise ConfigurationError("postgres: a connection URL is required")
        if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
            raise InvalidInput("schema", f"a lower-case SQL identifier is required, got {schema!r}")
        if min_size < 0 or max_size < max(1, min_size):
            raise InvalidInput("max_size", f"pool sizes {min_size}..{max_size} are invalid")
        if isinstance(ef_search, bool) or not isinstance(ef_search, int) or ef_search > 1000:
            # pgvector's hnsw.ef_search range is 1..1000 (the shared bound is wider).
            raise ConfigurationError(
                f"hnsw_ef_search: an integer from 1 to 1000 is required, got {ef_search!r}"
            )
        if call_timeout is not None and (
            isinstance(call_timeout, bool)
            or not isinstance(call_timeout, int | float)
            or not call_timeout > 0
            or call_timeout == float("inf")
        ):
            raise ConfigurationError(
                f"call_timeout: a positive number of seconds (or None) is required, "
                f"got {call_timeout!r}"
            )
        self._call_timeout = None if call_timeout is None else float(call_timeout)
        self._url = url
        self._schema = schema
        self._min_size = min_size
        self._max_size = max_size
        self._connect_timeout = (
            connect_timeout if connect_timeout is not None else connect_timeout_of(url)
        )
        self._settings: dict[str, str] = {
            "hnsw.iterative_scan": "relaxed_order",
            "hnsw.ef_search": str(ef_search),
            # Records hold UTC: with a UTC session psycopg returns timestamptz
            # values as UTC datetimes, with no per-value zone conversion.
            "timezone": "UTC",
            **dict(settings or {}),
        }
        self._pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None
        self._vector_oid: int | None = None
        self._open_lock = asyncio.Lock()
        self._spaces: dict[str, sql.Identifier] = {}
        self._counts: dict[str, sql.Identifier] = {}
        self._statements: dict[Hashable, sql.SQL] = {}
        self._closed = False
        self._refs = 0
        # Each connection's generation: a connection that breaks replaces the
        # pool only when it is of the current one (newer than the last drain).
        self._generation = 0
        self._born: weakref.WeakKeyDictionary[AsyncConnection[Any], int] = (
            weakref.WeakKeyDictionary()
        )
        # The parked connection (see the module docstring), when it left the
        # pool, and how many borrowers are waiting in the pool's `getconn`.
        self._parked: AsyncConnection[Any] | None = None
        self._parked_since = 0.0
        self._waiting = 0
        self._pollers: dict[int, Any] = {}  # see `_readable`
        # Fail fast while the server does not answer: after a round trip got no
        # answer in time (and, until a call succeeds again, whenever no
        # connection can be had), calls fail at once until this instant
        # (monotonic) instead of each waiting its bound.
        self._quiet_until = 0.0
        self._quiet_reason = ""
        self._silent = False  # a round trip got no answer; no call succeeded since
        # The pool found no connection in time and the server was not silent (it
        # refuses, or it is gone): each call then first tries one connection of
        # its own, and fails at once with libpq's reason when that is refused,
        # instead of waiting `connect_timeout` for the pool.
        self._away = False

    @property
    def url(self) -> str:
        return self._url

    @property
    def ef_search(self) -> int:
        """`hnsw.ef_search` of this database's sessions."""
        return int(self._settings["hnsw.ef_search"])

    @property
    def schema(self) -> str:
        return self._schema

    @property
    def vector_oid(self) -> int | None:
        """The oid of pgvector's `vector` type (known once the database is open)."""
        return self._vector_oid

    def _is_open(self) -> bool:
        return self._pool is not None

    def cached(self, key: Hashable, build: Callable[[], sql.Composable]) -> sql.SQL:
        """A statement composed once and kept as plain SQL text: composing and
        quoting on every call would cost more than a short query's round trip."""
        found = self._statements.get(key)
        if found is None:
            found = sql.SQL(build().as_string())
            self._statements[key] = found
        return found

    def table(self, name: str) -> sql.Identifier:
        """A schema-qualified, quoted table name."""
        return sql.Identifier(self._schema, name)

    # -- lifecycle ---------------------------------------------------------

    async def _connect_error(self) -> str | None:
        """Why a connection cannot be opened (libpq's message: a wrong database,
        user or password, a refused port), after the pool gave up without
        saying; None when one opens now."""
        try:
            async with asyncio.timeout(max(1.0, self._connect_timeout)):
                conn = await AsyncConnection.connect(
                    self._url, autocommit=True, connect_timeout=max(1, int(self._connect_timeout))
                )
        except (psycopg.Error, TimeoutError) as exc:
            return " ".join(str(exc).split()) or type(exc).__name__
        await conn.close()
        return None

    async def open(self) -> None:
        """Apply migrations and open the pool (idempotent; concurrent callers wait)."""
        if self._pool is not None:
            return
        async with self._open_lock:
            if self._is_open():
                return
            if self._closed:
                raise BackendUnavailable(BACKEND, "the database handle is closed")
            try:  # a URL libpq cannot parse would only time the pool out
                conninfo_to_dict(self._url)
            except psycopg.ProgrammingError as exc:
                raise ConfigurationError(f"malformed PostgreSQL URL: {exc}") from None
            pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
                self._url,
                min_size=self._min_size,
                max_size=self._max_size,
                kwargs={
                    "autocommit": True,
                    "connect_timeout": max(1, int(self._connect_timeout)),
                },
                connection_class=_Connection,
                configure=self._configure,
                timeout=self._connect_timeout,
                # The pool retries a failed connect with a doubling delay until
                # `reconnect_timeout`; the default (5 minutes) left calls timing
                # out for as long after a server came back as it had been away.
                # Given up, it grows again at the next call, right away.
                reconnect_timeout=self._connect_timeout,
                open=False,
                name=f"agent-memory-{self._schema}",
            )
            try:
                await pool.open(wait=True, timeout=self._connect_timeout)
                async with pool.connection() as conn:
                    if await _applied_version(conn, self._schema) < SCHEMA_VERSION:
                        with unbounded(conn):  # index builds on existing tables
                            await migrate(conn, self._schema)
                    if self._vector_oid is None:  # the migration just created the extension
                        self._vector_oid = await _vector_oid(conn)
                        register_vector(conn, self._vector_oid)
                        await pool.drain()  # connections opened before it lack the type
            except PoolTimeout as exc:
                await pool.close()
                why = await self._connect_error()
                detail = f"{exc}" + (f"; a direct connection says: {why}" if why else "")
                raise BackendUnavailable(BACKEND, f"cannot open the database: {detail}") from exc
            except psycopg.Error as exc:
                await pool.close()
                raise BackendUnavailable(BACKEND, f"cannot open the database: {exc}") from exc
            except BaseException:
                await pool.close()
                raise
            self._pool = pool

    @property
    def call_timeout(self) -> float | None:
        """The bound, in seconds, on one round trip to the server (None: none)."""
        return self._call_timeout

    async def _configure(self, conn: AsyncConnection[Any]) -> None:
        if isinstance(conn, _Connection):
            conn.call_timeout = self._call_timeout
        # Filtered HNSW scans keep going until the LIMIT is met (pgvector >= 0.8);
        # candidates are re-ranked exactly afterwards, so relaxed order is enough.
        # One round trip: every session setting, and the oid of `vector` (NULL
        # before the first migration created the extension).
        setters = sql.SQL(", ").join(sql.SQL("set_config(%s, %s, false)") for _ in self._settings)
        params: list[str] = [part for item in self._settings.items() for part in item]
        cur = await conn.execute(
            sql.SQL("SELECT to_regtype('vector')::oid, {}").format(setters), params
        )
        row = await cur.fetchone()
        if row is not None and row[0] is not None:
            self._vector_oid = int(row[0])
            register_vector(conn, self._vector_oid)
        register_json_loaders(conn)
        self._born[conn] = self._generation

    def retain(self) -> None:
        """Count one more adapter that closes this database when it is closed."""
        self._refs += 1

    async def release(self) -> None:
        """An owning adapter closed: close the database once the last one has."""
        self._refs -= 1
        if self._refs <= 0:
            await self.close()

    async def close(self) -> None:
        """Close the pool; later operations raise `BackendUnavailable`."""
        self._closed = True
        pool, self._pool = self._pool, None
        parked, self._parked = self._parked, None
        if pool is not None:
            if parked is not None:
                await pool.putconn(parked)  # back in the pool, closed with it
            await pool.close()

    # -- connections and errors -------------------------------------------

    def connection(self) -> _Borrowed:
        """A pooled autocommit connection (`async with db.connection() as conn`),
        alive when handed out; client failures become typed errors
        (`ConnectionLost` when the connection broke in use)."""
        return _Borrowed(self)

    async def _failure(self, conn: AsyncConnection[Any], exc: psycopg.Error) -> Exception:
        """The typed error a client failure on `conn` becomes; a connection that
        broke makes the pool replace the connections of its generation first."""
        if isinstance(exc, psycopg.errors.ProgramLimitExceeded):
            # a value past one of PostgreSQL's own limits: retrying cannot help
            # ("string is too long for tsvector": more distinct words than its
            # 1 MB full-text index of one record holds)
            field = "record.content" if "tsvector" in str(exc) else "value"
            return InvalidInput(field, f"too large for PostgreSQL: {exc}".strip())
        if isinstance(exc, psycopg.DataError):
            if _is_nul_error(exc):
                return InvalidInput("text", "PostgreSQL text cannot contain NUL (\\x00)")
            return BackendUnavailable(BACKEND, f"{type(exc).__name__}: {exc}")
        silent = _no_answer(exc)
        if silent is not None:
            # the server is there (it accepted) but silent: the others opened
            # before are likely stuck the same way; no retry (it would wait again)
            self._went_quiet(str(silent))
            await self._replace_connections(conn)
            return BackendUnavailable(BACKEND, str(silent))
        if conn.pgconn.status == ConnStatus.BAD:
            await self._replace_connections(conn)
            return ConnectionLost(BACKEND, f"{type(exc).__name__}: {exc}")
        return BackendUnavailable(BACKEND, f"{type(exc).__name__}: {exc}")

    def _went_quiet(self, reason: str) -> None:
        """The server did not answer: for one bound (`call_timeout`, at most
        `connect_timeout`) calls fail at once (`_check_quiet`) rather than each
        waiting for it again; the pool keeps trying to reconnect meanwhile."""
        window = min(self._connect_timeout, self._call_timeout or self._connect_timeout)
        self._quiet_until = time.monotonic() + window
        self._quiet_reason = reason
        self._silent = True

    def _check_quiet(self) -> None:
        left = self._quiet_until - time.monotonic()
        if left > 0:
            raise BackendUnavailable(
                BACKEND,
                f"the server did not answer ({self._quiet_reason}); calls fail at once "
                f"for {left:.1f} s more",
            )

    async def _borrow(
        self, pool: AsyncConnectionPool[AsyncConnection[Any]]
    ) -> AsyncConnection[Any]:
        """A connection from the pool that is not dead; the dead ones go back to
        the pool, which discards them and opens replacements."""
        deadline = time.monotonic() + self._connect_timeout
        if self._away:
            why = await self._connect_error()
            if why is not None:
                raise BackendUnavailable(BACKEND, f"cannot connect: {why}")
            self._away = False  # it answers again: the pool connects too
        while True:
            self._waiting += 1  # no connection is parked while a borrower waits
            try:
                conn = await pool.getconn(timeout=deadline - time.monotonic())
            except (PoolTimeout, psycopg.Error) as exc:
                if isinstance(exc, PoolTimeout):
                    if self._silent:
                        # still silent (a stopped server accepts, never answers)
                        self._went_quiet(f"no connection within {self._connect_timeout:g} s")
                    else:
                        # refused or gone: the next calls ask the server first,
                        # and fail at once while it still refuses
                        self._away = True
                raise BackendUnavailable(BACKEND, f"{type(exc).__name__}: {exc}") from exc
            finally:
                self._waiting -= 1
            if not _is_dead(conn, self._pollers):
                return conn
            await _discard(pool, conn)

    async def _replace_connections(self, broken: AsyncConnection[Any]) -> None:
        """A connection broke in use: the server most likely restarted, and every
        connection opened before then is dead. Close the idle ones and have the
        pool discard the busy ones when they come back, so the next borrow gets
        a new connection. Once per generation: a connection older than the last
        replacement breaking says nothing new."""
        if self._born.get(broken, -1) != self._generation:
            return
        self._generation += 1
        parked, self._parked = self._parked, None
        pool = self._pool
        if pool is not None:
            await pool.drain()
            if parked is not None:  # opened before the drain: the pool replaces it
                await pool.putconn(parked)

    async def read(self, op: Callable[[AsyncConnection[Any]], Awaitable[_T]]) -> _T:
        """Run an idempotent read; if its connection broke, once more on a new one
        (a restarted server then costs the caller no failed call)."""
        try:
            async with self.connection() as conn:
                return await op(conn)
        except ConnectionLost:
            async with self.connection() as conn:
                return await op(conn)

    async def fetch_one(
        self,
        statement: sql.SQL | sql.Composed,
        params: Sequence[Any] | Mapping[str, Any],
        *,
        binary: bool = False,
    ) -> Any:
        """The first row of an idempotent query (or None), retried as `read` does
        (spelled out, with no closure: every `get` goes through here)."""
        try:
            return await self._fetch_one(statement, params, binary)
        except ConnectionLost:
            return await self._fetch_one(statement, params, binary)

    async def fetch_all(
        self,
        statement: sql.SQL | sql.Composed,
        params: Sequence[Any] | Mapping[str, Any],
        *,
        binary: bool = False,
        vector_bytes: bool = False,
    ) -> list[Any]:
        """Every row of an idempotent query, retried as `read` does (spelled
        out, with no closure: every search goes through here). With
        `vector_bytes`, `vector` columns come as the bytes of their binary
        format (`VectorBytesLoader`), for `vectors_from_bytes`."""
        try:
            rows: list[Any] = await self._fetch_rows(statement, params, binary, vector_bytes)
        except ConnectionLost:
            rows = await self._fetch_rows(statement, params, binary, vector_bytes)
        return rows

    async def _fetch_rows(
        self,
        statement: sql.SQL | sql.Composed,
        params: Sequence[Any] | Mapping[str, Any],
        binary: bool,
        vector_bytes: bool,
    ) -> list[Any]:
        async with self.connection() as conn:
            if not vector_bytes:
                cur = await conn.execute(statement, params, binary=binary)
                return await cur.fetchall()
            cursor = conn.cursor(binary=binary)
            oid = self._vector_oid
            assert oid is not None, "the database is opened before any statement"
            cursor.adapters.register_loader(oid, VectorBytesLoader)
            await cursor.execute(statement, params)
            return await cursor.fetchall()

    async def _fetch_one(
        self,
        statement: sql.SQL | sql.Composed,
        params: Sequence[Any] | Mapping[str, Any],
        binary: bool,
    ) -> Any:
        async with self.connection() as conn:
            cur = await conn.execute(statement, params, binary=binary)
            return await cur.fetchone()

    async def ping(self) -> None:
        await self.fetch_one(sql.SQL("SELECT 1"), ())

    # -- metadata -----------------------------------------------------------

    async def schema_version(self) -> int:
        """The highest migration applied to this schema."""
        row = await self.fetch_one(
            self.cached(
                ("schema_version",),
                lambda: sql.SQL("SELECT coalesce(max(version), 0) FROM {}").format(
                    self.table("schema_version")
                ),
            ),
            (),
        )
        return int(row[0]) if row is not None else 0

    async def pgvector_version(self) -> str | None:
        """The installed pgvector extension version, e.g. '0.8.1'."""
        row = await self.fetch_one(
            sql.SQL("SELECT extversion FROM pg_extension WHERE extname = 'vector'"), ()
        )
        return None if row is None else str(row[0])

    async def server_version(self) -> str:
        row = await self.fetch_one(sql.SQL("SHOW server_version"), ())
        return "" if row is None else str(row[0])

    # -- per-space tables ---------------------------------------------------

    async def space_table(
        self, space: EmbeddingSpace, text_config: str, hnsw: tuple[int, int] | None = None
    ) -> sql.Identifier:
        """The records table of an embedding space, created on first use (its HNSW
        index built `WITH (m, ef_construction)` = `hnsw`, else pgvector's defaults)."""
        known = self._spaces.get(space.identity)
        if known is not None:
            return known
        name = f"mem_{space.identity}"[:63]
        table = self.table(name)
        row = await self.fetch_one(
            sql.SQL("SELECT dimension, table_name FROM {} WHERE identity = %s").format(
                self.table("spaces")
            ),
            (space.identity,),
        )
        if row is not None:
            if int(row[0]) != space.dimension:
                raise DimensionMismatch(space.dimension, int(row[0]), "postgres table")
            table = self.table(str(row[1]))
            self._known(space, str(row[1]))
            return table
        async with self.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            cur = await conn.execute(
                sql.SQL("SELECT dimension, table_name FROM {} WHERE identity = %s").format(
                    self.table("spaces")
                ),
                (space.identity,),
            )
            row = await cur.fetchone()
            if row is not None:
                if int(row[0]) != space.dimension:
                    raise DimensionMismatch(space.dimension, int(row[0]), "postgres table")
                name = str(row[1])
                table = self.table(name)
            else:
                for statement in _space_ddl(self._schema, name, space.dimension, text_config, hnsw):
                    await conn.execute(statement)
                await conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (identity, model, dimension, revision, table_name)"
                        " VALUES (%s, %s, %s, %s, %s)"
                    ).format(self.table("spaces")),
                    (space.identity, space.model, space.dimension, space.revision, name),
                )
        self._known(space, name)
        return table

    def _known(self, space: EmbeddingSpace, name: str) -> None:
        self._spaces[space.identity] = self.table(name)
        self._counts[space.identity] = self.table(counts_table(name))

    def counts_table(self, space: EmbeddingSpace) -> sql.Identifier:
        """The counts table (records per owner, namespace and kind, kept by
        triggers) of a space whose table `space_table` has returned."""
        return self._counts[space.identity]


def _space_ddl(
    schema: str, name: str, dimension: int, text_config: str, hnsw: tuple[int, int] | None = None
) -> list[sql.Composed]:
    table = sql.Identifier(schema, name)
    cfg = sql.Literal(text_config)
    statements: list[sql.Composed] = [
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {table} ("
            ' owner text COLLATE "C" NOT NULL, id text COLLATE "C" NOT NULL,'
            ' namespace text COLLATE "C" NOT NULL, kind text COLLATE "C" NOT NULL,'
            " content text NOT NULL, context text NOT NULL,"
            " embedding vector({dim}) NOT NULL,"
            " created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL,"
            " importance double precision NOT NULL, attributes json NOT NULL,"
            " tsv tsvector GENERATED ALWAYS AS ("
            "  setweight(to_tsvector({cfg}::regconfig, content), 'A') ||"
            "  setweight(to_tsvector({cfg}::regconfig, context), 'B')) STORED,"
            " doclen integer GENERATED ALWAYS AS ({tokens}("
            "  to_tsvector({cfg}::regconfig, content) ||"
            "  to_tsvector({cfg}::regconfig, context))) STORED,"
            " PRIMARY KEY (owner, id))"
        ).format(
            table=table,
            dim=sql.Literal(dimension),
            cfg=cfg,
            tokens=sql.Identifier(schema, "tsv_tokens"),
        ),
        sql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON {} (owner, namespace, kind) INCLUDE (doclen)"
        ).format(sql.Identifier(f"{name}_scope"[:63]), table),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (owner, created_at DESC, id DESC)").format(
            sql.Identifier(f"{name}_list"[:63]), table
        ),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (tsv)").format(
            sql.Identifier(f"{name}_tsv"[:63]), table
        ),
        zero_vectors_index(schema, name),
    ]
    if dimension <= HNSW_MAX_DIMENSION:
        statements.append(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops){}"
            ).format(
                sql.Identifier(f"{name}_hnsw"[:63]),
                table,
                sql.SQL("")
                if hnsw is None
                else sql.SQL(" WITH (m = {}, ef_construction = {})").format(
                    sql.Literal(hnsw[0]), sql.Literal(hnsw[1])
                ),
            )
        )
    # Last: the counts table and its triggers (migration 4).
    statements.append(
        sql.SQL("SELECT {}({})").format(sql.Identifier(schema, "install_counts"), sql.Literal(name))
    )
    return statements


class _Borrowed:
    """The context manager `PostgresDatabase.connection()` returns: a plain
    class, because it wraps every statement and a generator-based one costs
    several µs a call. Entering borrows a live connection: the parked one when
    there is one (no pool call), else one from the pool. Leaving does what
    `async with conn` does (commit, or roll back after an error) when a
    transaction is open (an autocommit session outside `conn.transaction()` has
    none), turns a client failure into a typed error and gives the connection
    back: parked when it is clean (idle, no transaction), no connection is
    parked yet, nobody waits in the pool, no drain happened meanwhile and it
    left the pool less than `_PARK_SECONDS` ago; to the pool otherwise."""

    __slots__ = ("_conn", "_db", "_generation", "_pool", "_since")

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def __aenter__(self) -> AsyncConnection[Any]:
        db = self._db
        if db._quiet_until:
            db._check_quiet()
        pool = db._pool
        if pool is None:
            await db.open()
            pool = db._pool
            if pool is None:
                raise BackendUnavailable(BACKEND, "the database handle is closed")
        self._pool = pool
        self._generation = db._generation
        conn = db._parked
        if conn is not None:
            db._parked = None
            if not _is_dead(conn, db._pollers):
                self._since = db._parked_since
                self._conn = conn
                return conn
            await _discard(pool, conn)
        self._conn = conn = await db._borrow(pool)
        self._since = time.monotonic()
        return conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn = self._conn
        try:
            if conn.pgconn.transaction_status != TransactionStatus.IDLE:
                await conn.__aexit__(exc_type, exc, tb)
            if isinstance(exc, psycopg.Error):
                raise await self._db._failure(conn, exc) from exc
            if exc is None and self._db._silent and conn.pgconn.status == ConnStatus.OK:
                # the server answers again
                self._db._silent = False
                self._db._quiet_until = 0.0
        except psycopg.Error as failed:  # the commit on leaving
            raise await self._db._failure(conn, failed) from failed
        finally:
            db = self._db
            if (
                db._parked is None
                and not db._waiting
                and db._pool is self._pool
                and db._generation == self._generation
                and conn.pgconn.transaction_status == TransactionStatus.IDLE
                and time.monotonic() - self._since < _PARK_SECONDS
            ):
                db._parked = conn
                db._parked_since = self._since
            else:
                await self._pool.putconn(conn)


class PostgresHandle:
    """Base of the PostgreSQL adapters: one `PostgresDatabase` (closed with the
    last owning handle) gated by the close rule."""

    def __init__(self, database: PostgresDatabase, what: str, *, owns_database: bool) -> None:
        self._db = database
        self._owns = owns_database
        if owns_database:
            database.retain()
        self._life = Lifecycle(what)

    @property
    def database(self) -> PostgresDatabase:
        return self._db

    async def ping(self) -> None:
        async with self._life.op():
            await self._db.ping()

    async def close(self) -> None:
        if await self._life.begin_close() and self._owns:
            await self._db.release()
