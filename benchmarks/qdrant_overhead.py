"""Overhead of `QdrantMemoryStore` over the bare qdrant-client calls it makes.

On the shared harness (`_harness.py`: paired, interleaved, median of the
per-pair ratios, inputs built before the clock starts, GC as in production:
the garbage our side creates is paid where it is created), with 10,000
records of 10 owners in one collection:

- `qdrant_add`: `store.add(batch)` (validation, duplicate check by point id,
  payload codec with keyword terms and the exact vector, upsert) vs what a user
  writes with qdrant-client alone: `client.upsert(collection, [PointStruct(id,
  vector, payload), ...], wait=True)` with a uuid5 point id per (owner, id), the
  vector as a list, and a plain payload (the record's fields as they are,
  timestamps as ISO strings, attributes as a dict), built from the records
  inside the timed call. It neither rejects duplicates nor stores keyword terms
  or the exact vector: that is the work our extra pays for. Each call adds a
  new batch of 500 records (built beforehand); each side writes to its own
  collection, created beforehand with the store's layout.
- `qdrant_add_keyword_false`: the same, with the store opened with
  `keyword=False` (`?keyword=false`): no keyword terms derived or stored on add
  (the first keyword search derives them), the rest as `qdrant_add`.
- `qdrant_add_store_codec` (no target): the same, against an upsert of the
  store's own points (`Batch` of the store's ids and `batch_payloads`, keyword
  terms and exact vector included), converted inside the timed call: what the
  store pays beyond its payload (validation, duplicate check).
- `qdrant_add_prepared_points` (no target): the store's points prepared before
  the clock starts (no conversion of records at all).
- `qdrant_search`: `store.search(owner, q, limit=10)` (owner filter, a few
  extra candidates to settle ties, exact cosine re-ranking, records decoded)
  vs `client.query_points(collection, query=q, query_filter=owner, limit=10,
  with_payload=True)`.

`tests/test_benchmarks.py` checks that both sides store and return the same
data. Local mode (`:memory:`) runs in this process; `--url` uses a server.

`--parts` times, instead, each piece of work of one `add` of a batch (and of
the plain side) on its own, interleaved over the rounds, and prints the median
milliseconds per batch; then whole adds with and without keyword terms (and
without them after deriving them), next to the plain upsert; then what
`keyword=false` defers to the first keyword search: what the ratio's extra pays
for (docs/qdrant.md).

    python benchmarks/qdrant_overhead.py                  # local mode (:memory:)
    python benchmarks/qdrant_overhead.py --url http://localhost:6333
    python benchmarks/qdrant_overhead.py --parts
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from _harness import compare_async
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm

from agent_memory.adapters._common.validation import check_records
from agent_memory.adapters.qdrant import QdrantMemoryStore
from agent_memory.adapters.qdrant._codec import (
    _encode_vectors,
    batch_payloads,
    make_point,
    point_ids,
)
from agent_memory.adapters.qdrant._lexical import record_terms
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

TARGET = 1.15
Side = Callable[[], Awaitable[Any]]
# Point ids, the vector matrix as embedders return it, and payload dicts.
Prepared = tuple[list[qm.ExtendedPointId], npt.NDArray[np.float32], list[dict[str, Any]]]


def make_records(n: int, dim: int, owners: int, seed: int, tag: str = "") -> list[MemoryRecord]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        MemoryRecord(
            id=f"{tag}rec-{i:06d}",
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


def client_for(url: str | None) -> AsyncQdrantClient:
    if url:
        return AsyncQdrantClient(url=url, check_compatibility=False)
    return AsyncQdrantClient(location=":memory:")


async def new_store(
    client: AsyncQdrantClient, space: EmbeddingSpace, *, keyword: bool = True
) -> QdrantMemoryStore:
    """A store on a new, empty collection (created with its payload indexes)."""
    prefix = f"b{uuid.uuid4().hex[:8]}_"
    store = QdrantMemoryStore(client, space, collection_prefix=prefix, keyword=keyword)
    await store.list("warm-up")  # creates the collection and its payload indexes
    return store


# The uuid5 namespace of the plain side's point ids (any fixed namespace will do).
_PLAIN_NS = uuid.UUID("6ba7b811-9dad-11d1-80b4-00c04fd430c8")


def plain_points(chunk: list[MemoryRecord]) -> list[qm.PointStruct]:
    """The points a user writes by hand: a deterministic id per (owner, id), the
    vector as a list, the record's fields as a plain payload."""
    return [
        qm.PointStruct(
            id=str(uuid.uuid5(_PLAIN_NS, f"{len(r.owner)}:{r.owner}{r.id}")),
            vector=r.vector.tolist(),
            payload={
                "owner": r.owner,
                "id": r.id,
                "namespace": r.namespace,
                "kind": r.kind,
                "content": r.content,
                "context": r.context,
                "created_at": r.created_at.isoformat(),
                "updated_at": r.updated_at.isoformat(),
                "importance": r.importance,
                "attributes": r.attributes,
            },
        )
        for r in chunk
    ]


