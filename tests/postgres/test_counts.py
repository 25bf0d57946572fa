"""The per-owner record counts a search decides its path from, and the HNSW path
itself.

- The counts table (`<table>_counts`, kept by statement-level triggers in the
  writing transaction) equals `count(*)` of the records table after any
  interleaving of concurrent `add`, `delete`, `delete_scope` and `update` calls
  (hypothesis), after a reopen, and after `TRUNCATE`.
- Migration 3 counts the rows an existing deployment already holds.
- With `exact_threshold=0` and an `ef_search` at least the owner's size (the
  graph search is then exhaustive), the HNSW path returns the exact top-k.
- After `bulk_add` the planner uses the fresh HNSW index (statistics are
  gathered with the build).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from agent_memory.adapters.memory.store import InMemoryMemoryStore
from agent_memory.adapters.postgres import PostgresDatabase, PostgresMemoryStore
from agent_memory.adapters.postgres._database import _space_ddl
from agent_memory.adapters.postgres._migrations import MIGRATIONS, SCHEMA_VERSION
from agent_memory.domain.errors import DuplicateRecord, NotFound
from agent_memory.domain.ranking import top_k
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from agent_memory.domain.vector_index import exact_cosines
from postgres.conftest import OpenDatabase

DIM = 8
SPACE = EmbeddingSpace(model="counts-test", dimension=DIM)
AT = datetime(2026, 1, 1, tzinfo=UTC)
OWNERS = ("a", "b", "c")
NAMESPACES = ("n1", "n2")


def _record(owner: str, i: int, namespace: str, kind: str = "fact") -> MemoryRecord:
    v = np.random.default_rng(i).standard_normal(DIM).astype(np.float32)
    return MemoryRecord(
        owner=owner,
        id=f"r{i:04d}",
        namespace=namespace,
        kind=kind,
        content=f"record {i}",
        vector=v,
        created_at=AT,
        updated_at=AT,
    )


async def _counts_and_truth(
    db: PostgresDatabase,
) -> tuple[dict[tuple[str, str, str], int], dict[tuple[str, str, str], int]]:
    table = await db.space_table(SPACE, "english")
    async with db.connection() as conn:
        cur = await conn.execute(
            sql.SQL("SELECT owner, namespace, kind, n FROM {}").format(db.counts_table(SPACE))
        )
        counts = {(o, ns, k): int(n) for o, ns, k, n in await cur.fetchall()}
        cur = await conn.execute(
            sql.SQL(
                "SELECT owner, namespace, kind, count(*) FROM {} GROUP BY owner, namespace, kind"
            ).format(table)
        )
        truth = {(o, ns, k): int(n) for o, ns, k, n in await cur.fetchall()}
    return counts, truth


# One operation: (what, owner, record number, namespace).
_op = st.tuples(
    st.sampled_from(["add", "delete", "delete_scope", "delete_ns", "update"]),
    st.sampled_from(OWNERS),
    st.integers(0, 11),
    st.sampled_from(NAMESPACES),
)


async def _apply(store: PostgresMemoryStore, op: tuple[str, str, int, str]) -> None:
    what, owner, i, namespace = op
    if what == "add":
        # Two records a call (one COPY), one of them maybe already there.
        batch = [_record(owner, i, namespace), _record(owner, i + 100, namespace, "note")]
        with contextlib.suppress(DuplicateRecord):  # nothing of the batch is written
            await store.add(batch)
    elif what == "delete":
        await store.delete(owner, f"r{i:04d}")
    elif what == "delete_scope":
        await store.delete_scope(owner, kinds=["note"])
    elif what == "delete_ns":
        await store.delete_scope(owner, namespace=namespace)
    else:
        found = await store.get(owner, f"r{i:04d}")
        if found is not None:
            moved = "n2" if found.namespace == "n1" else "n1"
            with contextlib.suppress(NotFound):  # deleted meanwhile
                await store.update(_record(owner, i, moved, "moved"))


class TestCounts:
    @settings(
        max_examples=15,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(rounds=st.lists(st.lists(_op, min_size=1, max_size=6), min_size=1, max_size=5))
    async def test_counts_equal_the_rows_under_concurrent_writes(
        self, open_database: OpenDatabase, rounds: list[list[tuple[str, str, int, str]]]
    ) -> None:
        """When this fails, a write path changed rows without its counter (or two
        concurrent writers lost an update)."""
        db = await open_database()
        store = PostgresMemoryStore(db, SPACE)
        for owner in OWNERS:
            await store.delete_scope(owner)
        for ops in rounds:  # each round's operations run at once, on up to 4 connections
            await asyncio.gather(*(_apply(store, op) for op in ops))
            counts, truth = await _counts_and_truth(db)
            assert counts == truth
        assert all(n > 0 for n in counts.values()), counts  # emptied groups are removed

    async def test_counts_survive_a_reopen_and_follow_truncate(
        self, open_database: OpenDatabase
    ) -> None:
        db = await open_database()
        store = PostgresMemoryStore(db, SPACE)
        await store.add([_record("a", i, NAMESPACES[i % 2]) for i in range(30)])
        await db.close()
        again = await open_database()
        counts, truth = await _counts_and_truth(again)
        assert counts == truth == {("a", "n1", "fact"): 15, ("a", "n2", "fact"): 15}
        table = await again.space_table(SPACE, "english")
        async with again.connection() as conn:
            await conn.execute(sql.SQL("TRUNCATE {}").format(table))
        assert await _counts_and_truth(again) == ({}, {})

    async def test_search_decides_from_the_counts(self, open_database: OpenDatabase) -> None:
        """The statement reads the owner's size from the counts table, not by
        counting its rows: a counter edited by hand moves the owner to the other
        path (seen in the plan as the branch that ran)."""
        db = await open_database()
        store = PostgresMemoryStore(db, SPACE, exact_threshold=50)
        await store.add([_record("a", i, "n1") for i in range(20)])
        table = await db.space_table(SPACE, "english")
        q = np.ones(DIM, dtype=np.float32)

        async def ran_index(conn: psycopg.AsyncConnection[Any]) -> bool:
            """Whether the approximate branch ran (its gate, `n > threshold`, opened)."""
            cur = await conn.execute(
                sql.SQL("EXPLAIN (ANALYZE, COSTS OFF) ")
                + store.search_statement(table, None, None),
                store.search_params("a", q, 5, None, None),
            )
            plan = [str(r[0]) for r in await cur.fetchall()]
            ran = {}
            for i, line in enumerate(plan):
                if "One-Time Filter" in line:
                    child = next(x for x in plan[i + 1 :] if "->  Limit" in x)
                    ran[" > " in line] = "never executed" not in child
            assert set(ran) == {True, False}, plan
            assert ran[True] != ran[False], plan  # exactly one branch runs
            return ran[True]

        async with db.connection() as conn:
            assert not await ran_index(conn)
            await conn.execute(
                sql.SQL("UPDATE {} SET n = 1000 WHERE owner = 'a'").format(db.counts_table(SPACE))
            )
            assert await ran_index(conn)


async def test_migration_counts_existing_rows(postgres_url: str) -> None:
    """A deployment at schema version 2 (records, no counts table) upgrades to 3
    with every existing row counted, and later writes keep the counts."""
    schema = "mig3_" + uuid.uuid4().hex[:10]
    name = f"mem_{SPACE.identity}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        try:
            with conn.transaction():
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE {} (version integer PRIMARY KEY, description text NOT NULL,"
                        " applied_at timestamptz NOT NULL DEFAULT now())"
                    ).format(sql.Identifier(schema, "schema_version"))
                )
                for version, description, build in MIGRATIONS[:3]:
                    for statement in build(schema):
                        conn.execute(statement)
                    conn.execute(
                        sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(
                            sql.Identifier(schema, "schema_version")
                        ),
                        (version, description),
                    )
                # The space table as version 3 made it: the DDL without its last
                # statement (the counts table and triggers of version 4).
                for statement in _space_ddl(schema, name, DIM, "english")[:-1]:
                    conn.execute(statement)
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (identity, model, dimension, revision, table_name)"
                        " VALUES (%s, %s, %s, %s, %s)"
                    ).format(sql.Identifier(schema, "spaces")),
                    (SPACE.identity, SPACE.model, SPACE.dimension, SPACE.revision, name),
                )
            db = PostgresDatabase(postgres_url, schema=schema)
            old = PostgresMemoryStore(db, SPACE)
            # Rows written the old way: no trigger counts them.
            table = sql.Identifier(schema, name)
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (owner, id, namespace, kind, content, context, embedding,"
                    " created_at, updated_at, importance, attributes)"
                    " SELECT 'o' || (g %% 3), 'r' || g, 'ns', 'fact', 'x', '',"
                    " array_fill(1.0, ARRAY[%s])::vector, now(), now(), 0.5, '{{}}'"
                    " FROM generate_series(1, 70) AS g"
                ).format(table),
                (DIM,),
            )
            assert conn.execute(
                "SELECT to_regclass(%s)", (f'"{schema}"."{name}_counts"',)
            ).fetchone() == (None,)
            await db.open()  # migrates to version 4
            assert await db.schema_version() == SCHEMA_VERSION == 5
            await old.add([_record("o0", 999, "ns")])
            counts, truth = await _counts_and_truth(db)
            assert counts == truth
            assert counts[("o0", "ns", "fact")] == 24  # 23 old rows + 1 new
            assert sum(counts.values()) == 71
            await db.close()
        finally:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.parametrize("dim", [8, 32])
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(n=st.integers(11, 120), seed=st.integers(0, 2**16), clustered=st.booleans())
async def test_hnsw_path_is_exact_when_the_search_is_exhaustive(
    open_database: OpenDatabase, dim: int, n: int, seed: int, clustered: bool
) -> None:
    """exact_threshold=0 (always the index) and ef_search >= the owner's size: the
    graph search visits every row, so the answer is the oracle's top-k exactly,
    also with another owner's rows in the same index."""
    space = EmbeddingSpace(model=f"exhaustive-{dim}", dimension=dim)
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((4, dim)) if clustered else np.zeros((1, dim))
    vectors = (base[rng.integers(0, len(base), n)] + rng.standard_normal((n, dim))).astype(
        np.float32
    )
    db = await open_database()
    # Sessions whose planner may not swap the index for a scan plus sort (it
    # would at this size): the HNSW index must deliver the rows itself.
    hnsw_db = PostgresDatabase(
        db.url,
        schema=db.schema,
        ef_search=1000,
        settings={"enable_seqscan": "off", "enable_sort": "off", "enable_bitmapscan": "off"},
    )
    store = PostgresMemoryStore(hnsw_db, space, exact_threshold=0, owns_database=True)
    oracle = InMemoryMemoryStore(space)
    records = [
        MemoryRecord(
            owner=owner,
            id=f"r{i:04d}",
            namespace="ns",
            kind="fact",
            content="x",
            vector=v,
            created_at=AT,
            updated_at=AT,
        )
        for owner in ("mine", "other")
        for i, v in enumerate(vectors)
    ]
    try:
        await store.delete_scope("mine")
        await store.delete_scope("other")
        await store.bulk_add([records])
        await oracle.add(records)
        table = await hnsw_db.space_table(space, "english")
        for q in rng.standard_normal((5, dim)).astype(np.float32):
            got = await store.search("mine", q, limit=10)
            want = await oracle.search("mine", q, limit=10)
            assert [h.record.id for h in got] == [h.record.id for h in want]
            assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-6)
        async with hnsw_db.connection() as conn:
            cur = await conn.execute(
                sql.SQL("EXPLAIN (COSTS OFF) ") + store.search_statement(table, None, None),
                store.search_params("mine", q, 10, None, None),
            )
            plan = "\n".join(str(r[0]) for r in await cur.fetchall())
        assert "Index Scan using mem_exhaustive" in plan, plan
        assert "_hnsw" in plan, plan
    finally:
        await store.close()


