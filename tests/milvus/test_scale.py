"""Filtered search stays correct at scale: 6,000 records in one collection, one
owner with 20, another with 2,000, the rest spread over 40 owners. For each
owner the top 10 agree with the in-memory oracle (the memory adapter fed the
same records): recall@10 is 1.0 with the exact FLAT index, scores equal."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import numpy as np
import pytest

from agent_memory.adapters.memory.store import InMemoryMemoryStore
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from milvus.support import OpenStore

TOTAL = 6_000
SMALL, LARGE = 20, 2_000
DIM = 32
QUERIES = 5


@pytest.mark.slow
async def test_filtered_search_matches_the_oracle_at_scale(open_store: OpenStore) -> None:
    space = EmbeddingSpace("scale-test", DIM)
    store = await open_store(space)
    oracle = InMemoryMemoryStore(space)
    rng = np.random.default_rng(10_000)
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
    started = time.perf_counter()
    for start in range(0, TOTAL, 2_000):
        await store.add(records[start : start + 2_000])
    add_seconds = time.perf_counter() - started
    await oracle.add(records)

    recalls: list[float] = []
    for owner in ("small", "large"):
        for _ in range(QUERIES):
            query = rng.standard_normal(DIM).astype(np.float32)
            hits = await store.search(owner, query, limit=10)
            want = await oracle.search(owner, query, limit=10)
            assert len(hits) == 10, f"{owner}: limit 10 returned {len(hits)}"
            assert {h.record.owner for h in hits} == {owner}
            truth = {h.record.id for h in want}
            recalls.append(len(truth & {h.record.id for h in hits}) / 10)
            assert [h.record.id for h in hits] == [h.record.id for h in want]
            assert np.allclose([h.score for h in hits], [h.score for h in want], atol=1e-6)
    assert min(recalls) == 1.0, recalls
    print(f"milvus lite: {TOTAL} adds in {add_seconds:.1f} s")
