"""`agent_memory.connect("postgresql://...")` wires the four ports on PostgreSQL,
and the details `agent-memory doctor` prints name the schema and pgvector versions."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import sql

import agent_memory
from agent_memory.adapters.postgres import (
    SCHEMA_VERSION,
    PostgresCache,
    PostgresEventLog,
    PostgresLeaseStore,
    PostgresMemoryStore,
    schema_for_deployment,
)
from agent_memory.bootstrap import Settings


async def test_connect_wires_every_port(postgres_url: str) -> None:
    deployment = f"connect test {uuid.uuid4().hex[:6]}"
    schema = schema_for_deployment(deployment)
    settings = Settings(url=postgres_url, deployment=deployment)
    try:
        async with await agent_memory.connect(postgres_url, settings=settings) as memory:
            assert isinstance(memory.store, PostgresMemoryStore)
            assert isinstance(memory.events, PostgresEventLog)
            assert isinstance(memory.leases, PostgresLeaseStore)
            assert isinstance(memory.cache, PostgresCache)
            details = memory.stores.details
            assert details["schema"] == schema
            assert details["schema_version"] == str(SCHEMA_VERSION)
            assert details["pgvector"].startswith("0.8")
            await memory.cache.put("s", "k", b"v", ttl=timedelta(minutes=1))
            assert await memory.cache.get("s", "k") == b"v"
            vec = await memory.embedder.embed(["hello"])
            record = agent_memory.MemoryRecord(
                id="r1",
                owner="alice",
                namespace="facts",
                kind="fact",
                content="hello",
                vector=vec[0],
                created_at=datetime.now(UTC),
                updated_at=datetime.now(UTC),
            )
            await memory.store.add([record])
            hits = await memory.store.search("alice", vec[0], limit=1)
            assert [h.record.id for h in hits] == ["r1"]
        # Closing the Memory closed the shared pool: the handles are closed.
        try:
            await memory.store.ping()
        except agent_memory.StoreClosed:
            pass
        else:  # pragma: no cover - the assertion below explains
            raise AssertionError("the store still answers after Memory.close()")
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_deployments_get_distinct_schemas() -> None:
    names = {schema_for_deployment(d) for d in ["default", "a b", "a-b", "a_b", "A B", "é"]}
    assert len(names) == 6
    assert schema_for_deployment("default") == "agent_memory"
    assert all(len(n) <= 63 for n in names)
