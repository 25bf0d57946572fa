"""Server failures on a real PostgreSQL: restart mid-test, kill -9 after
acknowledged writes, and processes racing the migrations at startup.

The restart and durability tests run on a private server with the default
(durable) settings, so the session server can stay fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import numpy as np
import psycopg
import pytest
from psycopg import sql

from agent_memory.adapters.postgres import (
    SCHEMA_VERSION,
    PostgresCache,
    PostgresDatabase,
    PostgresEventLog,
    PostgresLeaseStore,
    PostgresMemoryStore,
)
from agent_memory.domain.errors import BackendUnavailable
from agent_memory.domain.records import EmbeddingSpace, Entity, Event, MemoryRecord
from retrying import eventually
from servers.postgres_server import EmbeddedPostgres, start_postgres

SPACE = EmbeddingSpace(model="failure-test", dimension=4)
T = TypeVar("T")


@pytest.fixture(scope="module")
def private_server() -> Iterator[EmbeddedPostgres]:
    """A server of our own, default durability settings (synchronous_commit=on)."""
    server = start_postgres(settings={"recovery_init_sync_method": "syncfs"})
    try:
        yield server
    finally:
        server.destroy()


def _record(i: int, owner: str = "alice") -> MemoryRecord:
    now = datetime(2026, 5, 1, tzinfo=UTC) + timedelta(seconds=i)
    return MemoryRecord(
        id=f"r{i}",
        owner=owner,
        namespace="facts",
        kind="fact",
        content=f"fact number {i}",
        vector=np.array([1.0, i, 0.5, -i], dtype=np.float32),
        created_at=now,
        updated_at=now,
    )


def _event(i: int) -> Event:
    at = datetime.now(UTC) - timedelta(minutes=i)
    return Event(
        id=f"e{i}",
        domain="ops",
        agent="agent-1",
        action="restart",
        outcome="ok",
        summary=f"event {i}",
        occurred_at=at,
        recorded_at=at,
        entities=(Entity("pod", f"web-{i}"),),
    )


async def test_restart_mid_test_same_handles_recover(private_server: EmbeddedPostgres) -> None:
    """When this fails, a lost connection leaked a raw psycopg error, the pool
    kept handing out dead connections after the server came back, or it waited
    out a reconnection back-off (grown while the server was away) with the
    server already back."""
    db = PostgresDatabase(private_server.uri, schema="restart", connect_timeout=2)
    store = PostgresMemoryStore(db, SPACE, owns_database=True)
    events = PostgresEventLog(db, owns_database=True)
    await store.add([_record(1)])
    assert await events.append([_event(1)]) == 1

    private_server.stop()
    with pytest.raises(BackendUnavailable):
        await store.get("alice", "r1")
    with pytest.raises(BackendUnavailable):
        await events.append([_event(2)])

    private_server.start()
    got, failures = await eventually(lambda: store.get("alice", "r1"))
    assert got == _record(1)
    assert failures == 0, f"{failures} failures after the server was back"
    await store.add([_record(2)])  # writes work again on the same handle
    window = await events.window("ops", since=datetime.now(UTC) - timedelta(days=1), limit=10)
    assert [e.id for e in window.events] == ["e1"]
    hits = await store.search("alice", np.array([1, 2, 0.5, -2], dtype=np.float32), limit=1)
    assert [h.record.id for h in hits] == ["r2"]
    await store.close()
    await events.close()


async def _failures(op: Callable[[], Awaitable[T]]) -> tuple[T, int]:
    """Retry an operation until it succeeds, at most 3 times; (result, failures)."""
    for failures in range(3):
        try:
            return await op(), failures
        except BackendUnavailable:
            await asyncio.sleep(0.05)
    return await op(), 3


@contextlib.asynccontextmanager
async def _handles(
    uri: str, schema: str, **options: float
) -> AsyncIterator[tuple[PostgresMemoryStore, PostgresEventLog, PostgresLeaseStore, PostgresCache]]:
    """The four ports on one database, closed even when the test fails (an open
    pool would keep the event loop from shutting down)."""
    db = PostgresDatabase(uri, schema=schema, **options)  # type: ignore[arg-type]
    handles = (
        PostgresMemoryStore(db, SPACE, owns_database=True),
        PostgresEventLog(db, owns_database=True),
        PostgresLeaseStore(db, owns_database=True),
        PostgresCache(db, owns_database=True),
    )
    try:
        yield handles
    finally:
        for handle in handles:
            await handle.close()


async def test_kill_9_and_restart_cost_no_failed_read(private_server: EmbeddedPostgres) -> None:
    """When this fails, the pool handed out connections the crash had killed (no
    check on borrow), or a read whose connection broke was not retried on a new
    one. The pool is kept full (min_size = max_size) so that every crash leaves
    several dead idle connections behind, as a busy process has."""
    async with _handles(
        private_server.uri, "restart_reads", min_size=6, max_size=6, connect_timeout=10
    ) as (store, events, leases, cache):
        await store.add([_record(i) for i in range(20)])
        assert await events.append([_event(i) for i in range(5)]) == 5
        lease = await leases.acquire("jobs", "compaction", "worker-1", timedelta(hours=1), b"p")
        assert lease is not None
        await cache.put("digests", "d1", b"digest")
        await store.database.open()
        query = np.array([1.0, 3.0, 0.5, -3.0], dtype=np.float32)
        since = datetime.now(UTC) - timedelta(days=1)

        async def read_all() -> None:
            """One call of every idempotent read, each checked for the right answer."""
            assert await store.get("alice", "r3") == _record(3)
            assert (await store.search("alice", query, limit=1))[0].record.id == "r3"
            assert (await store.search_text("alice", "number", limit=3)) != []
            listed = {r.id for r in (await store.list("alice", limit=50)).records}
            assert listed >= {f"r{i}" for i in range(20)}
            window = await events.window("ops", since=since, limit=10)
            assert {e.id for e in window.events} >= {f"e{i}" for i in range(5)}
            assert await cache.get("digests", "d1") == b"digest"
            held = await leases.get("jobs", "compaction")
            assert held is not None
            assert held.token == lease.token
            assert [h.key for h in await leases.scan("jobs", "comp")] == ["compaction"]

        reads: list[Callable[[], Awaitable[object]]] = [
            lambda: store.get("alice", "r3"),
            lambda: store.search("alice", query, limit=1),
            lambda: store.search_text("alice", "number", limit=3),
            lambda: store.list("alice", limit=50),
            lambda: events.window("ops", since=since, limit=10),
            lambda: cache.get("digests", "d1"),
            lambda: leases.get("jobs", "compaction"),
            lambda: leases.scan("jobs", "comp"),
        ]

        # Sequential reads right after a crash and restart: none fails.
        private_server.kill()
        private_server.start()
        failed = 0
        for read in reads:
            try:
                await read()
            except BackendUnavailable:
                failed += 1
        assert failed == 0, f"{failed} of {len(reads)} sequential reads failed after the restart"
        await read_all()

        # 32 concurrent reads right after a crash and restart: none fails.
        await asyncio.gather(*(reads[i % len(reads)]() for i in range(32)))  # a full, busy pool
        private_server.kill()
        private_server.start()
        results = await asyncio.gather(
            *(reads[i % len(reads)]() for i in range(32)), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        assert errors == [], f"{len(errors)} of 32 concurrent reads failed: {errors[:2]}"
        await read_all()

        # Writes: at most one failed call per handle, and every acknowledged write kept.
        private_server.kill()
        private_server.start()
        _, failures = await _failures(lambda: store.add([_record(100)]))
        assert failures <= 1
        added, failures = await _failures(lambda: events.append([_event(100)]))
        assert failures <= 1
        assert added == 1
        got, failures = await _failures(
            lambda: leases.acquire("jobs", "other", "worker-2", timedelta(hours=1), b"q")
        )
        assert failures <= 1
        assert got is not None
        _, failures = await _failures(lambda: cache.put("digests", "d2", b"two"))
        assert failures <= 1
        await read_all()
        assert await store.get("alice", "r100") == _record(100)
        assert (
            len((await events.window("ops", since=since - timedelta(days=1), limit=10)).events) == 6
        )
        assert await cache.get("digests", "d2") == b"two"
        other = await leases.get("jobs", "other")
        assert other is not None
        assert other.token == got.token


async def test_dead_pooled_connections_are_never_handed_out(
    private_server: EmbeddedPostgres,
) -> None:
    """Writes are not retried, so a write on a connection the crash killed would
    fail: after a kill -9 and restart with a full pool of dead connections, the
    first write on every port succeeds. When this fails, a borrowed connection
    was not checked (its socket's end-of-file) before use."""
    async with _handles(
        private_server.uri, "dead_pool", min_size=4, max_size=4, connect_timeout=10
    ) as (store, events, leases, cache):
        await store.add([_record(1)])
        await store.database.open()
        private_server.kill()
        private_server.start()
        await store.add([_record(2)])
        assert await events.append([_event(2)]) == 1
        assert await leases.acquire("jobs", "k", "w", timedelta(hours=1), b"") is not None
        await cache.put("digests", "d", b"v")
        assert await store.delete("alice", "r1")


async def _wait_for_lock_waiters(uri: str, count: int) -> None:
    """Until `count` sessions wait on a lock (the statements were sent)."""
    deadline = time.monotonic() + 10
    async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as conn:
        while True:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            )
            row = await cur.fetchone()
            if row is not None and row[0] >= count:
                return
            assert time.monotonic() < deadline, "the statements never blocked"
            await asyncio.sleep(0.02)


