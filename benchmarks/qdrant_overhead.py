"""Overhead of `QdrantMemoryStore` over the bare qdrant-client calls it makes.

On the same 10,000 records (10 owners, one collection) it times:

- batch add: `store.add(batch)` (validation, duplicate check by point id,
  payload codec, upsert) against `client.upsert(collection, Batch(...))`, in
  two baselines: on point ids, the numpy vector matrix and payload dicts
  prepared before the clock starts (no conversion of records at all: the
  strict ratio; qdrant-client converts the matrix itself), and converting the
  records to the same points inside the timed loop (what calling qdrant-client
  by hand costs: the ratio is then the adapter's own overhead, i.e. validation
  and the duplicate check);
- search: `store.search(owner, q, limit=10)` (owner filter, a few extra
  candidates to settle ties, exact cosine re-ranking, record decoding) against
  `client.query_points(collection, query=q, query_filter=owner, limit=10,
  with_payload=True)`.

Ours and the baselines alternate call by call (adds go to three fresh
collections), and the ratio of medians over rounds is printed (target: at
most 1.15x). Local mode runs in this process and is timed in CPU time (steady
on a shared machine); with `--url` the wall clock is used. Before every timed
call, outside the clock, the garbage collector runs a full collection: a
full collection costs time in proportion to everything alive in the process
(here mostly local mode's own copy of the collections), and without this it
lands on whichever call happens to cross the threshold, which moved a
contender's total by up to 40% between rounds. Each call still pays for the
young-generation collections its own allocations cause. `--no-collect` leaves
the collector alone (noisier; the same medians within the noise).

    python benchmarks/qdrant_overhead.py                  # local mode (:memory:)
    python benchmarks/qdrant_overhead.py --url http://localhost:6333
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm

from agent_memory.adapters.qdrant import QdrantMemoryStore
from agent_memory.adapters.qdrant._codec import batch_payloads, point_ids
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord, ScoredRecord


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


# Whether a full garbage collection runs (untimed) before every timed call.
_settle_gc = True


def _settle() -> None:
    if _settle_gc:
        gc.collect()


# Local mode runs entirely in this process, so CPU time measures it without the
# noise of other processes on a shared machine; a server does its share of the
# work elsewhere, so it is timed by the wall clock.
_CLOCK = {"cpu": time.process_time, "wall": time.perf_counter}
_now = time.process_time


def _set_clock(name: str) -> None:
    global _now
    _now = _CLOCK[name]


# Point ids, the vector matrix as embedders return it, and payload dicts.
_Prepared = tuple[list[qm.ExtendedPointId], npt.NDArray[np.float32], list[dict[str, Any]]]


def _client(url: str | None) -> AsyncQdrantClient:
    if url:
        return AsyncQdrantClient(url=url, check_compatibility=False)
    return AsyncQdrantClient(location=":memory:")


async def _fresh_collection(client: AsyncQdrantClient, space: EmbeddingSpace) -> str:
    """A new, empty collection with the store's layout (created outside the timing)."""
    store = QdrantMemoryStore(client, space, collection_prefix=f"b{uuid.uuid4().hex[:8]}_")
    await store.list("warm-up")  # creates the collection and its payload indexes
    return store.collection_name


async def _add_round(
    url: str | None,
    space: EmbeddingSpace,
    batches: list[list[MemoryRecord]],
    prepared: list[_Prepared],
) -> list[float]:
    """One round of batch adds: total seconds of ours, bare and by-hand."""
    client = _client(url)
    names = [await _fresh_collection(client, space) for _ in range(3)]
    store = QdrantMemoryStore(client, space, collection_prefix=names[0][: names[0].index("_") + 1])

    async def run_ours(chunk: list[MemoryRecord], _prep: _Prepared) -> None:
        # validation, duplicate check, codec, upsert
        await store.add(chunk)

    async def run_bare(_chunk: list[MemoryRecord], prep: _Prepared) -> None:
        # ids, vectors and payloads ready: only Batch + upsert are timed
        ids, matrix, payloads = prep
        # qdrant-client accepts numpy vectors in a Batch (it converts them itself)
        points = qm.Batch(ids=ids, vectors=cast(Any, matrix), payloads=payloads)
        await client.upsert(names[1], points=points, wait=True)

    async def run_by_hand(chunk: list[MemoryRecord], _prep: _Prepared) -> None:
        # the same upsert, converting the records to the same points with the
        # store's own batch codec
        matrix = np.stack([r.vector for r in chunk])
        points = qm.Batch(
            ids=cast(list[qm.ExtendedPointId], point_ids([(r.owner, r.id) for r in chunk])),
            vectors=cast(Any, matrix),
            payloads=batch_payloads(chunk, matrix),
        )
        await client.upsert(names[2], points=points, wait=True)

    contenders = [run_ours, run_bare, run_by_hand]
    totals = [0.0, 0.0, 0.0]
    # The contenders alternate batch by batch, in rotating order, so that load
    # drift on a shared machine hits them alike.
    for i, (chunk, prep) in enumerate(zip(batches, prepared, strict=True)):
        for k in [(i + j) % 3 for j in range(3)]:
            _settle()
            t = _now()
            await contenders[k](chunk, prep)
            totals[k] += _now() - t
    for name in names:
        await client.delete_collection(name)
    await client.close()
    return totals


async def _bench_add(
    url: str | None, records: list[MemoryRecord], space: EmbeddingSpace, batch: int, rounds: int
) -> tuple[float, float, float]:
    """Medians of: ours, bare upsert of prepared data, bare upsert converting records."""
    batches = [records[i : i + batch] for i in range(0, len(records), batch)]
    prepared: list[_Prepared] = []
    for chunk in batches:
        matrix = np.stack([r.vector for r in chunk])
        ids = point_ids([(r.owner, r.id) for r in chunk])
        prepared.append(
            (cast(list[qm.ExtendedPointId], ids), matrix, batch_payloads(chunk, matrix))
        )
    rounds_out = [await _add_round(url, space, batches, prepared) for _ in range(rounds)]
    ours, bare, by_hand = ([r[k] for r in rounds_out] for k in range(3))
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
        hits: list[ScoredRecord] = []
        top: list[str] = []
        # alternate which one goes first, so that neither always runs warm
        for which in (0, 1) if k % 2 == 0 else (1, 0):
            _settle()
            t = _now()
            if which == 0:
                hits = await store.search(owner, q, limit=10)
                ours.append(_now() - t)
            else:
                raw = await client.query_points(
                    name, query=q.tolist(), query_filter=flt, limit=10, with_payload=True
                )
                base.append(_now() - t)
                top = [str((p.payload or {})["id"]) for p in raw.points]
        got = [h.record.id for h in hits]
        assert got[:5] == top[:5], "ours and the bare call disagree on the top results"
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
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument(
        "--clock",
        choices=sorted(_CLOCK),
        default=None,
        help="cpu (default in local mode) or wall (default with --url)",
    )
    parser.add_argument(
        "--no-collect",
        action="store_true",
        help="no full garbage collection before each timed call",
    )
    args = parser.parse_args()
    global _settle_gc
    _settle_gc = not args.no_collect
    clock = args.clock or ("wall" if args.url else "cpu")
    _set_clock(clock)
    space = EmbeddingSpace("bench", args.dim)
    records = _records(args.records, args.dim, args.owners, seed=1)
    where = args.url or "local mode (:memory:)"
    gc_note = "full GC before each call" if _settle_gc else "GC left alone"
    print(
        f"qdrant overhead on {where}: {args.records} records, dim {args.dim}, "
        f"{clock} time, {gc_note}, median of {args.rounds} rounds"
    )
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