def to_points(chunk: list[MemoryRecord]) -> qm.Batch:
    """Records to the store's points, with its own batch codec."""
    matrix = np.stack([r.vector for r in chunk])
    return qm.Batch(
        ids=cast(list[qm.ExtendedPointId], point_ids([(r.owner, r.id) for r in chunk])),
        vectors=cast(Any, matrix),  # qdrant-client converts numpy vectors itself
        payloads=batch_payloads(chunk, matrix),
    )


def prepare(chunk: list[MemoryRecord]) -> Prepared:
    matrix = np.stack([r.vector for r in chunk])
    ids = cast(list[qm.ExtendedPointId], point_ids([(r.owner, r.id) for r in chunk]))
    return ids, matrix, batch_payloads(chunk, matrix)


def add_sides(
    client: AsyncQdrantClient,
    store: QdrantMemoryStore,
    collection: str,
    ours_batches: Iterator[list[MemoryRecord]],
    direct_batches: Iterator[list[MemoryRecord]],
    *,
    plain: bool = True,
) -> tuple[Side, Side]:
    """(ours, by hand): each call adds the next batch of its iterator; the
    direct side upserts into `collection` plain points (`plain_points`), or the
    store's own points (`to_points`) when not `plain`."""

    async def ours() -> Any:
        return await store.add(next(ours_batches))

    async def direct() -> Any:
        chunk = next(direct_batches)
        points = plain_points(chunk) if plain else to_points(chunk)
        return await client.upsert(collection, points=points, wait=True)

    return ours, direct


def prepared_side(client: AsyncQdrantClient, collection: str, prepared: Iterator[Prepared]) -> Side:
    async def direct() -> Any:
        ids, matrix, payloads = next(prepared)
        points = qm.Batch(ids=ids, vectors=cast(Any, matrix), payloads=payloads)
        return await client.upsert(collection, points=points, wait=True)

    return direct


def search_sides(
    client: AsyncQdrantClient,
    store: QdrantMemoryStore,
    queries: list[tuple[str, npt.NDArray[np.float32]]],
) -> tuple[Side, Side]:
    """(ours, direct): the n-th call of each searches `queries[n]` (cycling)."""
    collection = store.collection_name
    ours_q, direct_q = cycle(queries), cycle(queries)

    async def ours() -> Any:
        owner, q = next(ours_q)
        return await store.search(owner, q, limit=10)

    async def direct() -> Any:
        owner, q = next(direct_q)
        flt = qm.Filter(must=[qm.FieldCondition(key="owner", match=qm.MatchValue(value=owner))])
        res = await client.query_points(
            collection, query=q.tolist(), query_filter=flt, limit=10, with_payload=True
        )
        return res.points

    return ours, direct


def cycle(items: list[Any]) -> Iterator[Any]:
    while True:
        yield from items