async def test_call_in_flight_when_the_server_dies(private_server: EmbeddedPostgres) -> None:
    """A read whose connection breaks mid-statement is run again on a new
    connection and succeeds; a write is not (it might have committed): it fails
    once with BackendUnavailable. When this fails, reads were not retried, or a
    write was retried blindly."""
    async with _handles(private_server.uri, "in_flight", connect_timeout=15) as (
        store,
        events,
        leases,
        cache,
    ):
        await store.add([_record(1)])
        assert await events.append([_event(1)]) == 1
        table = await store._tbl()
        blocker = await psycopg.AsyncConnection.connect(private_server.uri)
        try:
            await blocker.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
            await blocker.execute(
                sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                    store.database.table("events")
                )
            )
            read = asyncio.ensure_future(store.get("alice", "r1"))
            write = asyncio.ensure_future(events.append([_event(2)]))
            await _wait_for_lock_waiters(private_server.uri, 2)
            private_server.kill()
        finally:
            with contextlib.suppress(psycopg.Error):
                await blocker.close()
        private_server.start()
        assert await read == _record(1)
        with pytest.raises(BackendUnavailable):
            await write
        since = datetime.now(UTC) - timedelta(days=1)
        window = await events.window("ops", since=since, limit=10)
        assert [e.id for e in window.events] == ["e1"]  # the failed write was not re-run
        for handle in (store, events, leases, cache):
            await handle.close()


