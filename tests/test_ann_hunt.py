"""Adversarial hunt on vector search past the exact-search threshold.

`exact_threshold=0` (an `IndexOptions` / `AnnSettings` field) sends every search
through the approximate path, so small data exercises it. The oracle is exact
numpy: cosine in float64 over every live record, score descending then id
ascending. Where the graph is exhaustive (`ef_search` at least the number of
records) the approximate path must give exactly that answer; on every backend a
search must never return fewer than `limit` hits while enough matching records
exist, never a deleted record, and an updated record under its current vector.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import faiss  # noqa: F401  (the `ann` extra is part of the test extra)
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_memory.adapters._common.ann import AnnIndex, AnnSettings
from agent_memory.adapters._common.index_options import IndexOptions
from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.sqlite import SqliteMemoryStore
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord, ScoredRecord
from agent_memory.domain.vector_index import ExactIndex

DIM = 16
SPACE = EmbeddingSpace(model="ann-hunt", dimension=DIM)
T0 = datetime(2025, 1, 1, tzinfo=UTC)
TOL = 1e-4

# ------------------------------------------------------------------ the oracle


def oracle(
    rows: dict[str, np.ndarray],
    query: np.ndarray,
    limit: int,
    min_score: float | None = None,
) -> list[tuple[str, float]]:
    """The exact top `limit` of `rows` (id -> vector) for `query`: cosine in
    float64, a zero vector scoring 0, score descending then id ascending."""
    if not rows:
        return []
    ids = sorted(rows)
    m = np.asarray([rows[i] for i in ids], dtype=np.float64)
    norms = np.linalg.norm(m, axis=1)
    norms[norms == 0.0] = 1.0
    q = np.asarray(query, dtype=np.float64)
    qn = float(np.linalg.norm(q))
    scores = (m / norms[:, None]) @ (q / qn) if qn else np.zeros(len(ids))
    pairs = [(i, float(s)) for i, s in zip(ids, scores.tolist(), strict=True)]
    if min_score is not None:
        pairs = [p for p in pairs if p[1] >= min_score]
    pairs.sort(key=lambda p: (-round(p[1], 6), p[0]))
    return pairs[:limit]


def check(got: list[tuple[str, float]], want: list[tuple[str, float]], what: str) -> None:
    """Same length, same scores within `TOL`, ids equal except where two scores
    are within `TOL` of each other (a rounding tie may swap); exact ties (equal
    vectors) go by id."""
    assert len(got) == len(want), f"{what}: {len(got)} hits, want {len(want)}: {got} vs {want}"
    for (gi, gs), (wi, ws) in zip(got, want, strict=True):
        assert abs(gs - ws) <= TOL, f"{what}: got {got}, want {want}"
        if gi != wi:
            near = {i for i, s in want if abs(s - ws) <= TOL}
            assert gi in near or abs(gs - want[-1][1]) <= TOL, f"{what}: got {got}, want {want}"
    ordered = sorted(got, key=lambda p: (-p[1], p[0]))
    assert [s for _, s in got] == [s for _, s in ordered], f"{what}: not score-descending: {got}"


# ------------------------------------------------------------- distributions


def distribution(kind: str, n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        return rng.standard_normal((n, dim)).astype(np.float32)
    if kind == "duplicates":  # a handful of distinct vectors, each many times
        base = rng.standard_normal((max(2, n // 100), dim))
        return base[rng.integers(0, len(base), n)].astype(np.float32)
    if kind == "one-vector":
        return np.tile(rng.standard_normal(dim), (n, 1)).astype(np.float32)
    if kind == "clusters":  # tight clusters: near-ties inside each
        centres = rng.standard_normal((5, dim))
        pick = centres[rng.integers(0, 5, n)]
        return (pick + 1e-3 * rng.standard_normal((n, dim))).astype(np.float32)
    if kind == "anisotropic":
        return (rng.standard_normal((n, dim)) * np.exp(-np.arange(dim))).astype(np.float32)
    if kind == "negative":  # every record in the negative orthant
        return (-np.abs(rng.standard_normal((n, dim)))).astype(np.float32)
    if kind == "zeros-and-tiny":
        rows = rng.standard_normal((n, dim))
        rows[rng.random(n) < 0.3] = 0.0
        tiny = rng.random(n) < 0.3
        rows[tiny] *= 1e-30
        return rows.astype(np.float32)
    raise AssertionError(kind)


KINDS = [
    "gaussian",
    "duplicates",
    "one-vector",
    "clusters",
    "anisotropic",
    "negative",
    "zeros-and-tiny",
]


def _hits(index: ExactIndex, q: np.ndarray, limit: int, **kw: Any) -> list[tuple[str, float]]:
    return [(index.ids[p], s) for p, s in index.search(q, limit, **kw)]


# ------------------------------------------------------- AnnIndex, exhaustive


@settings(max_examples=25, deadline=None)
@example(kind="clusters", n=503, seed=0, limit=100, selective=False, min_score=None)  # an island
@given(
    kind=st.sampled_from(KINDS),
    n=st.integers(150, 700),
    seed=st.integers(0, 2**16),
    limit=st.sampled_from([1, 10, 100, 10_000]),
    selective=st.booleans(),
    min_score=st.sampled_from([None, -0.5, 0.0, 0.3]),
)
def test_an_exhaustive_graph_gives_the_exact_answer_on_adversarial_data(
    kind: str, n: int, seed: int, limit: int, selective: bool, min_score: float | None
) -> None:
    """`ef_search` >= the rows: whatever the distribution, the graph's answer is
    the exact one (same ids, scores, order), also under a 1% filter."""
    rows = distribution(kind, n, DIM, seed)
    ids = [f"r{i:04d}" for i in range(n)]
    ann = AnnIndex(DIM, AnnSettings(exact_threshold=0, m=8, ef_construction=40, ef_search=1000))
    exact = ExactIndex(DIM)
    ann.add(ids, rows)
    exact.add(ids, rows)
    rng = np.random.default_rng(seed + 1)
    queries = [rows[0], -rows[1], rng.standard_normal(DIM).astype(np.float32)]
    if kind == "negative":
        queries.append(np.abs(rng.standard_normal(DIM)).astype(np.float32))
    positions = np.arange(0, n, 100) if selective else None
    for q in queries:
        if not q.any():
            continue
        got = _hits(ann, q, limit, min_score=min_score, positions=positions)
        want = _hits(exact, q, limit, min_score=min_score, positions=positions)
        assert got == want, (kind, limit, selective, min_score)


def test_many_duplicates_leave_no_record_unreachable_at_the_default_ef() -> None:
    """3,000 records of 5 vectors at the default `ef_search` (200): a search asking
    for every record gets every record, a filter holding 1% of them gets all of
    its records, and ties go by id (HNSW left most of the identical rows in
    islands no walk reaches: 52 of 3,000 came back, and a random query could get
    a group scoring below the best one)."""
    rng = np.random.default_rng(11)
    base = rng.standard_normal((5, 64)).astype(np.float32)
    rows = base[rng.integers(0, 5, 3000)]
    ids = [f"r{i:05d}" for i in range(3000)]
    ann, exact = AnnIndex(64, AnnSettings(exact_threshold=0)), ExactIndex(64)
    ann.add(ids, rows)
    exact.add(ids, rows)
    rare = np.arange(0, 3000, 100)
    for q in [*base, *rng.standard_normal((10, 64)).astype(np.float32)]:
        for limit in (10, 300, 3000):
            assert _hits(ann, q, limit) == _hits(exact, q, limit), limit
        assert _hits(ann, q, 10, positions=rare) == _hits(exact, q, 10, positions=rare)


def test_twins_stay_right_through_deletes_and_updates() -> None:
    """Identical rows share a graph label: deleting the labelled one, updating a
    twin away or onto another group, or deleting a whole group keeps every
    answer exact (an exhaustive graph)."""
    rng = np.random.default_rng(5)
    base = rng.standard_normal((4, DIM)).astype(np.float32)
    n = 400
    rows = base[np.arange(n) % 4] * rng.uniform(0.5, 2.0, (n, 1)).astype(np.float32)
    ids = [f"r{i:04d}" for i in range(n)]
    ann = AnnIndex(DIM, AnnSettings(exact_threshold=0, m=8, ef_construction=40, ef_search=1000))
    exact = ExactIndex(DIM)
    for index in (ann, exact):
        index.add(ids, rows)
    queries = [*base, -base[0], rng.standard_normal(DIM).astype(np.float32)]

    def agree(step: str) -> None:
        for q in queries:
            for limit in (1, 7, 150, n):
                assert _hits(ann, q, limit) == _hits(exact, q, limit), (step, limit)

    agree("built")
    for step in range(40):
        op = step % 4
        live = list(exact.ids)
        if op == 0:  # delete the smallest ids: often the labelled ones
            doomed = sorted(live)[: 5 + step]
            ann.remove(doomed)
            exact.remove(doomed)
        elif op == 1:  # move some onto another group's vector
            for id_ in rng.choice(live, 10, replace=False).tolist():
                v = base[int(rng.integers(0, 4))] * np.float32(rng.uniform(0.5, 2))
                ann.update(id_, v)
                exact.update(id_, v)
        elif op == 2:  # move some away to fresh vectors
            for id_ in rng.choice(live, 5, replace=False).tolist():
                v = rng.standard_normal(DIM).astype(np.float32)
                ann.update(id_, v)
                exact.update(id_, v)
        else:  # re-add deleted ids as twins
            back = [f"r{i:04d}" for i in range(n) if f"r{i:04d}" not in exact][:20]
            if back:
                vs = base[rng.integers(0, 4, len(back))]
                ann.add(back, vs)
                exact.add(back, vs)
        agree(f"step {step}")
    assert ann.graph_built


# ------------------------------------------------------------------ the stores

BACKENDS = ["memory", "sqlite", "redis", "postgres", "qdrant", "milvus"]
# Every search through the graph; ef at least the records (pgvector's cap is 1,000).
GRAPH = IndexOptions(exact_threshold=0, ef_search=1000, m=8, ef_construction=64)


async def _open(name: str, request: pytest.FixtureRequest, tmp_path: Path, index: Any) -> Any:
    """A fresh, empty store of backend `name` (Milvus Lite has no graph: FLAT)."""
    if name == "memory":
        return InMemoryMemoryStore(SPACE, index=index)
    if name == "sqlite":
        return SqliteMemoryStore(tmp_path / f"{uuid.uuid4().hex}.db", SPACE, index=index)
    if name == "redis":
        from agent_memory.adapters.redis import RedisMemoryStore

        url = request.getfixturevalue("redis_url")
        return RedisMemoryStore.from_url(
            url, SPACE, deployment="a" + uuid.uuid4().hex[:12], index=index
        )
    if name == "postgres":
        from agent_memory.adapters.postgres import PostgresDatabase, PostgresMemoryStore

        url = request.getfixturevalue("postgres_url")
        db = PostgresDatabase(url, schema="a" + uuid.uuid4().hex[:12], min_size=1, max_size=2)
        await db.open()
        return PostgresMemoryStore(db, SPACE, owns_database=True, index=index)
    if name == "qdrant":
        from qdrant_client import AsyncQdrantClient

        from agent_memory.adapters.qdrant import QdrantMemoryStore

        return QdrantMemoryStore(
            AsyncQdrantClient(location=":memory:"), SPACE, owns_client=True, index=index
        )
    if name == "milvus":
        from pymilvus import MilvusClient

        from agent_memory.adapters.milvus import MilvusMemoryStore

        client = MilvusClient(uri=str(tmp_path / f"{uuid.uuid4().hex}.db"))
        return MilvusMemoryStore(client, SPACE, owns_client=True, flush_rows=1024)
    raise AssertionError(name)


async def _close(store: Any) -> None:
    drop = getattr(store, "drop_index", None)
    if drop is not None:
        await drop()
    await store.close()


@pytest.fixture(params=BACKENDS)
async def graph_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    store = await _open(str(request.param), request, tmp_path, GRAPH)
    yield store
    await _close(store)


def rec(
    id: str, owner: str, vector: Any, *, namespace: str = "common", kind: str = "fact", at: int = 0
) -> MemoryRecord:
    return MemoryRecord(
        id=id,
        owner=owner,
        namespace=namespace,
        kind=kind,
        content=f"record {id}",
        vector=np.asarray(vector, dtype=np.float32),
        created_at=T0 + timedelta(seconds=at),
        updated_at=T0 + timedelta(seconds=at),
    )


def pairs(hits: list[ScoredRecord]) -> list[tuple[str, float]]:
    return [(h.record.id, h.score) for h in hits]


class Mirror:
    """What the store should hold: id -> (vector, namespace, kind)."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[np.ndarray, str, str]] = {}

    def select(self, namespace: str | None = None, kinds: list[str] | None = None) -> dict:
        return {
            i: v
            for i, (v, ns, k) in self.rows.items()
            if (namespace is None or ns == namespace) and (kinds is None or k in kinds)
        }


