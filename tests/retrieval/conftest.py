"""Shared fixtures of the retrieval tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.adapters.sqlite import SqliteMemoryStore
from agent_memory.ports.storage import MemoryStore

# Every backend with keyword search whose server (or local mode) the suite runs.
BACKENDS = ["memory", "sqlite", "redis", "postgres", "qdrant"]
SPACE = HashingEmbedder(16).space
LOCAL_SPACE = HashingEmbedder(64).space


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryStore]:
    """A fresh in-memory or SQLite store for `HashingEmbedder(64)` vectors."""
    handle: MemoryStore
    if request.param == "memory":
        handle = InMemoryMemoryStore(LOCAL_SPACE)
    else:
        handle = SqliteMemoryStore(tmp_path / "local.db", LOCAL_SPACE)
    yield handle
    await handle.close()


@pytest.fixture(params=BACKENDS)
async def backend_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[MemoryStore]:
    """A fresh, empty store of each backend for `HashingEmbedder(16)` vectors."""
    name = request.param
    if name == "memory":
        handle: MemoryStore = InMemoryMemoryStore(SPACE)
        yield handle
        await handle.close()
    elif name == "sqlite":
        handle = SqliteMemoryStore(tmp_path / "retrieval.db", SPACE)
        yield handle
        await handle.close()
    elif name == "redis":
        from agent_memory.adapters.redis import RedisMemoryStore

        url = request.getfixturevalue("redis_url")
        redis = RedisMemoryStore.from_url(url, SPACE, deployment="d" + uuid.uuid4().hex[:12])
        yield redis
        await redis.drop_index()
        await redis.close()
    elif name == "postgres":
        from agent_memory.adapters.postgres import PostgresDatabase, PostgresMemoryStore

        url = request.getfixturevalue("postgres_url")
        db = PostgresDatabase(url, schema="d" + uuid.uuid4().hex[:12], min_size=1, max_size=2)
        await db.open()
        pg = PostgresMemoryStore(db, SPACE, owns_database=True)
        yield pg
        await pg.close()
    else:
        from qdrant_client import AsyncQdrantClient

        from agent_memory.adapters.qdrant import QdrantMemoryStore

        qd = QdrantMemoryStore(AsyncQdrantClient(location=":memory:"), SPACE, owns_client=True)
        yield qd
        await qd.close()
