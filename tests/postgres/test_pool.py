"""The connection borrow's fast path (`_database._Borrowed`): a connection
given back clean while nobody waits is parked and handed to the next borrower
with no pool call. These tests pin the rules that keep it as safe as the pool:
a caller waiting in the pool is never left waiting on a parked connection, a
parked connection whose server end went away is not handed out, a drain and
`close()` reach it too, and it goes back to the pool after `_PARK_SECONDS`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from agent_memory.adapters.postgres import PostgresDatabase, _database

PID = "SELECT pg_backend_pid()"


async def _pid(db: PostgresDatabase) -> int:
    """The backend of the connection a write-style borrow gets (no retry)."""
    async with db.connection() as conn:
        cur = await conn.execute(PID)
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


def _requests(db: PostgresDatabase) -> int:
    pool = db._pool
    assert pool is not None
    return int(pool.get_stats().get("requests_num", 0))


@pytest.fixture
async def db(postgres_url: str) -> Any:
    database = PostgresDatabase(postgres_url, schema="t_pool", max_size=2, connect_timeout=3)
    await database.open()
    try:
        yield database
    finally:
        await database.close()


async def test_sequential_calls_reuse_one_connection_without_the_pool(
    db: PostgresDatabase,
) -> None:
    """When this fails, every call went through psycopg_pool's getconn/putconn."""
    first = await _pid(db)
    before = _requests(db)
    pids = {await _pid(db) for _ in range(20)}
    assert pids == {first}
    assert _requests(db) == before


async def test_callers_waiting_in_the_pool_are_not_left_waiting(postgres_url: str) -> None:
    """One connection, ten callers holding it in turn: each release goes to the
    pool's waiting caller. When this fails, a connection was parked while a
    caller waited in the pool, which then timed out (`connect_timeout`)."""
    db = PostgresDatabase(postgres_url, schema="t_pool", max_size=1, connect_timeout=3)
    try:

        async def hold() -> None:
            async with db.connection() as conn:
                await asyncio.sleep(0.02)
                await conn.execute("SELECT 1")

        await asyncio.wait_for(asyncio.gather(*(hold() for _ in range(10))), timeout=2.5)
        await _pid(db)  # and the last one left is usable
    finally:
        await db.close()


async def test_a_parked_connection_whose_server_end_died_is_not_handed_out(
    db: PostgresDatabase, postgres_url: str
) -> None:
    """A borrow without retry right after the parked connection's backend was
    terminated gets a live connection. When this fails, the parked connection
    was handed out without the dead-connection check."""
    parked = await _pid(db)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (parked,))
    assert await _pid(db) != parked


async def test_a_drain_reaches_the_parked_connection(postgres_url: str) -> None:
    """A connection breaking in use makes the pool replace every connection
    opened before it: the parked one, and one borrowed before the drain and
    given back after it, are closed, not parked. When this fails, a connection
    opened before the drain stayed in use."""
    db = PostgresDatabase(postgres_url, schema="t_pool", max_size=3, connect_timeout=3)
    try:
        held = [asyncio.Event(), asyncio.Event()]
        release = asyncio.Event()
        other: list[psycopg.AsyncConnection[Any]] = []

        async def hold_and_break() -> None:
            async with db.connection() as conn:
                held[0].set()
                await release.wait()
                await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

        async def hold_across() -> None:
            async with db.connection() as conn:
                other.append(conn)
                held[1].set()
                await release.wait()
                await asyncio.sleep(0.1)  # given back once the drain is done

        breaking = asyncio.ensure_future(hold_and_break())
        across = asyncio.ensure_future(hold_across())
        await held[0].wait()
        await held[1].wait()
        async with db.connection() as conn:  # a third connection, parked on release
            parked = conn
        assert db._parked is parked
        release.set()
        with pytest.raises(_database.ConnectionLost):
            await breaking
        assert db._parked is None
        assert parked.closed
        await across
        assert db._parked is None
        assert other[0].closed
        await _pid(db)  # a new connection works
    finally:
        await db.close()


async def test_close_closes_the_parked_connection(postgres_url: str) -> None:
    """When this fails, `close()` left the parked connection open (the pool only
    closes the connections it holds)."""
    db = PostgresDatabase(postgres_url, schema="t_pool")
    async with db.connection() as conn:
        parked = conn
    assert db._parked is parked
    await db.close()
    assert parked.closed


async def test_a_connection_goes_back_to_the_pool_after_park_seconds(
    db: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's own rules (lifetime, drain) apply to a connection at least
    every `_PARK_SECONDS`. When this fails, a connection stayed out of the pool
    for good."""
    monkeypatch.setattr(_database, "_PARK_SECONDS", 0.05)
    await _pid(db)
    before = _requests(db)
    await asyncio.sleep(0.1)
    await _pid(db)  # borrowed parked, out for longer than the limit: given back
    assert db._parked is None
    await _pid(db)
    assert _requests(db) == before + 1