async def run(
    url: str | None, records: int, dim: int, owners: int, batch: int, rounds: int
) -> None:
    space = EmbeddingSpace("bench", dim)
    client = client_for(url)
    stores: list[QdrantMemoryStore] = []
    try:
        # Search: one collection of `records` records.
        store = await new_store(client, space)
        stores.append(store)
        data = make_records(records, dim, owners, seed=1)
        for i in range(0, len(data), 1000):
            await store.add(data[i : i + 1000])
        rng = np.random.default_rng(7)
        qs = rng.standard_normal((64, dim)).astype(np.float32)
        queries = [(f"owner-{k % owners}", q) for k, q in enumerate(qs)]
        ours, direct = search_sides(client, store, queries)
        result = await compare_async(
            "qdrant_search", ours, direct, rounds=rounds * 4, target=TARGET
        )
        print(result.line(), flush=True)

        # Adds: new collections, a new batch per call (the harness's warm-up included).
        calls = rounds + 3
        chunks = [
            make_records(batch, dim, owners, seed=100 + i, tag=f"a{i}-") for i in range(calls)
        ]
        ours_store, by_hand, prepared = [await new_store(client, space) for _ in range(3)]
        stores += [ours_store, by_hand, prepared]
        ours, direct = add_sides(
            client, ours_store, by_hand.collection_name, iter(chunks), iter(chunks)
        )
        result = await compare_async("qdrant_add", ours, direct, rounds=rounds, target=TARGET)
        print(result.line(), flush=True)

        no_terms, by_hand_again = [await new_store(client, space, keyword=k) for k in (False, True)]
        stores += [no_terms, by_hand_again]
        ours, direct = add_sides(
            client, no_terms, by_hand_again.collection_name, iter(chunks), iter(chunks)
        )
        result = await compare_async(
            "qdrant_add_keyword_false", ours, direct, rounds=rounds, target=TARGET
        )
        print(result.line(), flush=True)

        codec_ours, codec_direct = [await new_store(client, space) for _ in range(2)]
        stores += [codec_ours, codec_direct]
        ours, direct = add_sides(
            client, codec_ours, codec_direct.collection_name, iter(chunks), iter(chunks),
            plain=False,
        )  # fmt: skip
        result = await compare_async(
            "qdrant_add_store_codec", ours, direct, rounds=rounds, target=None
        )
        print(result.line(), flush=True)

        again = await new_store(client, space)
        stores.append(again)
        ours, _ = add_sides(client, again, by_hand.collection_name, iter(chunks), iter(()))
        direct = prepared_side(client, prepared.collection_name, iter([prepare(c) for c in chunks]))
        result = await compare_async(
            "qdrant_add_prepared_points", ours, direct, rounds=rounds, target=None
        )
        print(result.line(), flush=True)
    finally:
        for s in stores:
            await client.delete_collection(s.collection_name)
        await client.close()


async def parts(url: str | None, dim: int, owners: int, batch: int, rounds: int) -> None:
    """Median milliseconds per batch of each piece of work, timed one at a time
    (interleaved over the rounds; each round adds a new batch)."""
    space = EmbeddingSpace("bench", dim)
    client = client_for(url)
    stores = [await new_store(client, space, keyword=k) for k in (True, False, True)]
    with_terms, without_terms, plain = stores
    took: dict[str, list[float]] = {}

    def clock(name: str, start: float) -> float:
        now = time.perf_counter()
        took.setdefault(name, []).append(now - start)
        return now

    try:
        for i in range(rounds + 3):
            chunk = make_records(batch, dim, owners, seed=500 + i, tag=f"p{i}-")
            t = time.perf_counter()
            records = check_records(chunk, space)
            t = clock("validation (check_records)", t)
            ids = point_ids([(r.owner, r.id) for r in records])
            t = clock("point ids (uuid5)", t)
            await with_terms._existing(with_terms.collection_name, ids)
            t = clock("duplicate check (retrieve of the ids)", t)
            matrix = np.stack([r.vector for r in records])
            _encode_vectors(matrix)
            t = clock("exact vector (stack, base64)", t)
            bare = batch_payloads(records, matrix, keyword=False)
            t = clock("payload without keyword terms (exact vector included)", t)
            for r in records:
                record_terms(r.content, r.context)
            t = clock("keyword terms (domain.lexical, content + context)", t)
            full = batch_payloads(records, matrix)
            t = time.perf_counter()
            vectors = matrix.tolist()
            points = list(map(make_point, ids, vectors, full))
            t = clock("points (vectors as lists, make_point)", t)
            bare_points = list(map(make_point, ids, vectors, bare))
            upserts = [
                ("upsert, payload with keyword terms", with_terms, points),
                ("upsert, payload without keyword terms", without_terms, bare_points),
            ]
            for name, store, batch_points in upserts[:: 1 if i % 2 else -1]:  # alternating
                t = time.perf_counter()
                await client.upsert(store.collection_name, points=batch_points, wait=True)
                clock(name, t)
            t = time.perf_counter()
            by_hand = plain_points(chunk)
            t = clock("plain side: its points (PointStruct, validated)", t)
            await client.upsert(plain.collection_name, points=by_hand, wait=True)
            clock("plain side: upsert", t)
        for name, values in took.items():
            print(f"part {statistics.median(values[3:]) * 1e3:7.2f} ms  {name}", flush=True)
        await whole_adds(client, space, owners, batch, rounds, stores)
        await deferred_terms(client, space, batch, stores)
    finally:
        for s in stores:
            await client.delete_collection(s.collection_name)
        await client.close()


