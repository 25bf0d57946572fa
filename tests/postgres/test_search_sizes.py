"""Which statement a PostgreSQL vector search runs, and that every path answers
exactly what the in-process store answers.

`search` remembers, per scope (owner, namespace, kinds), when it last read the
scope as small (at most the exact threshold, from the counts table). Such a
scope runs the exact statement alone for `SIZE_TTL` seconds; any other scope
runs the gated statement (the probe), which reads the size in its own snapshot,
runs the exact scan or the HNSW index accordingly and reports the size.
`search_path` says which the next search runs (and every search here checks
that it ran that one: `_probes` counts the probes). These tests follow owners below
and above a small threshold, freshly bulk-loaded, growing and shrinking across
the threshold through this handle and another one, and compare every answer
with `memory://`'s exact search (ids in order; scores within 1e-6, as it
rescores in float64) and, bit for bit, with `exact_cosines` over the whole
scope: the float32 scores and order the store returned before.
"""

from __future__ import annotations

import itertools
import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agent_memory.adapters.memory.store import InMemoryMemoryStore
from agent_memory.adapters.postgres import PostgresDatabase, PostgresMemoryStore
from agent_memory.domain.ranking import top_k
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord, ScoredRecord
from agent_memory.domain.vector_index import exact_cosines
from postgres.conftest import OpenDatabase

DIM = 4
AT = datetime(2026, 1, 1, tzinfo=UTC)
THRESHOLD = 20


def _space() -> EmbeddingSpace:
    """A space (table) of the test's own: the remembered sizes are per handle,
    the counts per table."""
    return EmbeddingSpace(model=f"sizes-{uuid.uuid4().hex[:8]}", dimension=DIM)


def _records(
    owner: str, n: int, *, start: int = 0, seed: int = 0, namespace: str = "n1"
) -> list[MemoryRecord]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return [
        MemoryRecord(
            owner=owner,
            id=f"r{start + i:05d}",
            namespace=namespace,
            kind="fact" if i % 3 else "note",
            content=f"record {start + i}",
            vector=vectors[i],
            created_at=AT + timedelta(seconds=i),
            updated_at=AT + timedelta(seconds=i),
        )
        for i in range(n)
    ]


def _answer(hits: list[ScoredRecord]) -> list[tuple[str, str, bytes, bytes]]:
    """What must agree exactly: the order, the owner and id, the score's
    float32 bytes and the vector's bytes."""
    return [
        (h.record.owner, h.record.id, np.float32(h.score).tobytes(), h.record.vector.tobytes())
        for h in hits
    ]


def _reference(
    records: list[MemoryRecord],
    query: npt.NDArray[np.float32],
    limit: int = 10,
    min_score: float | None = None,
    namespace: str | None = None,
    kinds: list[str] | None = None,
) -> list[tuple[str, str, bytes, bytes]]:
    """The answer by `exact_cosines` and `top_k` over the whole scope, bit for
    bit (each row's score depends on that row alone)."""
    scope = sorted(
        (
            r
            for r in records
            if (namespace is None or r.namespace == namespace)
            and (kinds is None or r.kind in kinds)
        ),
        key=lambda r: r.id,
    )
    if not scope:
        return []
    scores = exact_cosines(np.array([r.vector for r in scope]), query)
    hits = top_k(scores, [r.id for r in scope], limit, min_score)
    return _answer([ScoredRecord(record=scope[i], score=s) for i, s in hits])


async def _agree(
    store: PostgresMemoryStore,
    oracle: InMemoryMemoryStore,
    owner: str,
    *,
    queries: int = 4,
    seed: int = 99,
    **kwargs: Any,
) -> None:
    """The store's answers are `memory://`'s (ids in order, scores within
    1e-6: it rescores in float64) and, bit for bit, `_reference`'s."""
    records = await _all(oracle, owner)
    for q in np.random.default_rng(seed).standard_normal((queries, DIM)).astype(np.float32):
        path = store.search_path(owner, kwargs.get("namespace"), kwargs.get("kinds"))
        probes = store._probes
        got = await store.search(owner, q, **kwargs)
        assert store._probes - probes == (path == "probe")  # the statement it said
        want = await oracle.search(owner, q, **kwargs)
        assert [h.record.id for h in got] == [h.record.id for h in want]
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-6)
        assert _answer(got) == _reference(records, q, **kwargs)


def _same_up_to_rounding(
    got: list[ScoredRecord],
    scores: dict[str, float],
    limit: int,
    min_score: float | None,
    tol: float = 1e-6,
) -> None:
    """`got` is a top-`limit` answer over `scores` (every scope record's score by
    `memory://`, which rescores in float64) up to rounding: each hit's score
    within `tol` of its own, no record left out scoring more than `tol` above the
    lowest hit, as many hits as the records surely in, sorted by score. Scores
    that cancel exactly (orthogonal rows) round to 0 or to +-1e-17 by path, so
    the order within such a tie is the path's, not a contract."""
    ids = [h.record.id for h in got]
    assert len(set(ids)) == len(ids)
    for h in got:
        assert h.score == pytest.approx(scores[h.record.id], abs=tol)
    assert all(a.score >= b.score - tol for a, b in itertools.pairwise(got))
    floor = -math.inf if min_score is None else min_score
    surely = [i for i, v in scores.items() if v >= floor + tol]
    maybe = [i for i, v in scores.items() if v >= floor - tol]
    assert min(limit, len(surely)) <= len(got) <= min(limit, len(maybe))
    lowest = min((scores[i] for i in ids), default=math.inf)
    if len(got) == limit:
        assert all(scores[i] <= lowest + tol for i in set(scores) - set(ids))
    else:
        assert set(surely) <= set(ids)


