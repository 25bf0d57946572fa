"""Filtered search stays correct at scale: 20,000 records in one collection, one
owner with 20, another with 2,000. A search with limit 10 returns 10 records
for each, and recall@10 against exact brute force (numpy) is at least 0.95."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from qdrant.support import OpenStore

TOTAL = 20_000
SMALL, LARGE = 20, 2_000
DIM = 32
# Local mode evaluates the filter in Python on every point (~1 s a query on
# 20,000 points), and searches exactly, so a few queries suffice there.
QUERIES = {"local": 3, "server": 10}


@pytest.mark.slow
async def test_filtered_search_at_scale(open_store: OpenStore, target: str) -> None:
    store = await open_store(EmbeddingSpace("scale-test", DIM))
    rng = np.random.default_rng(20_000)
    owners = ["small"] * SMALL + ["large"] * LARGE
    owners += [f"crowd-{i % 40}" for i in range(TOTAL - len(owners))]
    order = rng.permutation(TOTAL)  # owners interleaved across the collection
    vectors = rng.standard_normal((TOTAL, DIM)).astype(np.float32)
    when = datetime(2026, 1, 1, tzinfo=UTC)
    records = [
        MemoryRecord(
            id=f"r{i:05d}",
            owner=owners[i],
            namespace="ns",
            kind="fact",
            content="",
            vector=vectors[i],
            created_at=when,
            updated_at=when,
        )
        for i in order.tolist()
    ]
    for start in range(0, TOTAL, 4_000):
        await store.add(records[start : start + 4_000])

    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    owner_of = np.array(owners)
    recalls: list[float] = []
    for owner in ("small", "large"):
        rows = np.flatnonzero(owner_of == owner)
        for _ in range(QUERIES[target]):
            query = rng.standard_normal(DIM).astype(np.float32)
            hits = await store.search(owner, query, limit=10)
            assert len(hits) == 10, f"{owner}: limit 10 returned {len(hits)}"
            assert {h.record.owner for h in hits} == {owner}
            exact = rows[np.argsort(-(unit[rows] @ (query / np.linalg.norm(query))))[:10]]
            truth = {f"r{i:05d}" for i in exact.tolist()}
            recalls.append(len(truth & {h.record.id for h in hits}) / 10)
    assert min(recalls) >= 0.8, recalls
    assert float(np.mean(recalls)) >= 0.95, recalls
