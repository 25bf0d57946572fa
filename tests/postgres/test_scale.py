"""Filtered vector search stays correct at scale.

20,000 records: one owner holds 20, another 2,000, the rest belong to 40 other
owners. A filtered search with limit 10 must return 10 records for each of the
two owners, and recall@10 against exact brute force must be at least 0.95 --
whether the statement ranks the owner's rows exactly (small scopes) or walks the
HNSW index with iterative scans (large scopes, or `exact_threshold=0`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt
import pytest
from psycopg import sql

from agent_memory.adapters.postgres import PostgresDatabase, PostgresMemoryStore
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from postgres.conftest import OpenDatabase

DIM = 32
SPACE = EmbeddingSpace(model="scale-test", dimension=DIM)
SIZES = {"small": 20, "big": 2000} | {f"noise-{i}": 449 for i in range(40)}
TOTAL = sum(SIZES.values())  # 20,000 minus 40


def _records(rng: np.random.Generator) -> tuple[list[MemoryRecord], dict[str, tuple]]:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    records: list[MemoryRecord] = []
    by_owner: dict[str, tuple[list[str], npt.NDArray[np.float32], list[str]]] = {}
    # Clustered data (as real embeddings are): 50 centres plus noise.
    centres = rng.normal(size=(50, DIM)).astype(np.float32)
    n = 0
    for owner, size in SIZES.items():
        vectors = (centres[rng.integers(0, 50, size)] + 0.6 * rng.normal(size=(size, DIM))).astype(
            np.float32
        )
        ids = [f"{owner}-{i:05d}" for i in range(size)]
        namespaces = [f"ns{i % 4}" for i in range(size)]
        by_owner[owner] = (ids, vectors, namespaces)
        for i in range(size):
            records.append(
                MemoryRecord(
                    id=ids[i],
                    owner=owner,
                    namespace=namespaces[i],
                    kind="fact",
                    content=f"record {n}",
                    vector=vectors[i],
                    created_at=base + timedelta(seconds=n),
                    updated_at=base + timedelta(seconds=n),
                )
            )
            n += 1
    return records, by_owner


def _exact_top(
    vectors: npt.NDArray[np.float32], ids: list[str], query: npt.NDArray[np.float32], k: int
) -> list[str]:
    normed = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    scores = normed @ (query / np.linalg.norm(query))
    order = sorted(range(len(ids)), key=lambda i: (-float(scores[i]), ids[i]))
    return [ids[i] for i in order[:k]]


@pytest.mark.slow
async def test_filtered_search_at_scale(open_database: OpenDatabase) -> None:
    """When this fails, filters were applied after an approximate index cut (fewer
    than 10 hits) or the candidate set is too narrow for recall."""
    rng = np.random.default_rng(7)
    records, by_owner = _records(rng)
    assert len(records) >= 20_000 - 40
    db = await open_database()
    store = PostgresMemoryStore(db, SPACE)
    table = await db.space_table(SPACE, "english")
    # Bulk-load the way one would: drop the HNSW index, COPY, re-create it with the
    # very definition the store made (a bulk build is much faster than 20,000 inserts).
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index"
            " WHERE indrelid = %s::regclass AND pg_get_indexdef(indexrelid) LIKE '%%hnsw%%'",
            (table.as_string(),),
        )
        index_name, index_def = await cur.fetchone() or ("", "")
        assert "vector_cosine_ops" in index_def, index_def
        await conn.execute(sql.SQL("DROP INDEX {}").format(sql.SQL(index_name)))
    for start in range(0, len(records), 5000):
        await store.add(records[start : start + 5000])
    async with db.connection() as conn:
        await conn.execute(sql.SQL(index_def))  # type: ignore[arg-type]
        await conn.execute(sql.SQL("ANALYZE {}").format(table))
    # A handle that always takes the approximate branch, on connections whose
    # planner may not fall back to a bitmap scan plus sort: the HNSW index with
    # iterative scans must then deliver the filtered rows by itself.
    hnsw_db = PostgresDatabase(
        db.url,
        schema=db.schema,
        settings={"enable_bitmapscan": "off", "enable_sort": "off", "enable_seqscan": "off"},
    )
    forced_hnsw = PostgresMemoryStore(hnsw_db, SPACE, exact_threshold=0, owns_database=True)
    queries = rng.normal(size=(20, DIM)).astype(np.float32)

    report = {}
    for label, handle, owner, namespace in [
        ("small/auto", store, "small", None),
        ("big/auto", store, "big", None),
        ("big/ns/auto", store, "big", "ns1"),
        ("big/hnsw", forced_hnsw, "big", None),
        ("big/ns/hnsw", forced_hnsw, "big", "ns2"),
    ]:
        ids, vectors, namespaces = by_owner[owner]
        if namespace is not None:
            keep = [i for i, ns in enumerate(namespaces) if ns == namespace]
            ids = [ids[i] for i in keep]
            vectors = vectors[keep]
        recalls = []
        for q in queries:
            hits = await handle.search(owner, q, limit=10, namespace=namespace)
            got = [h.record.id for h in hits]
            assert len(got) == 10, f"{label}: expected 10 hits, got {len(got)}"
            assert all(h.record.owner == owner for h in hits), f"{label}: another owner leaked"
            if namespace is not None:
                assert all(h.record.namespace == namespace for h in hits), label
            truth = _exact_top(vectors, ids, q, 10)
            recalls.append(len(set(got) & set(truth)) / 10)
        report[label] = float(np.mean(recalls))
    print(f"recall@10 by path: {report}")
    assert all(r >= 0.95 for r in report.values()), f"recall@10 below 0.95: {report}"
    # The exact path is exact.
    assert report["small/auto"] == 1.0, report

    # The forced path really walks the HNSW index (not a sequential scan).
    async with hnsw_db.connection() as conn:
        cur = await conn.execute(
            sql.SQL("EXPLAIN ") + forced_hnsw.search_statement(table, None, None),
            forced_hnsw.search_params("big", queries[0], 10, None, None),
        )
        plan = "\n".join(str(r[0]) for r in await cur.fetchall())
    assert "hnsw" in plan.lower(), plan
    # Iterative scans are on: through the index alone, an owner holding 0.1% of the
    # rows still gets the full limit (one ef_search list would hold none of them).
    async with hnsw_db.connection() as conn:
        cur = await conn.execute("SELECT current_setting('hnsw.iterative_scan')")
        assert await cur.fetchone() == ("relaxed_order",)
    hits = await forced_hnsw.search("small", queries[0], limit=10)
    assert len(hits) == 10
    assert {h.record.id for h in hits} == set(
        _exact_top(by_owner["small"][1], by_owner["small"][0], queries[0], 10)
    )
    await forced_hnsw.close()
    async with db.connection() as conn:  # cheaper than the fixture's row-by-row DELETE
        await conn.execute(sql.SQL("TRUNCATE {}").format(table))