async def _all(oracle: InMemoryMemoryStore, owner: str) -> list[MemoryRecord]:
    out: list[MemoryRecord] = []
    cursor = None
    while True:
        page = await oracle.list(owner, limit=500, cursor=cursor)
        out.extend(page.records)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


async def _both(
    db: PostgresDatabase, space: EmbeddingSpace, **kwargs: Any
) -> tuple[PostgresMemoryStore, InMemoryMemoryStore]:
    store = PostgresMemoryStore(db, space, exact_threshold=THRESHOLD, **kwargs)
    return store, InMemoryMemoryStore(space)


async def _add(
    store: PostgresMemoryStore, oracle: InMemoryMemoryStore, records: list[MemoryRecord]
) -> None:
    await store.add(records)
    await oracle.add(records)


class TestSearchSizes:
    async def test_a_small_scope_probes_once_then_runs_the_exact_statement(
        self, open_database: OpenDatabase
    ) -> None:
        store, oracle = await _both(await open_database(), _space())
        await _add(store, oracle, _records("small", 12))
        assert store.search_path("small") == "probe"
        await _agree(store, oracle, "small", queries=1)
        assert store.search_path("small") == "exact"
        await _agree(store, oracle, "small", limit=5)
        await _agree(store, oracle, "small", limit=50)
        await _agree(store, oracle, "small", min_score=0.2)
        # Each filtered scope is remembered by itself.
        assert store.search_path("small", kinds=["note"]) == "probe"
        await _agree(store, oracle, "small", kinds=["note"], queries=1)
        assert store.search_path("small", kinds=["note"]) == "exact"
        assert store.search_path("small", namespace="n1") == "probe"
        await _agree(store, oracle, "small", namespace="n1", kinds=["fact", "note"], limit=3)
        # An empty scope is not remembered (nothing to remember it by).
        assert await store.search("nobody", np.ones(DIM, dtype=np.float32)) == []
        assert store.search_path("nobody") == "probe"

    async def test_a_large_scope_always_probes(self, open_database: OpenDatabase) -> None:
        """Above the threshold the gated statement runs every time (its HNSW
        branch; the default ef_search, 400, makes the graph search of these
        few rows exhaustive, so it is exact too)."""
        store, oracle = await _both(await open_database(), _space())
        await _add(store, oracle, _records("large", 3 * THRESHOLD))
        await _add(store, oracle, _records("small", 5, seed=1))
        for _ in range(2):
            await _agree(store, oracle, "large", limit=5)
            assert store.search_path("large") == "probe"
        # Its small filtered scope (a third are notes: at most the threshold) is exact.
        await _agree(store, oracle, "large", kinds=["note"], queries=1)
        assert store.search_path("large", kinds=["note"]) == "exact"

    async def test_deletes_crossing_the_threshold(self, open_database: OpenDatabase) -> None:
        """Large, then small: the probe's own count sends it to the exact scan at
        once (nothing remembered said small). Small again, then large: the exact
        statement stays right meanwhile, and the size is read again after
        SIZE_TTL."""
        store, oracle = await _both(await open_database(), _space())
        records = _records("a", 2 * THRESHOLD)
        await _add(store, oracle, records)
        await _agree(store, oracle, "a", queries=1)
        assert store.search_path("a") == "probe"
        for r in records[THRESHOLD // 2 :]:
            assert await store.delete("a", r.id)
            assert await oracle.delete("a", r.id)
        assert store.search_path("a") == "probe"
        await _agree(store, oracle, "a")
        assert store.search_path("a") == "exact"
        # Grown past the threshold again (batches below it: nothing is forgotten).
        for start in range(THRESHOLD, 4 * THRESHOLD, THRESHOLD // 2):
            await _add(store, oracle, _records("a", THRESHOLD // 2, start=start, seed=start))
        assert store.search_path("a") == "exact"
        await _agree(store, oracle, "a")  # still the exact statement: exact
        store.SIZE_TTL = 0.0  # the remembered size is now too old
        assert store.search_path("a") == "probe"
        await _agree(store, oracle, "a")
        assert store.search_path("a") == "probe"  # read as large: not remembered

    async def test_a_batch_above_the_threshold_and_bulk_loads_forget_the_sizes(
        self, open_database: OpenDatabase
    ) -> None:
        store, oracle = await _both(await open_database(), _space())
        await _add(store, oracle, _records("a", 5))
        await _add(store, oracle, _records("b", 5, seed=2))
        for owner in ("a", "b"):
            await _agree(store, oracle, owner, queries=1)
            assert store.search_path(owner) == "exact"
        await _add(store, oracle, _records("a", THRESHOLD + 1, start=100, seed=3))
        assert store.search_path("a") == "probe"
        assert store.search_path("b") == "probe"
        await _agree(store, oracle, "a")
        await _agree(store, oracle, "b", queries=1)
        assert store.search_path("b") == "exact"
        # A fresh bulk load (the index dropped and built again), in batches
        # none of which is above the threshold by itself.
        batch = _records("b", 3 * THRESHOLD, start=100, seed=4)
        batches = [batch[i : i + THRESHOLD] for i in range(0, len(batch), THRESHOLD)]
        assert await store.bulk_add(batches) == len(batch)
        await oracle.add(batch)
        assert store.search_path("b") == "probe"
        await _agree(store, oracle, "b")
        await _agree(store, oracle, "a", kinds=["note"], queries=1)
        assert store.search_path("a", kinds=["note"]) == "exact"
        async with store.bulk_load(1000) as dropped:
            assert dropped
            await _add(store, oracle, _records("c", 10, seed=5))
            await _agree(store, oracle, "c")  # while the index is absent
        assert store.search_path("a", kinds=["note"]) == "probe"
        await _agree(store, oracle, "c")
        assert store.search_path("c") == "exact"

    async def test_another_handles_writes_are_seen_after_the_ttl(
        self, open_database: OpenDatabase
    ) -> None:
        space = _space()
        store, oracle = await _both(await open_database(), space)
        other = PostgresMemoryStore(await open_database(), space, exact_threshold=THRESHOLD)
        await _add(store, oracle, _records("a", 5))
        await _agree(store, oracle, "a", queries=1)
        assert store.search_path("a") == "exact"
        grown = _records("a", 3 * THRESHOLD, start=100, seed=6)
        await other.add(grown)
        await oracle.add(grown)
        await _agree(store, oracle, "a")  # the exact statement, on the new rows
        assert store.search_path("a") == "exact"
        store.SIZE_TTL = 0.0
        await _agree(store, oracle, "a")
        assert store.search_path("a") == "probe"
        await other.delete_scope("a")
        await oracle.delete_scope("a")
        assert await store.search("a", np.ones(DIM, dtype=np.float32)) == []


# Components from a few values: repeated vectors (exact ties), zero vectors and
# rows along the query.
_component = st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 1e-3])
_vector = st.lists(_component, min_size=DIM, max_size=DIM)


class TestSearchAgreesWithMemory:
    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @example(  # an orthogonal row: memory:// scores 2.8e-17, the float32 path 0
        vectors=[[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, -3.0, 0.0]],
        query=[2.0, 1.0, 1.0, 0.0],
        limit=1,
        min_score=None,
        kinds=None,
    )
    @given(
        vectors=st.lists(_vector, min_size=1, max_size=30),
        query=_vector,
        limit=st.integers(1, 12),
        min_score=st.none() | st.sampled_from([-1.0, 0.0, 0.3, 0.99]),
        kinds=st.none() | st.sampled_from([["fact"], ["note"], ["fact", "note"]]),
    )
    async def test_every_path_answers_as_memory(
        self,
        open_database: OpenDatabase,
        vectors: list[list[float]],
        query: list[float],
        limit: int,
        min_score: float | None,
        kinds: list[str] | None,
    ) -> None:
        """Small inputs (below the default threshold), each searched three
        times: by the probe, by the exact statement its size read chose (the
        probe again when the scope is empty), and by the probe once more
        (SIZE_TTL 0): each time the in-process store's exact answer."""
        space = EmbeddingSpace(model="sizes-property", dimension=DIM)
        db = await open_database()
        store = PostgresMemoryStore(db, space)
        oracle = InMemoryMemoryStore(space)
        await store.delete_scope("o")
        records = [
            MemoryRecord(
                owner="o",
                id=f"r{i:03d}",
                namespace="n",
                kind="note" if i % 2 else "fact",
                content="x",
                vector=np.array(v, dtype=np.float32),
                created_at=AT,
                updated_at=AT,
            )
            for i, v in enumerate(vectors)
        ]
        await store.add(records)
        await oracle.add(records)
        q = np.array(query, dtype=np.float32)
        args: dict[str, Any] = {"limit": limit, "min_score": min_score, "kinds": kinds}
        scope_size = len(records)
        every = await oracle.search("o", q, limit=scope_size, kinds=kinds)
        scores = {h.record.id: h.score for h in every}
        exact = _reference(records, q, **args)
        paths = []
        for ttl in (1.0, 1.0, 0.0):
            store.SIZE_TTL = ttl
            paths.append(store.search_path("o", kinds=kinds))
            probes = store._probes
            got = await store.search("o", q, **args)
            assert store._probes - probes == (paths[-1] == "probe")
            _same_up_to_rounding(got, scores, limit, min_score)
            assert _answer(got) == exact
        scope = [r for r in records if kinds is None or r.kind in kinds]
        assert paths == ["probe", "exact" if scope else "probe", "probe"]
