"""Overhead of `QdrantMemoryStore` over the bare qdrant-client calls it makes.

On the same 10,000 records (10 owners, one collection) it times:

- batch add: `store.add(batch)` (validation, duplicate check by point id,
  payload codec, upsert) against `client.upsert(collection, Batch(...))` on
  ids, vector matrix and payloads prepared beforehand (the baseline does no
  conversion work);
- search: `store.search(owner, q, limit=10)` (owner filter, a few extra
  candidates to settle ties, exact cosine re-ranking, record decoding) against
  `client.query_points(collection, query=q, query_filter=owner, limit=10,
  with_payload=True)`.

Runs alternate between ours and the baseline, each on a fresh collection for
adds, and the ratio of medians is printed (target: at most 1.15x).

    python benchmarks/qdrant_overhead.py                  # local mode (:memory:)
    python benchmarks/qdrant_overhead.py --url http://localhost:6333
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm

from agent_memory.adapters.qdrant import QdrantMemoryStore
from agent_memory.adapters.qdrant._codec import point_id, record_to_payload
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord


def _records(n: int, dim: int, owners: int, seed: int) -> list[MemoryRecord]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        MemoryRecord(
            id=f"rec-{i:06d}",
            owner=f"owner-{i % owners}",
            namespace="notes",
            kind="fact",
            content=f"memory number {i} about topic {i % 97}",
            vector=vectors[i],
            created_at=t0 + timedelta(seconds=i),
            updated_at=t0 + timedelta(seconds=i),
            attributes={"turn": i},
        )
        for i in range(n)
    ]


def _client(url: str | None) -> AsyncQdrantClient:
    if url:
        return AsyncQdrantClient(url=url, check_compatibility=False)
    return AsyncQdrantClient(location=":memory:")


async def _bench_add(
    url: str | None, records: list[MemoryRecord], space: EmbeddingSpace, batch: int, rounds: int
) -> tuple[float, float]:
    batches = [records[i : i + batch] for i in range(0, len(records), batch)]
    # The baseline's data is ready to send: point ids, a vector matrix and payload
    # dicts per batch; only building the client's Batch and the call are timed.
    prebuilt = [
        (
            [point_id(r.owner, r.id) for r in chunk],
            np.stack([r.vector for r in chunk]),
            [record_to_payload(r) for r in chunk],
        )
        for chunk in batches
    ]
    ours: list[float] = []
    base: list[float] = []
    for _ in range(rounds):
        # ours: a fresh store (collection prepared before timing)
        client = _client(url)
        store = QdrantMemoryStore(client, space, collection_prefix=f"b{uuid.uuid4().hex[:8]}_")
        await store.ping()
        await store.list("warm-up")  # creates the collection and its indexes
        t = time.perf_counter()
        for chunk in batches:
            await store.add(chunk)
        ours.append(time.perf_counter() - t)
        await client.delete_collection(store.collection_name)
        # baseline: the same collection layout, bare upserts of prebuilt points
        store2 = QdrantMemoryStore(client, space, collection_prefix=f"b{uuid.uuid4().hex[:8]}_")
        await store2.list("warm-up")
        name = store2.collection_name
        t = time.perf_counter()
        for ids, matrix, payloads in prebuilt:
            points = qm.Batch(ids=ids, vectors=matrix, payloads=payloads)
            await client.upsert(name, points=points, wait=True)
        base.append(time.perf_counter() - t)
        await client.delete_collection(name)
        await client.close()
    return statistics.median(ours), statistics.median(base)


async def _bench_search(
    url: str | None,
    records: list[MemoryRecord],
    space: EmbeddingSpace,
    owners: int,
    queries: int,
) -> tuple[float, float]:
    client = _client(url)
    store = QdrantMemoryStore(client, space, collection_prefix=f"b{uuid.uuid4().hex[:8]}_")
    for i in range(0, len(records), 1000):
        await store.add(records[i : i + 1000])
    name = store.collection_name
    rng = np.random.default_rng(7)
    qs = rng.standard_normal((queries, space.dimension)).astype(np.float32)
    ours: list[float] = []
    base: list[float] = []
    for k, q in enumerate(qs):
        owner = f"owner-{k % owners}"
        flt = qm.Filter(must=[qm.FieldCondition(key="owner", match=qm.MatchValue(value=owner))])
        t = time.perf_counter()
        hits = await store.search(owner, q, limit=10)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        raw = await client.query_points(
            name, query=q.tolist(), query_filter=flt, limit=10, with_payload=True
        )
        base.append(time.perf_counter() - t)
        assert [h.record.id for h in hits][:5] == [(p.payload or {})["id"] for p in raw.points][
            :5
        ], "ours and the bare call disagree on the top results"
    await client.delete_collection(name)
    await client.close()
    return statistics.median(ours), statistics.median(base)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("QDRANT_URL"), help="Qdrant server")
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--owners", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=30)
    args = parser.parse_args()
    space = EmbeddingSpace("bench", args.dim)
    records = _records(args.records, args.dim, args.owners, seed=1)
    where = args.url or "local mode (:memory:)"
    print(f"qdrant overhead on {where}: {args.records} records, dim {args.dim}")
    ours, base = await _bench_add(args.url, records, space, args.batch, args.rounds)
    print(
        f"batch add ({args.batch}/batch): ours {ours:.3f}s  bare upsert {base:.3f}s  "
        f"ratio {ours / base:.3f}x"
    )
    ours, base = await _bench_search(args.url, records, space, args.owners, args.queries)
    print(
        f"search (limit 10, owner filter): ours {ours * 1000:.2f}ms  "
        f"bare query_points {base * 1000:.2f}ms  ratio {ours / base:.3f}x"
    )


if __name__ == "__main__":
    asyncio.run(main())
