"""PostgreSQL vector search against `memory://`, bit for bit.

memory://, SQLite, Qdrant and Milvus score with `domain.vector_index.exact_cosines`
(float32 products summed in float64), so cosines that tie in exact arithmetic
round alike everywhere and near ties fall the same way. PostgreSQL must give
the very same ids, order and scores on vectors built to tie (duplicates, scaled
copies, orthogonal sets, zero vectors, negations), through the exact scan and
through the HNSW index (a small exact threshold), also when ties straddle the
limit's cut.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg import sql

from agent_memory.adapters._common.index_options import IndexOptions
from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.postgres import PostgresDatabase, PostgresMemoryStore
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

DIM = 6
SPACE = EmbeddingSpace(model="search-agreement2", dimension=DIM)
T0 = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["exact", "hnsw"])
async def store(request: pytest.FixtureRequest, postgres_url: str) -> AsyncIterator[Any]:
    """A store on a schema of its own: exact scans (default threshold), or the
    HNSW index at any size (threshold 0; the planner made to use it)."""
    hnsw = request.param == "hnsw"
    db = PostgresDatabase(
        postgres_url,
        schema="a2" + uuid.uuid4().hex[:12],
        min_size=1,
        max_size=2,
        # the planner would scan a few rows and sort them: make it walk the index
        settings={"enable_seqscan": "off", "enable_bitmapscan": "off", "enable_sort": "off"}
        if hnsw
        else None,
    )
    await db.open()
    index = IndexOptions(exact_threshold=0) if hnsw else None
    s = PostgresMemoryStore(db, SPACE, owns_database=True, index=index)
    yield s
    await s.close()


def _rec(owner: str, id: str, vector: Any, kind: str = "fact", i: int = 0) -> MemoryRecord:
    return MemoryRecord(
        id=id,
        owner=owner,
        namespace="ns",
        kind=kind,
        content="",
        vector=np.asarray(vector, dtype=np.float32),
        created_at=T0 + timedelta(seconds=i),
        updated_at=T0 + timedelta(seconds=i),
    )


_SMALL = st.integers(min_value=-3, max_value=3).map(float)
_BASE = st.lists(_SMALL, min_size=DIM, max_size=DIM)
# How a record's vector derives from a base vector: itself, a scaled copy, its
# negation, a basis vector (orthogonal sets), or zero.
_SHAPE = st.one_of(
    st.tuples(st.just("copy"), st.integers(0, 3), st.sampled_from([1.0, 2.0, 0.5, 3.0, 1e-3, 7.0])),
    st.tuples(st.just("neg"), st.integers(0, 3), st.just(1.0)),
    st.tuples(st.just("axis"), st.integers(0, DIM - 1), st.sampled_from([1.0, -1.0, 0.1])),
    st.tuples(st.just("zero"), st.just(0), st.just(0.0)),
)


def _vector(bases: list[list[float]], shape: tuple[str, int, float]) -> np.ndarray[Any, Any]:
    how, which, scale = shape
    if how == "zero":
        return np.zeros(DIM, dtype=np.float32)
    if how == "axis":
        return (np.eye(DIM, dtype=np.float32)[which] * np.float32(scale)).astype(np.float32)
    v = np.asarray(bases[which % len(bases)], dtype=np.float32)
    if not v.any():
        v = np.ones(DIM, dtype=np.float32)
    return (v * np.float32(scale if how == "copy" else -1.0)).astype(np.float32)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example(
    bases=[[1.0, 1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0, 1.0, 0.0]],
    shapes=[("axis", i, 1.0) for i in range(DIM)] + [("zero", 0, 0.0), ("neg", 0, 1.0)],
    query=[1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    limit=3,
)
@example(
    # 1/3 + 1/3 + 1/3 summed in float32 and in float64 differ in the last bit
    bases=[[1.0, 1.0, 1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0, 0.0, 0.0]],
    shapes=[("copy", 0, s) for s in (1.0, 2.0, 0.5, 3.0, 7.0)] + [("copy", 1, 1.0), ("zero", 0, 0)],
    query=[1.0, 1.0, 1.0, 1.0, 0.0, 0.0],
    limit=2,
)
@given(
    bases=st.lists(_BASE, min_size=1, max_size=4),
    shapes=st.lists(_SHAPE, min_size=1, max_size=30),
    query=_BASE,
    limit=st.integers(1, 8),
)
async def test_scores_and_order_equal_memorys_bit_for_bit(
    store: PostgresMemoryStore,
    bases: list[list[float]],
    shapes: list[tuple[str, int, float]],
    query: list[float],
    limit: int,
) -> None:
    owner = "o-" + uuid.uuid4().hex[:8]
    records = [
        _rec(owner, f"r{i:02d}", _vector(bases, shape), kind="z" if i % 3 else "fact", i=i)
        for i, shape in enumerate(shapes)
    ]
    oracle = InMemoryMemoryStore(SPACE)
    await oracle.add(records)
    await store.add(records)
    q = np.asarray(query, dtype=np.float32)
    for lim, kwargs in ((limit, {}), (len(records), {}), (limit, {"kinds": ["z"]})):
        for min_score in (None, 0.0):
            got = await store.search(owner, q, limit=lim, min_score=min_score, **kwargs)
            want = await oracle.search(owner, q, limit=lim, min_score=min_score, **kwargs)
            assert [(h.record.id, h.score) for h in got] == [
                (h.record.id, h.score) for h in want
            ], (lim, min_score, kwargs)
    await store.delete_scope(owner)


async def test_a_third_summed_three_times_ranks_as_everywhere(store: PostgresMemoryStore) -> None:
    """Scores that tie in exact arithmetic and round apart in float32 (a scaled
    copy of the query against another row at the same angle) take memory://'s
    rounding, and with it its order at the cut."""
    owner = "o-" + uuid.uuid4().hex[:8]
    records = [
        _rec(owner, "a", [1, 1, 1, 0, 0, 0]),
        _rec(owner, "b", [7, 7, 7, 0, 0, 0]),
        _rec(owner, "c", [0, 1, 1, 1, 0, 0]),
        _rec(owner, "d", [0.001, 0.001, 0.001, 0, 0, 0]),
    ]
    oracle = InMemoryMemoryStore(SPACE)
    await oracle.add(records)
    await store.add(records)
    q = np.asarray([1, 1, 1, 1, 0, 0], dtype=np.float32)
    for limit in (1, 2, 3, 4):
        got = await store.search(owner, q, limit=limit)
        want = await oracle.search(owner, q, limit=limit)
        assert [(h.record.id, h.score) for h in got] == [(h.record.id, h.score) for h in want]


async def test_zero_vectors_outrank_negative_scores_through_the_index(
    store: PostgresMemoryStore,
) -> None:
    """A zero vector scores 0: above every record scoring below 0, through the
    HNSW index too (which does not hold zero vectors), with filters, and not
    after the record is given a vector."""
    owner = "o-" + uuid.uuid4().hex[:8]
    rng = np.random.default_rng(5)
    away = -np.eye(DIM, dtype=np.float32)[0] + 0.05 * rng.standard_normal((150, DIM)).astype(
        np.float32
    )
    records = [_rec(owner, f"r{i:03d}", away[i], i=i) for i in range(150)]
    records += [_rec(owner, "zero", np.zeros(DIM), kind="z"), _rec(owner, "zz", np.zeros(DIM))]
    oracle = InMemoryMemoryStore(SPACE)
    await oracle.add(records)
    await store.add(records)
    q = np.eye(DIM, dtype=np.float32)[0]
    for limit, kwargs in ((1, {}), (3, {}), (2, {"kinds": ["z"]}), (2, {"kinds": ["fact"]})):
        got = await store.search(owner, q, limit=limit, **kwargs)
        want = await oracle.search(owner, q, limit=limit, **kwargs)
        assert [(h.record.id, h.score) for h in got] == [(h.record.id, h.score) for h in want]
    got = await store.search(owner, q, limit=3, min_score=0.0)
    assert [(h.record.id, h.score) for h in got] == [("zero", 0.0), ("zz", 0.0)]
    await store.update(_rec(owner, "zero", -np.eye(DIM)[0], kind="z"))
    got = await store.search(owner, q, limit=1)
    assert [(h.record.id, h.score) for h in got] == [("zz", 0.0)]


async def test_existing_space_tables_get_the_zero_vector_index(postgres_url: str) -> None:
    """A deployment at schema version 4 (space tables without the partial index
    of zero vectors) upgrades to 5 with the index on every space table, and a
    search past the threshold finds its zero vectors through it (EXPLAIN)."""
    schema = "a2m" + uuid.uuid4().hex[:10]
    db = PostgresDatabase(postgres_url, schema=schema, min_size=1, max_size=2)
    await db.open()
    store = PostgresMemoryStore(db, SPACE, index=IndexOptions(exact_threshold=0))
    rng = np.random.default_rng(1)
    records = [_rec("o", f"r{i:04d}", rng.standard_normal(DIM), i=i) for i in range(3000)]
    await store.add([*records, _rec("o", "zero", np.zeros(DIM), kind="z")])
    table = await store._tbl()
    zero_index = f"mem_{SPACE.identity}_zero"[:63]
    async with db.connection() as conn:
        # Back to version 4: the index and the version row gone.
        await conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, zero_index)))
        await conn.execute(
            sql.SQL("DELETE FROM {} WHERE version = 5").format(
                sql.Identifier(schema, "schema_version")
            )
        )
    await store.close()
    await db.close()
    db = PostgresDatabase(postgres_url, schema=schema, min_size=1, max_size=2)
    await db.open()
    try:
        assert await db.schema_version() == 5
        store = PostgresMemoryStore(db, SPACE, index=IndexOptions(exact_threshold=0))
        q = np.eye(DIM, dtype=np.float32)[0]
        got = await store.search("o", q, limit=1, kinds=["z"])
        assert [(h.record.id, h.score) for h in got] == [("zero", 0.0)]
        async with db.connection() as conn:
            await conn.execute(sql.SQL("ANALYZE {}").format(table))
            cur = await conn.execute(
                sql.SQL("EXPLAIN ") + store.search_statement(table, None, None),
                store.search_params("o", q, 5, None, None),
                binary=True,
            )
            plan = "\n".join(str(r[0]) for r in await cur.fetchall())
        assert f"Index Scan using {zero_index}" in plan, plan
        # not a scan of the scope's rows checking each one's norm
        assert "Filter: (vector_norm(embedding) = " not in plan, plan
    finally:
        async with db.connection() as conn:
            await conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
        await db.close()