async def test_bulk_add_leaves_statistics_for_the_index(open_database: OpenDatabase) -> None:
    """Right after `bulk_add` into a fresh table the planner has the table's
    statistics (the build runs ANALYZE): without them it plans from a guess and
    may skip the fresh HNSW index (`tests/postgres/test_scale.py` and the
    exhaustive test above check that the index answers)."""
    space = EmbeddingSpace(model=f"analyze-{uuid.uuid4().hex[:6]}", dimension=DIM)
    db = await open_database()
    store = PostgresMemoryStore(db, space, exact_threshold=0)
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((3000, DIM)).astype(np.float32)
    records = [
        MemoryRecord(
            owner="o",
            id=f"r{i:05d}",
            namespace="ns",
            kind="fact",
            content="x",
            vector=v,
            created_at=AT,
            updated_at=AT,
        )
        for i, v in enumerate(vectors)
    ]
    await store.bulk_add([records[:1500], records[1500:]])
    table = await db.space_table(space, "english")
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT c.reltuples, s.last_analyze IS NOT NULL"
            " FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid"
            " WHERE c.oid = %s::regclass",
            (table.as_string(conn),),
        )
        stats = await cur.fetchone()
    # The planner's row estimate is the table's (a fresh table reads -1: never
    # analyzed, and the planner then guesses from its size on disk).
    assert stats == (3000.0, True), stats
    hits = await store.search("o", vectors[7], limit=1)
    assert hits[0].record.id == "r00007"
    async with db.connection() as conn:
        await conn.execute(sql.SQL("DROP TABLE {} CASCADE").format(table))
        await conn.execute(
            sql.SQL("DROP TABLE {}").format(db.counts_table(space)),
        )
        await conn.execute(
            sql.SQL("DELETE FROM {} WHERE identity = %s").format(db.table("spaces")),
            (space.identity,),
        )


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**16), copies=st.integers(12, 60), limit=st.integers(1, 10))
async def test_near_ties_beyond_the_fetched_rows_are_found(
    open_database: OpenDatabase, seed: int, copies: int, limit: int
) -> None:
    """Scaled copies of one vector tie in exact arithmetic, but pgvector's and
    the exact cosines (`exact_cosines`) break the tie differently in the last
    bits: the search must fetch past `limit + 1` rows until no row left out can
    enter the top `limit` (by exact score, then id) of the owner's rows."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(DIM).astype(np.float32)
    scales = rng.uniform(0.01, 100.0, copies).astype(np.float32)
    others = rng.standard_normal((20, DIM)).astype(np.float32)
    vectors = [base * s for s in scales] + list(others)
    order = rng.permutation(len(vectors))
    records = [
        MemoryRecord(
            owner="ties",
            id=f"t{int(j):03d}",
            namespace="ns",
            kind="fact",
            content="x",
            vector=vectors[i],
            created_at=AT,
            updated_at=AT,
        )
        for j, i in enumerate(order)
    ]
    db = await open_database()
    store = PostgresMemoryStore(db, SPACE)
    await store.delete_scope("ties")
    await store.add(records)
    # The answer over every row, with the very scoring `search` uses
    # (`exact_cosines`, the in-process stores' arithmetic).
    ids = [r.id for r in records]
    matrix = np.array([r.vector for r in records])
    for q in (base, base + 0.01 * rng.standard_normal(DIM).astype(np.float32)):
        got = await store.search("ties", q, limit=limit)
        want = top_k(exact_cosines(matrix, q), ids, limit)
        assert [h.record.id for h in got] == [ids[i] for i, _ in want]
    await store.delete_scope("ties")