async def _agree(
    store: Any,
    owner: str,
    mirror: Mirror,
    queries: list[np.ndarray],
    what: str,
    limits: tuple[int, ...] = (1, 10, 1000),
    min_scores: tuple[float | None, ...] = (None, -0.25, 0.5),
) -> None:
    for j, q in enumerate(queries):
        for args in (
            {},
            {"namespace": "rare"},
            {"kinds": ["odd"]},
            {"namespace": "rare", "kinds": ["odd", "fact"]},
        ):
            for limit in limits:
                for min_score in min_scores:
                    got = pairs(
                        await store.search(owner, q, limit=limit, min_score=min_score, **args)
                    )
                    name = f"{what}: query {j} {args} limit={limit} min_score={min_score}"
                    rows = mirror.select(**args)
                    if min_score is None:
                        check(got, oracle(rows, q, limit), name)
                        continue
                    # a score within rounding of min_score may fall on either side
                    loose = oracle(rows, q, limit, min_score - TOL)
                    strict = oracle(rows, q, limit, min_score + TOL)
                    assert len(strict) <= len(got) <= len(loose), f"{name}: {got} vs {loose}"
                    assert all(s >= min_score for _, s in got), f"{name}: {got}"
                    check(got, loose[: len(got)], name)


def _adversarial_rows(n: int, seed: int) -> np.ndarray:
    """Three vectors many times over (exact and scaled copies, one text
    embedded twice), a tight cluster, and random ones."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((3, DIM))
    rows = rng.standard_normal((n, DIM))
    dup = rng.random(n) < 0.6
    rows[dup] = base[rng.integers(0, 3, int(dup.sum()))]
    scaled = dup & (rng.random(n) < 0.3)
    rows[scaled] *= rng.uniform(0.1, 10.0, (int(scaled.sum()), 1))
    noisy = dup & ~scaled & (rng.random(n) < 0.3)
    rows[noisy] += 1e-6 * rng.standard_normal((int(noisy.sum()), DIM))
    return rows.astype(np.float32)


def _layout(i: int) -> tuple[str, str]:
    """namespace "rare" holds 1% of the records, kind "odd" 2%."""
    return ("rare" if i % 100 == 7 else "common"), ("odd" if i % 50 == 3 else "fact")


async def test_duplicates_and_selective_filters_past_the_threshold(graph_store: Any) -> None:
    """Many duplicate and near-duplicate vectors, a namespace holding 1% of the
    records and a kind holding 2%: through the graph every backend gives the
    exact answer (ids, scores, order, min_score), never fewer hits than there
    are matching records."""
    owner = "o-" + uuid.uuid4().hex[:8]
    n = 300
    rows = _adversarial_rows(n, 21)
    mirror = Mirror()
    records = []
    for i in range(n):
        ns, kind = _layout(i)
        records.append(rec(f"r{i:04d}", owner, rows[i], namespace=ns, kind=kind, at=i))
        mirror.rows[f"r{i:04d}"] = (rows[i], ns, kind)
    await graph_store.add(records)
    rng = np.random.default_rng(22)
    queries = [rows[0], rows[1], -rows[2], rng.standard_normal(DIM).astype(np.float32)]
    await _agree(graph_store, owner, mirror, queries, "loaded")


async def _writes_and_searches(store: Any, owner: str, n: int, seed: int) -> None:
    """Adds, updates (onto duplicates and away), deletes and delete_scope, each
    followed by searches checked against the exact oracle."""
    rng = np.random.default_rng(seed)
    rows = _adversarial_rows(n, seed)
    mirror = Mirror()

    async def add(i: int, v: np.ndarray) -> None:
        ns, kind = _layout(i)
        await store.add([rec(f"r{i:04d}", owner, v, namespace=ns, kind=kind, at=i)])
        mirror.rows[f"r{i:04d}"] = (v, ns, kind)

    batch = []
    for i in range(n):
        ns, kind = _layout(i)
        batch.append(rec(f"r{i:04d}", owner, rows[i], namespace=ns, kind=kind, at=i))
        mirror.rows[f"r{i:04d}"] = (rows[i], ns, kind)
    await store.add(batch)
    queries = [rows[0], -rows[0], rng.standard_normal(DIM).astype(np.float32)]
    await _agree(store, owner, mirror, queries, "loaded", limits=(3, 1000))
    for step in range(4):
        live = sorted(mirror.rows)
        for id_ in rng.choice(live, 8, replace=False).tolist():  # delete
            assert await store.delete(owner, id_)
            del mirror.rows[id_]
        live = sorted(mirror.rows)
        for id_ in rng.choice(live, 8, replace=False).tolist():  # update, maybe onto a twin
            v = rows[0] * np.float32(2.0) if step % 2 else rng.standard_normal(DIM)
            _, ns, kind = mirror.rows[id_]
            i = int(id_[1:])
            await store.update(rec(id_, owner, v, namespace=ns, kind=kind, at=i))
            mirror.rows[id_] = (np.asarray(v, dtype=np.float32), ns, kind)
        if step == 2:  # a whole namespace goes
            await store.delete_scope(owner, namespace="rare")
            mirror.rows = {i: r for i, r in mirror.rows.items() if r[1] != "rare"}
        if step == 3:  # and comes back
            for i in range(7, n, 100):
                if f"r{i:04d}" not in mirror.rows:
                    await add(i, rows[0])
        fresh = [v for v, _, _ in list(mirror.rows.values())[-2:]]
        await _agree(
            store, owner, mirror, [*queries, *fresh], f"step {step}", (3, 1000), (None, 0.5)
        )
    deleted = await store.delete_scope(owner, kinds=["fact"])
    assert deleted == len(mirror.select(kinds=["fact"]))
    mirror.rows = {i: r for i, r in mirror.rows.items() if r[2] != "fact"}
    await _agree(store, owner, mirror, queries, "after delete_scope", limits=(3, 1000))


async def test_writes_interleaved_with_searches_past_the_threshold(graph_store: Any) -> None:
    """A deleted record is never returned, an updated one is found under its new
    vector, delete_scope empties what it names: checked after every step."""
    await _writes_and_searches(graph_store, "o-" + uuid.uuid4().hex[:8], 200, 31)


@pytest.fixture(params=BACKENDS)
async def crossing_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    options = IndexOptions(exact_threshold=40, ef_search=1000, m=8, ef_construction=64)
    store = await _open(str(request.param), request, tmp_path, options)
    yield store
    await _close(store)


async def test_crossing_the_threshold_back_and_forth(crossing_store: Any) -> None:
    """An owner growing past the threshold (40) and shrinking below it again,
    again and again: every search, on either side, is the exact answer."""
    store = crossing_store
    owner = "o-" + uuid.uuid4().hex[:8]
    rows = _adversarial_rows(120, 41)
    rng = np.random.default_rng(42)
    mirror = Mirror()
    queries = [rows[0], rng.standard_normal(DIM).astype(np.float32)]
    next_id = 0
    for size in (30, 45, 38, 60, 20, 41, 40, 90, 10):
        while len(mirror.rows) < size:
            ns, kind = _layout(next_id)
            v = rows[next_id % len(rows)]
            await store.add([rec(f"r{next_id:04d}", owner, v, namespace=ns, kind=kind)])
            mirror.rows[f"r{next_id:04d}"] = (v, ns, kind)
            next_id += 1
        if len(mirror.rows) > size:
            doomed = rng.choice(sorted(mirror.rows), len(mirror.rows) - size, replace=False)
            for id_ in doomed.tolist():
                assert await store.delete(owner, id_)
                del mirror.rows[id_]
        await _agree(store, owner, mirror, queries, f"size {size}", limits=(5, 1000))


@pytest.fixture
async def either_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """Each backend through its graph and (memory, SQLite) its exact path."""
    name, _, path = str(request.param).partition("-")
    store = await _open(name, request, tmp_path, None if path == "exact" else GRAPH)
    yield store
    await _close(store)


@pytest.mark.parametrize("either_store", [*BACKENDS, "memory-exact", "sqlite-exact"], indirect=True)
@pytest.mark.parametrize("scale", [2e-15, 5e14])
async def test_small_and_large_norms_score_as_their_direction(
    either_store: Any, scale: float
) -> None:
    """A vector's score is the cosine of its direction whatever its norm within
    the accepted range (1e-15 to 1e15), as a record and as a query; a zero
    vector scores 0. PostgreSQL, Qdrant and Milvus scored a record of norm
    1e-30 as a zero vector and one of 1e30 as garbage, memory:// and SQLite a
    subnormal one (1e-39) as NaN: such norms are refused now (below)."""
    store = either_store
    owner = "o-" + uuid.uuid4().hex[:8]
    rng = np.random.default_rng(51)
    unit = rng.standard_normal((40, DIM))
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    rows = unit.copy()
    rows[::2] *= scale
    rows[5] = 0.0
    rows = rows.astype(np.float32)
    mirror = {f"r{i:04d}": (unit[i] if i != 5 else rows[5]) for i in range(len(rows))}
    await store.add([rec(f"r{i:04d}", owner, v, at=i) for i, v in enumerate(rows)])
    for q in [unit[0], -unit[3] * scale, rng.standard_normal(DIM)]:
        q32 = np.asarray(q, dtype=np.float32)
        for limit in (1, 5, 40):
            got = pairs(await store.search(owner, q32, limit=limit))
            check(got, oracle(mirror, q32, limit), f"scale {scale} limit {limit}")


@pytest.mark.parametrize("either_store", BACKENDS, indirect=True)
async def test_norms_no_engine_can_score_are_refused(either_store: Any) -> None:
    """A non-zero vector of norm below 1e-15 (down to subnormal components) or
    above 1e15 raises `InvalidInput` naming the field, as a record (add,
    update) and as a query, on every backend; nothing is written."""
    store = either_store
    owner = "o-" + uuid.uuid4().hex[:8]
    unit = np.zeros(DIM, dtype=np.float32)
    unit[:4] = 0.5
    await store.add([rec("keep", owner, unit)])
    for scale in (1e-16, 1e-30, 1e-42, 1e16, 1e30):
        bad = (unit * np.float32(scale)).astype(np.float32)
        assert bad.any()
        assert np.isfinite(bad).all()
        with pytest.raises(InvalidInput) as raised:
            await store.add([rec("bad", owner, bad)])
        assert raised.value.field == "record.vector", raised.value
        with pytest.raises(InvalidInput):
            await store.update(rec("keep", owner, bad))
        with pytest.raises(InvalidInput) as raised:
            await store.search(owner, bad, limit=3)
        assert raised.value.field == "query vector", raised.value
    assert await store.get(owner, "bad") is None
    kept = await store.get(owner, "keep")
    assert kept is not None
    assert np.array_equal(kept.vector, unit)
