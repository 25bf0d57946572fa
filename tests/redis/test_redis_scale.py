"""Filtered vector search stays correct at scale (20,000 records, one index)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
from redis_helpers import SPACE

from agent_memory.adapters.redis import RedisMemoryStore
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

DIM = 32
SCALE_SPACE = EmbeddingSpace(model="scale-model", dimension=DIM)


async def test_selective_owner_filter_recall(redis_url: str, deployment: str) -> None:
    rng = np.random.default_rng(7)
    owners = ["small"] * 20 + ["big"] * 2_000 + [f"o{i % 40}" for i in range(17_980)]
    vectors = rng.standard_normal((len(owners), DIM)).astype(np.float32)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    records = [
        MemoryRecord(
            id=f"r{i}",
            owner=o,
            namespace="n",
            kind="k",
            content="",
            vector=vectors[i],
            created_at=at,
            updated_at=at,
        )
        for i, o in enumerate(owners)
    ]
    # A cheaper HNSW build keeps the test fast; selective owner filters are answered
    # inside the query (the engine brute-forces small filtered sets), which is what
    # this test checks, so the build quality does not help it pass.
    store = RedisMemoryStore.from_url(
        redis_url, SCALE_SPACE, deployment=deployment, hnsw_ef_construction=64
    )
    try:
        await store.add(records)  # one script call: one round trip
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        owner_of = np.array(owners)
        for owner in ("small", "big"):
            rows = np.flatnonzero(owner_of == owner)
            recalls = []
            for _ in range(20):
                q = rng.standard_normal(DIM).astype(np.float32)
                hits = await store.search(owner, q, limit=10)
                assert len(hits) == 10, (owner, len(hits))
                assert all(h.record.owner == owner for h in hits)
                scores = unit[rows] @ (q / np.linalg.norm(q))
                truth = {f"r{rows[j]}" for j in np.argsort(-scores)[:10]}
                recalls.append(len(truth & {h.record.id for h in hits}) / 10)
                got = [h.score for h in hits]
                assert got == sorted(got, reverse=True)
                best = float(scores.max())
                assert abs(got[0] - best) < 1e-4 or recalls[-1] < 1.0
            assert float(np.mean(recalls)) >= 0.95, (owner, recalls)
    finally:
        await store.drop_index()
        await store.close()


def test_scale_space_differs_from_default() -> None:
    assert SCALE_SPACE.identity != SPACE.identity
