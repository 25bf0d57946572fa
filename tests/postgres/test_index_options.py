"""Vector index parameters on PostgreSQL: URL and settings round trip into the
HNSW index and the sessions, bad values are `ConfigurationError`s naming the
parameter, `rebuild_index` applies new build parameters, and `bulk_add` (index
dropped, COPY, index built once) leaves the same answers as `add`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
import pytest

import agent_memory
from agent_memory.adapters._common.index_options import IndexOptions
from agent_memory.adapters.memory.store import InMemoryMemoryStore
from agent_memory.adapters.postgres import PostgresMemoryStore, open_stores
from agent_memory.adapters.postgres.store import (
    DEFAULT_EF_CONSTRUCTION,
    DEFAULT_EF_SEARCH,
    DEFAULT_EXACT_THRESHOLD,
    DEFAULT_M,
)
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.errors import ConfigurationError, DuplicateRecord
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from postgres.conftest import OpenDatabase

DIM = 8
SPACE = EmbeddingSpace(model="index-options", dimension=DIM)
AT = datetime(2026, 1, 1, tzinfo=UTC)


def _with(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


def _records(owner: str, vectors: np.ndarray) -> list[MemoryRecord]:
    return [
        MemoryRecord(
            owner=owner,
            id=f"r{i:05d}",
            namespace="ns",
            kind="fact",
            content=f"record {i}",
            vector=v,
            created_at=AT,
            updated_at=AT,
        )
        for i, v in enumerate(vectors)
    ]


async def _close(parts: dict[str, Any]) -> None:
    for name in ("store", "events", "leases", "cache"):
        await parts[name].close()


def _index_def(url: str, schema: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexdef LIKE '%%hnsw%%'",
            (schema,),
        ).fetchone()
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    assert row is not None
    return str(row[0])


async def test_url_parameters_round_trip(postgres_url: str) -> None:
    """When this fails, a URL parameter was dropped or not used to build the index."""
    schema = "io_" + uuid.uuid4().hex[:10]
    url = _with(
        postgres_url, "hnsw_m=8&hnsw_ef_construction=40&hnsw_ef_search=77&exact_threshold=5"
    )
    parts = await open_stores(
        url,
        space=SPACE,
        retention=timedelta(days=1),
        schema=schema,
        index=IndexOptions(m=24, exact_threshold=99),  # the URL wins where both are set
    )
    store: PostgresMemoryStore = parts["store"]
    try:
        assert store.index_options == IndexOptions(
            m=8, ef_construction=40, ef_search=77, exact_threshold=5
        )
        await store.add(_records("o", np.eye(DIM, dtype=np.float32)))
        row = await store.database.fetch_one(psycopg.sql.SQL("SHOW hnsw.ef_search"), ())
        assert row is not None
        assert row[0] == "77"
    finally:
        await _close(parts)
    definition = _index_def(postgres_url, schema)
    assert "m='8', ef_construction='40'" in definition, definition


async def test_settings_reach_the_store_and_defaults_apply(postgres_url: str) -> None:
    deployment = "io" + uuid.uuid4().hex[:8]
    settings = Settings(
        url=postgres_url, deployment=deployment, hnsw_ef_search=55, exact_search_threshold=9
    )
    async with await agent_memory.connect(postgres_url, settings=settings) as memory:
        options = memory.store.index_options  # type: ignore[attr-defined]
        assert options == IndexOptions(
            m=DEFAULT_M, ef_construction=DEFAULT_EF_CONSTRUCTION, ef_search=55, exact_threshold=9
        )
        schema = memory.store.database.schema  # type: ignore[attr-defined]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    assert (DEFAULT_EF_SEARCH, DEFAULT_EXACT_THRESHOLD) != (55, 9)


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("hnsw_m=x", "hnsw_m"),
        ("hnsw_m=1", "hnsw_m"),
        ("hnsw_ef_construction=2000", "hnsw_ef_construction"),
        ("hnsw_m=32&hnsw_ef_construction=40", "hnsw_ef_construction"),  # pgvector: >= 2 * m
        ("hnsw_ef_search=0", "hnsw_ef_search"),
        ("hnsw_ef_search=1001", "hnsw_ef_search"),  # pgvector's limit (the shared one: 10,000)
        ("exact_threshold=-3", "exact_threshold"),
    ],
)
async def test_bad_url_parameters_name_the_parameter(
    postgres_url: str, query: str, name: str
) -> None:
    with pytest.raises(ConfigurationError, match=name):
        await open_stores(_with(postgres_url, query), space=SPACE, retention=timedelta(days=1))


def test_bad_settings_name_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="AGENT_MEMORY_HNSW_M"):
        Settings.from_env({"AGENT_MEMORY_HNSW_M": "many"})
    with pytest.raises(ConfigurationError, match="AGENT_MEMORY_HNSW_EF_SEARCH"):
        Settings(hnsw_ef_search=0)


async def _hnsw_defs(store: PostgresMemoryStore) -> list[str]:
    async with store.database.connection() as conn:
        cur = await conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexdef LIKE '%%hnsw%%'",
            (store.database.schema,),
        )
        return [str(r[0]) for r in await cur.fetchall()]


async def test_rebuild_index_applies_new_build_parameters(open_database: OpenDatabase) -> None:
    db = await open_database()
    store = PostgresMemoryStore(db, SPACE)
    await store.add(_records("o", np.eye(DIM, dtype=np.float32)))
    assert f"m='{DEFAULT_M}'" in (await _hnsw_defs(store))[0]
    rebuilt = PostgresMemoryStore(db, SPACE, hnsw_m=6, hnsw_ef_construction=30)
    await rebuilt.rebuild_index()
    rows = await _hnsw_defs(store)
    assert len(rows) == 1, rows
    assert "m='6', ef_construction='30'" in rows[0], rows


async def test_bulk_add_answers_as_the_oracle(open_database: OpenDatabase) -> None:
    """`bulk_add` stores every record and rebuilds the index; searches, exact
    (small owner) and through the rebuilt graph, give the oracle's answer here."""
    rng = np.random.default_rng(5)
    db = await open_database()
    store = PostgresMemoryStore(db, SPACE, exact_threshold=0)
    exact = PostgresMemoryStore(db, SPACE)
    oracle = InMemoryMemoryStore(SPACE)
    records = _records("o", rng.standard_normal((600, DIM)).astype(np.float32))
    added = await store.bulk_add([records[:300], records[300:]])
    await oracle.add(records)
    assert added == 600
    assert len(await _hnsw_defs(store)) == 1
    # A failing batch still leaves the index rebuilt (and the error raised).
    with pytest.raises(DuplicateRecord):
        await store.bulk_add([records[:1]])
    assert len(await _hnsw_defs(store)) == 1
    for _ in range(10):
        q = rng.standard_normal(DIM).astype(np.float32)
        want = [h.record.id for h in await oracle.search("o", q, limit=5)]
        assert [h.record.id for h in await exact.search("o", q, limit=5)] == want
        approx = {h.record.id for h in await store.search("o", q, limit=5)}
        assert len(approx & set(want)) >= 4
