"""Forgetting a user is verifiable on real backends: the receipt counts what was
removed and lists every derived item it invalidated, and a scan of the raw
backend (every SQLite table after a WAL checkpoint; every Redis key and value;
every PostgreSQL table of the deployment's schema, `bytea` columns decoded)
finds neither the user's text nor the user id — not in facts, events or the
user's cache scope, and not in what was derived from them: domain digests
(also another domain's, fed by the user's global event), knowledge fragments
and graph checkpoints. The other user's data stays."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.adapters.memory.triples import InMemoryTripleStore
from agent_memory.adapters.sqlite.triples import SqliteTripleStore
from agent_memory.bootstrap import Settings, open_stores
from agent_memory.domain.records import Entity, Event
from agent_memory.domain.triples import Triple
from agent_memory.ports.storage import TripleStore
from agent_memory.services.compaction import Compactor
from agent_memory.services.graph_memory import GraphMemory
from agent_memory.services.knowledge import KNOWLEDGE_NAMESPACE, KnowledgeService
from agent_memory.services.user_memory import Invalidated, UserMemory, user_cache_scope

from .builders import user_event
from .scripted import ScriptedModel

EMB = HashingEmbedder(64)
SECRET = "Zanzibarian-quokka"  # appears only in the forgotten user's data
USER = "user-Vexillum-7q"  # the forgotten user's id: a marker of its own
OTHER = "u2"

Dump = Callable[[], Awaitable[str]]


def _sqlite_dump(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = []
        for table in tables:
            for row in con.execute(f'SELECT * FROM "{table}"'):
                rows.append(f"{table} {_text(row)}")
        return "\n".join(rows)
    finally:
        con.close()


def _text(row: Any) -> str:
    """A row as text, bytes decoded (a marker inside a blob stays visible)."""
    parts = []
    for value in row:
        if isinstance(value, bytes | bytearray | memoryview):
            parts.append(bytes(value).decode("utf-8", "replace"))
        else:
            parts.append(repr(value))
    return " | ".join(parts)


async def _redis_dump(url: str) -> str:
    """Every key of the server with its value, read in pipelined batches (the
    server holds every test's keys: one round trip per key took seconds)."""
    import redis.asyncio as redis

    client = redis.from_url(url)
    readers: dict[str, Any] = {
        "hash": lambda p, k: p.hgetall(k),
        "string": lambda p, k: p.get(k),
        "zset": lambda p, k: p.zrange(k, 0, -1),
        "set": lambda p, k: p.smembers(k),
        "list": lambda p, k: p.lrange(k, 0, -1),
    }
    try:
        out = []
        cursor = 0
        while True:
            cursor, keys = await client.scan(cursor, count=1000)
            if keys:
                async with client.pipeline(transaction=False) as pipe:
                    for key in keys:
                        pipe.type(key)
                    kinds = [k.decode() for k in await pipe.execute()]
                async with client.pipeline(transaction=False) as pipe:
                    for key, kind in zip(keys, kinds, strict=True):
                        reader = readers.get(kind)
                        if reader is None:
                            pipe.echo(kind)
                        else:
                            reader(pipe, key)
                    values = await pipe.execute()
                out += [
                    f"{key.decode('utf-8', 'replace')} {value!r}"
                    for key, value in zip(keys, values, strict=True)
                ]
            if cursor == 0:
                return "\n".join(out)
    finally:
        await client.aclose()


async def _postgres_dump(url: str, schema: str) -> str:
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
        tables = [str(r[0]) for r in await cur.fetchall()]
        assert tables, f"no tables in schema {schema}"
        rows = []
        for table in tables:
            cur = await conn.execute(
                sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table))
            )
            rows += [f"{table} {_text(row)}" for row in await cur.fetchall()]
        return "\n".join(rows)


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, Settings, Dump | None, TripleStore]]:
    settings = Settings(deployment=f"forget-{datetime.now(UTC).timestamp():.6f}".replace(".", "-"))
    if request.param == "memory":
        yield f"memory://forget-{id(request)}", settings, None, InMemoryTripleStore()
    elif request.param == "sqlite":
        path = tmp_path / "m.db"
        triples = SqliteTripleStore(path)

        async def sqlite_dump() -> str:
            return _sqlite_dump(path)

        yield f"sqlite:///{path}", settings, sqlite_dump, triples
        await triples.close()
    elif request.param == "redis":
        base = request.getfixturevalue("redis_url")

        async def redis_dump() -> str:
            return await _redis_dump(base)

        yield base, settings, redis_dump, InMemoryTripleStore()
    else:
        from agent_memory.adapters.postgres import schema_for_deployment

        base = request.getfixturevalue("postgres_url")
        schema = schema_for_deployment(settings.deployment)

        async def pg_dump() -> str:
            return await _postgres_dump(base, schema)

        yield base, settings, pg_dump, InMemoryTripleStore()


def _event(id: str, domain: str, *, user: str | None, text: str, at: datetime, **kw: Any) -> Event:
    return Event(
        id=id,
        domain=domain,
        agent="planner",
        action=f"plan {text}",
        outcome=f"done {text}",
        summary=f"trip for {text}",
        occurred_at=at,
        recorded_at=at,
        user_id=user,
        **kw,
    )