async def test_acknowledged_writes_survive_kill_9(private_server: EmbeddedPostgres) -> None:
    """When this fails, an operation returned before its transaction was durable
    (a commit acknowledged without a WAL flush)."""
    db = PostgresDatabase(private_server.uri, schema="durable", connect_timeout=2)
    store = PostgresMemoryStore(db, SPACE, owns_database=True)
    events = PostgresEventLog(db, owns_database=True)
    leases = PostgresLeaseStore(db, owns_database=True)
    cache = PostgresCache(db, owns_database=True)
    await store.add([_record(i) for i in range(200)])
    for i in range(200, 230):
        await store.add([_record(i)])
    assert await events.append([_event(i) for i in range(100)]) == 100
    lease = await leases.acquire("jobs", "compaction", "worker-1", timedelta(hours=1), b"p")
    assert lease is not None
    await cache.put("digests", "d1", b"\x00digest")

    private_server.kill()  # no shutdown checkpoint: recovery replays the WAL
    private_server.start()

    db2 = PostgresDatabase(private_server.uri, schema="durable", connect_timeout=2)
    store2 = PostgresMemoryStore(db2, SPACE, owns_database=True)
    events2 = PostgresEventLog(db2, owns_database=True)
    leases2 = PostgresLeaseStore(db2, owns_database=True)
    cache2 = PostgresCache(db2, owns_database=True)
    page = await store2.list("alice", limit=1000)
    assert sorted(r.id for r in page.records) == sorted(f"r{i}" for i in range(230))
    assert await store2.get("alice", "r7") == _record(7)
    window = await events2.window("ops", since=datetime.now(UTC) - timedelta(days=1), limit=500)
    assert len(window.events) == 100
    held = await leases2.get("jobs", "compaction")
    assert held is not None
    assert (held.owner, held.token) == ("worker-1", lease.token)
    assert await cache2.get("digests", "d1") == b"\x00digest"
    for handle in (store2, events2, leases2, cache2, store, events, leases, cache):
        await handle.close()


