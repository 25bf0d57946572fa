"""Overhead of `QdrantMemoryStore` over the bare qdrant-client calls it makes.

On the same 10,000 records (10 owners, one collection) it times:

- batch add: `store.add(batch)` (validation, duplicate check by point id,
  payload codec, upsert) against `client.upsert(collection, Batch(...))`, in
  two baselines: on ids, vector matrix and payloads prepared before the clock
  starts (no conversion work at all: the strict ratio), and converting the
  records to the same points inside the timed loop (what calling qdrant-client
  by hand costs: the ratio is then the adapter's own overhead, i.e. validation
  and the duplicate check);
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
from typing import cast

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


async def _fresh_collection(client: AsyncQdrantClient, space: EmbeddingSpace) -> str:
    """A new, empty collection with the store's layout (created outside the timing)."""
    store = QdrantMemoryStore(client, space, collection_prefix=f"b{uuid.uuid4().hex[:8]}_")
    await store.list("warm-up")  # creates the collection and its payload indexes
    return store.collection_name


async def _bench_add(
    url: str | None, records: list[MemoryRecord], space: EmbeddingSpace, batch: int, rounds: int
) -> tuple[float, float, float]:
    """Medians of: ours, bare upsert of prepared data, bare upsert converting records."""
    batches = [records[i : i + batch] for i in range(0, len(records), batch)]
    prepared = [
        (
            [cast(qm.ExtendedPointId, point_id(r.owner, r.id)) for r in chunk],
            np.stack([r.vector for r in chunk]).tolist(),
            [record_to_payload(r) for r in chunk],
        )
        for chunk in batches
    ]
    ours: list[float] = []
    bare: list[float] = []
    by_hand: list[float] = []
    for _ in range(rounds):
        client = _client(url)
        # ours: validation, duplicate check, codec, upsert
        name = await _fresh_collection(client, space)
        store = QdrantMemoryStore(client, space, collection_prefix=name[: name.index("_") + 1])
        t = time.perf_counter()
        for chunk in batches:
            await store.add(chunk)
        ours.append(time.perf_counter() - t)
        await client.delete_collection(name)
        # bare: ids, vector matrix and payloads ready; only Batch + upsert timed
        name = await _fresh_collection(client, space)
        t = time.perf_counter()
        for ids, vectors, payloads in prepared:
            points = qm.Batch(ids=ids, vectors=vectors, payloads=payloads)
            await client.upsert(name, points=points, wait=True)
        bare.append(time.perf_counter() - t)
        await client.delete_collection(name)
        # by hand: the same upserts, converting the records to the same points
        name = await _fresh_collection(client, space)
        t = time.perf_counter()
        for chunk in batches:
            points = qm.Batch(
                ids=[cast(qm.ExtendedPointId, point_id(r.owner, r.id)) for r in chunk],
                vectors=np.stack([r.vector for r in chunk]).tolist(),
                payloads=[record_to_payload(r) for r in chunk],
            )
            await client.upsert(name, points=points, wait=True)
        by_hand.append(time.perf_counter() - t)
        await client.delete_collection(name)
        await client.close()
    return statistics.median(ours), statistics.median(bare), statistics.median(by_hand)


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
    ours, bare, by_hand = await _bench_add(args.url, records, space, args.batch, args.rounds)
    print(
        f"batch add ({args.batch}/batch): ours {ours:.3f}s  "
        f"bare upsert of prepared points {bare:.3f}s (ratio {ours / bare:.3f}x)  "
        f"upsert converting records {by_hand:.3f}s (ratio {ours / by_hand:.3f}x)"
    )
    ours, base = await _bench_search(args.url, records, space, args.owners, args.queries)
    print(
        f"search (limit 10, owner filter): ours {ours * 1000:.2f}ms  "
        f"bare query_points {base * 1000:.2f}ms  ratio {ours / base:.3f}x"
    )


if __name__ == "__main__":
    asyncio.run(main())
