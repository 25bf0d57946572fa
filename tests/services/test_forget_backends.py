"""Forgetting a user is verifiable on real backends: the receipt counts what was
removed, and a scan of the raw backend (every SQLite table including the FTS
index; every Redis key and value) finds no trace of the user's data."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Settings, open_stores
from agent_memory.services.user_memory import UserMemory, user_cache_scope

from .builders import user_event

EMB = HashingEmbedder(64)
SECRET = "Zanzibarian-quokka"  # appears only in u1's data


def _sqlite_dump(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = []
        for table in tables:
            for row in con.execute(f'SELECT * FROM "{table}"'):
                rows.append(repr(row))
        return "\n".join(rows)
    finally:
        con.close()


async def _redis_dump(url: str) -> str:
    import redis.asyncio as redis

    client = redis.from_url(url)
    try:
        out = []
        async for key in client.scan_iter(count=1000):
            kind = (await client.type(key)).decode()
            if kind == "hash":
                value: Any = await client.hgetall(key)
            elif kind == "string":
                value = await client.get(key)
            elif kind == "zset":
                value = await client.zrange(key, 0, -1)
            elif kind == "set":
                value = await client.smembers(key)
            elif kind == "list":
                value = await client.lrange(key, 0, -1)
            else:
                value = kind
            out.append(f"{key!r} {value!r}")
        return "\n".join(out)
    finally:
        await client.aclose()


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, Any]]:
    if request.param == "memory":
        url = f"memory://forget-{id(request)}"
        yield url, None
    elif request.param == "sqlite":
        path = tmp_path / "m.db"
        yield f"sqlite:///{path}", lambda: _sqlite_dump(path)
    else:
        base = request.getfixturevalue("redis_url")
        yield base, lambda: _redis_dump(base)


async def test_forget_receipt_and_raw_scan(backend: tuple[str, Any]) -> None:
    url, dump = backend
    settings = Settings(deployment=f"forget-{datetime.now(UTC).timestamp()}")
    stores = await open_stores(url, space=EMB.space, settings=settings)
    assert stores.events is not None
    assert stores.cache is not None
    users = UserMemory(
        store=stores.store,
        embedder=EMB,
        clock=SystemClock(),
        events=stores.events,
        cache=stores.cache,
    )
    try:
        await users.extract(
            user_id="u1",
            namespace="travel",
            wait=True,
            conversation=f"I'm vegan. I live in {SECRET}. I prefer aisle seats.",
        )
        await users.extract(
            user_id="u2", namespace="travel", conversation="I live in Paris", wait=True
        )
        now = datetime.now(UTC)
        await stores.events.append(
            [
                user_event("e1", user_id="u1", summary=f"trip for the {SECRET} user", at=now),
                user_event("e2", user_id="u2", summary="paris trip", at=now),
            ]
        )
        await stores.cache.put(user_cache_scope("u1"), "profile", SECRET.encode())
        if dump is not None:
            before = await dump() if callable(dump) and url.startswith("redis") else dump()
            assert SECRET in before, "the raw scan must be able to see the data"

        receipt = await users.forget("u1")

        assert (receipt.facts, receipt.events, receipt.cache_entries) == (3, 1, 1)
        assert receipt.complete
        assert await users.facts(user_id="u1") == []
        (q,) = await EMB.embed([f"vegan {SECRET}"])
        assert await stores.store.search("u1", q, limit=10) == []
        window = await stores.events.window("travel", since=now.replace(year=2000), limit=10)
        assert [e.id for e in window.events] == ["e2"]
        assert await stores.cache.get(user_cache_scope("u1"), "profile") is None
        if dump is not None:
            after = await dump() if url.startswith("redis") else dump()
            assert SECRET not in after, "no trace of the forgotten user's data in the raw backend"
            assert "vegan" not in after.lower()
            assert "Paris" in after, "other users' data stays"
    finally:
        await stores.close()