_RACER = textwrap.dedent(
    """
    import asyncio, sys
    from datetime import UTC, datetime
    import numpy as np
    from agent_memory.adapters.postgres import PostgresDatabase, PostgresMemoryStore
    from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

    async def main(url, schema, n):
        db = PostgresDatabase(url, schema=schema)
        space = EmbeddingSpace(model="race", dimension=3)
        store = PostgresMemoryStore(db, space, owns_database=True)
        now = datetime.now(UTC)
        await store.add([MemoryRecord(id=f"p{n}", owner="o", namespace="n", kind="k",
                         content="x", vector=np.ones(3, np.float32), created_at=now,
                         updated_at=now)])
        print(await db.schema_version())
        await store.close()

    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
    """
)


def test_processes_starting_together_do_not_race_migrations(postgres_url: str) -> None:
    """When this fails, two processes applied the same migration (a duplicate
    version row, a 'relation already exists' error) or created a space table twice."""
    schema = f"race_{uuid.uuid4().hex[:10]}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, postgres_url, schema, str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    try:
        for proc, (out, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, err
            assert out.strip() == str(SCHEMA_VERSION)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            versions = conn.execute(
                sql.SQL("SELECT version FROM {} ORDER BY version").format(
                    sql.Identifier(schema, "schema_version")
                )
            ).fetchall()
            assert [v[0] for v in versions] == list(range(1, SCHEMA_VERSION + 1))
            spaces = conn.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, "spaces"))
            ).fetchone()
            assert spaces is not None
            assert spaces[0] == 1
            table = conn.execute(
                sql.SQL("SELECT table_name FROM {}").format(sql.Identifier(schema, "spaces"))
            ).fetchone()
            assert table is not None
            rows = conn.execute(
                sql.SQL("SELECT id FROM {} ORDER BY id").format(sql.Identifier(schema, table[0]))
            ).fetchall()
            assert [r[0] for r in rows] == ["p0", "p1"]
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def test_unreachable_server_raises_backend_unavailable(tmp_path: object) -> None:
    """When this fails, a connection failure surfaced as a raw client error."""
    db = PostgresDatabase("postgresql://postgres@/postgres?host=/nonexistent", connect_timeout=1)
    store = PostgresMemoryStore(db, SPACE, owns_database=True)
    with pytest.raises(BackendUnavailable, match="postgres unavailable"):
        await store.get("alice", "r1")
    await store.close()