async def whole_adds(
    client: AsyncQdrantClient,
    space: EmbeddingSpace,
    owners: int,
    batch: int,
    rounds: int,
    stores: list[QdrantMemoryStore],
) -> None:
    """Whole calls, interleaved (the order reverses every round): `add` on a
    default store, on a `keyword=false` store, on a `keyword=false` store after
    deriving the batch's terms and dropping them (what deriving costs inside a
    call), and the plain upsert; the differences split the terms' cost into
    deriving and storing them."""
    sides = [await new_store(client, space, keyword=k) for k in (True, False, False, True)]
    stores += sides
    default, no_terms, derived, plain = sides
    names = [
        "add (keyword terms)",
        "add, keyword=false",
        "add, keyword=false, after deriving the terms",
        "plain upsert",
    ]
    took: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds + 3):
        chunk = make_records(batch, space.dimension, owners, seed=700 + i, tag=f"w{i}-")
        order = list(zip(names, sides, strict=True))
        for name, store in order[:: 1 if i % 2 else -1]:
            t = time.perf_counter()
            if store is plain:
                await client.upsert(store.collection_name, points=plain_points(chunk), wait=True)
            else:
                if store is derived:
                    for r in chunk:
                        record_terms(r.content, r.context)
                await store.add(chunk)
            took[name].append(time.perf_counter() - t)
    del default, no_terms
    for name, values in took.items():
        print(f"whole {statistics.median(values[3:]) * 1e3:7.2f} ms  {name}", flush=True)


async def deferred_terms(
    client: AsyncQdrantClient, space: EmbeddingSpace, n: int, stores: list[QdrantMemoryStore]
) -> None:
    """What `keyword=false` defers: one owner's `n` records added by such a store,
    then its first keyword search (which derives and stores their terms) and the
    next one, against the same search on a store that stored them on add."""
    took: dict[str, list[float]] = {}
    for rep in range(3):
        records = make_records(n, space.dimension, 1, seed=900 + rep, tag=f"d{rep}-")
        normal, deferred = [await new_store(client, space, keyword=k) for k in (True, False)]
        stores += [normal, deferred]
        for name, store in (("add, keyword terms", normal), ("add, keyword=false", deferred)):
            t = time.perf_counter()
            await store.add(records)
            took.setdefault(name, []).append(time.perf_counter() - t)
        answers = []
        for name, store in (
            ("search_text, terms stored on add", normal),
            ("search_text, keyword=false, first (derives the terms)", deferred),
            ("search_text, keyword=false, next", deferred),
        ):
            t = time.perf_counter()
            answers.append(await store.search_text("owner-0", "topic 5", limit=10))
            took.setdefault(name, []).append(time.perf_counter() - t)
        assert answers[0] == answers[1] == answers[2]
    for name, values in took.items():
        print(f"deferred {statistics.median(values) * 1e3:7.2f} ms  {name} ({n} records)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("QDRANT_URL"), help="Qdrant server")
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--owners", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--parts", action="store_true", help="time each piece of an add")
    args = parser.parse_args()
    if args.parts:
        asyncio.run(parts(args.url, args.dim, args.owners, args.batch, args.rounds))
        return
    asyncio.run(run(args.url, args.records, args.dim, args.owners, args.batch, args.rounds))


if __name__ == "__main__":
    main()