async def test_forget_receipt_and_raw_scan(
    backend: tuple[str, Settings, Dump | None, TripleStore],
) -> None:
    url, settings, dump, triples = backend
    stores = await open_stores(url, space=EMB.space, settings=settings)
    assert stores.events is not None
    assert stores.cache is not None
    if dump is None:  # the in-process backends, read directly
        parts: list[Any] = [stores.events, stores.cache, triples]
        spaces = stores.store.backend.spaces  # type: ignore[attr-defined]

        async def memory_dump() -> str:
            records = [
                (owner, list(index.records.values()))
                for space in spaces.values()
                for owner, index in space.items()
            ]
            return repr([records, *(vars(p.backend) for p in parts)])

        dump = memory_dump
    clock = SystemClock()
    users = UserMemory(
        store=stores.store,
        embedder=EMB,
        clock=clock,
        events=stores.events,
        cache=stores.cache,
        triples=triples,
    )
    try:
        await users.extract(
            user_id=USER,
            namespace="travel",
            wait=True,
            conversation=f"My name is Oriane. I'm vegan. I live in {SECRET}. I prefer aisle seats.",
        )
        await users.extract(
            user_id=OTHER, namespace="travel", conversation="I live in Paris", wait=True
        )
        now = datetime.now(UTC)
        pod = Entity("pod", "web-1")
        await stores.events.append(
            [
                _event("e1", "travel", user=USER, text=SECRET, at=now, origin_request_id="r1"),
                _event("e3", "travel", user=USER, text=SECRET, at=now, entities=(pod,)),
                # global: shows in every domain's window, so in "weather"'s digest too
                _event("g1", "ops", user=USER, text=SECRET, at=now, is_global=True),
                user_event("e2", user_id=OTHER, summary="paris trip", at=now),
                _event("w1", "weather", user=OTHER, text="Lisbon", at=now),
            ]
        )
        await stores.cache.put(user_cache_scope(USER), "profile", SECRET.encode())
        # Derived data: digests, knowledge fragments, triples, a checkpoint.
        compactor = Compactor(events=stores.events, cache=stores.cache, clock=clock)
        for domain in ("travel", "weather"):
            digest = await compactor.digest(domain)
            assert digest.digest is not None, domain
            assert SECRET in digest.digest, domain
        knowledge = KnowledgeService(
            store=stores.store,
            embedder=EMB,
            clock=clock,
            llm=ScriptedModel(
                [f'[{{"content": "Book {SECRET} lodges early", "importance": 0.7}}]']
            ),
        )
        await knowledge.extract(
            domain="travel", request_id="r9", result="...", user_id=USER, wait=True
        )
        await knowledge.store_fragments(
            "travel",
            [(f"{SECRET} pod restarts", 0.5)],
            kind="fragment",
            attributes={"request_id": "r1"},
        )
        await knowledge.store_fragments(
            "travel",
            [(f"web-1 serves {SECRET}", 0.5)],
            kind="reflection",
            attributes={"entity": ["pod", "web-1"], "events": 5},
        )
        await knowledge.store_fragments(
            "weather",
            [(f"{SECRET} storms", 0.5)],
            kind="reflection",
            attributes={"entity": ["city", "x"], "events": 5, "users": [OTHER, USER]},
        )
        await knowledge.store_fragments(
            "travel",
            [("Paris trains strike on Mondays", 0.5)],
            kind="fragment",
            attributes={"request_id": "r2", "user_id": OTHER},
        )
        await triples.add(
            [
                Triple(
                    owner=USER,
                    loop="chat",
                    subject="user",
                    predicate="visits",
                    object=SECRET,
                    created_at=now,
                ),
                Triple(
                    owner=OTHER,
                    loop="chat",
                    subject="user",
                    predicate="visits",
                    object="Paris",
                    created_at=now,
                ),
            ]
        )
        graph = GraphMemory(triples, stores.cache, None, clock=clock)
        checkpoint, failures = await graph.checkpoint(USER, "chat", summary=f"went to {SECRET}")
        assert checkpoint is not None, failures
        before = await dump()
        assert SECRET in before, "the raw scan must see the user's text"
        assert USER in before, "the raw scan must see the user id"

        receipt = await users.forget(USER)

        # the raw scan first: reading a digest again would rebuild it
        after = await dump()
        assert SECRET not in after, "no trace of the forgotten user's text in the raw backend"
        assert USER not in after, "no trace of the forgotten user's id in the raw backend"
        assert "vegan" not in after.lower()
        assert "Oriane" not in after
        assert "Paris" in after, "other users' data stays"
        assert "Lisbon" in after
        assert receipt.complete, receipt.failures
        assert (receipt.facts, receipt.events, receipt.cache_entries) == (4, 3, 1)
        kinds = sorted((d.kind, d.scope) for d in receipt.derived)
        assert kinds == [
            ("checkpoints", USER),
            ("digest", "travel"),
            ("digest", "weather"),
            ("fragment", "travel"),
            ("fragment", "travel"),
            ("fragment", "travel"),
            ("fragment", "weather"),
            ("triples", USER),
        ], receipt.derived
        assert Invalidated("triples", USER, "*", 1) in receipt.derived
        assert await users.facts(user_id=USER) == []
        assert await graph.last_checkpoint(USER, "chat") is None
        window = await stores.events.window("travel", since=now - timedelta(days=1), limit=10)
        assert [e.id for e in window.events] == ["e2"]
        # the digests are rebuilt without the user
        for domain in ("travel", "weather"):
            digest = await compactor.digest(domain)
            assert digest.digest is not None
            assert SECRET not in digest.digest
        kept = await stores.store.list("travel", namespace=KNOWLEDGE_NAMESPACE)
        assert [r.content for r in kept.records] == ["Paris trains strike on Mondays"]
        assert [t.object for t in await triples.query(OTHER)] == ["Paris"]
    finally:
        await stores.close()
