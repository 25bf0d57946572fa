"""SQLite-specific behaviour beyond the contract: embedding-space tables, the
matrix cache across handles, keyword query safety, literal prefixes, expiry purge,
schema versioning, error mapping and the worker thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.sqlite import (
    SCHEMA_VERSION,
    SqliteCache,
    SqliteEventLog,
    SqliteLeaseStore,
    SqliteMemoryStore,
    open_sqlite,
    open_stores,
    path_from_url,
)
from agent_memory.domain.errors import (
    BackendUnavailable,
    ConfigurationError,
    DimensionMismatch,
    InvalidInput,
    StoreClosed,
)
from agent_memory.domain.lexical import query_terms
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

SPACE = EmbeddingSpace(model="test-model", dimension=4)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
PROP = settings(max_examples=40, deadline=None)


class FakeClock:
    def __init__(self) -> None:
        self.t = T0

    def now(self) -> datetime:
        return self.t


def rec(
    id: str,
    vector: list[float],
    *,
    owner: str = "o",
    content: str = "",
    context: str = "",
    namespace: str = "ns",
    kind: str = "note",
    at: int = 0,
) -> MemoryRecord:
    return MemoryRecord(
        id=id,
        owner=owner,
        namespace=namespace,
        kind=kind,
        content=content or f"content {id}",
        context=context,
        vector=np.array(vector, dtype=np.float32),
        created_at=T0 + timedelta(seconds=at),
        updated_at=T0 + timedelta(seconds=at),
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "m.db"


@pytest.fixture
async def store(db: Path) -> AsyncIterator[SqliteMemoryStore]:
    handle = SqliteMemoryStore(db, SPACE)
    yield handle
    await handle.close()


@pytest.fixture
async def leases(db: Path) -> AsyncIterator[SqliteLeaseStore]:
    handle = SqliteLeaseStore(db)
    yield handle
    await handle.close()


@pytest.fixture
async def cache(db: Path) -> AsyncIterator[SqliteCache]:
    handle = SqliteCache(db)
    yield handle
    await handle.close()


def _tables(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {r[0] for r in rows}


# ---------------------------------------------------------------- spaces


async def test_same_identity_reuses_its_table_across_reopen(db: Path) -> None:
    first = SqliteMemoryStore(db, SPACE)
    await first.add([rec("a", [1, 0, 0, 0])])
    await first.close()
    again = SqliteMemoryStore(db, EmbeddingSpace(model="test-model", dimension=4))
    hits = await again.search("o", np.array([1, 0, 0, 0], dtype=np.float32))
    assert [h.record.id for h in hits] == ["a"]
    assert hits[0].score == pytest.approx(1.0)
    await again.close()


async def test_new_identity_starts_empty_and_old_table_is_kept(db: Path) -> None:
    old = SqliteMemoryStore(db, SPACE)
    await old.add([rec("a", [1, 0, 0, 0], content="zebra")])
    await old.close()

    revised = EmbeddingSpace(model="test-model", dimension=4, revision="v2")
    new = SqliteMemoryStore(db, revised)
    assert await new.get("o", "a") is None
    assert await new.search("o", np.ones(4, dtype=np.float32)) == []
    assert await new.search_text("o", "zebra") == []
    assert (await new.list("o")).records == ()
    await new.add([rec("a", [0, 1, 0, 0])])  # the same id is free in the new space
    await new.close()

    bigger = SqliteMemoryStore(db, EmbeddingSpace(model="test-model", dimension=8))
    with pytest.raises(DimensionMismatch):
        await bigger.add([rec("x", [1, 0, 0, 0])])
    assert await bigger.search("o", np.ones(8, dtype=np.float32)) == []
    await bigger.close()

    back = SqliteMemoryStore(db, SPACE)  # the old identity is never adopted nor dropped
    got = await back.get("o", "a")
    assert got is not None
    assert got.vector.tolist() == [1, 0, 0, 0]
    await back.close()
    assert {SPACE.identity, revised.identity} <= {
        t.removeprefix("records_") for t in _tables(db) if not t.endswith("_terms")
    }


async def test_unprovable_space_keeps_its_name_and_warns(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    space = EmbeddingSpace(model="served-model", dimension=4, provable=False)
    s = SqliteMemoryStore(db, space)
    with caplog.at_level("WARNING", logger="agent_memory.adapters.sqlite"):
        await s.add([rec("a", [1, 0, 0, 0])])
        await s.get("o", "a")
    warnings = [r for r in caplog.records if "cannot be proven" in r.getMessage()]
    assert len(warnings) == 1
    assert space.identity in warnings[0].getMessage()
    await s.close()


async def test_terms_are_reindexed_when_the_lexical_rules_change(db: Path) -> None:
    first = SqliteMemoryStore(db, SPACE)
    await first.add([rec("a", [1, 0, 0, 0], content="painted zebras", context="savanna")])
    assert [h.record.id for h in await first.search_text("o", "zebra")] == ["a"]
    await first.close()
    # Simulate a file indexed under other rules: stale terms, another fingerprint.
    with sqlite3.connect(db) as conn:
        table = conn.execute("SELECT records_table FROM spaces").fetchone()[0]
        conn.execute(f'UPDATE "{table}" SET terms = \'["stale"]\', n_terms = 1')
        conn.execute("UPDATE spaces SET lexical = 'older-rules'")
    again = SqliteMemoryStore(db, SPACE)
    hits = await again.search_text("o", "zebra savanna")
    assert [h.record.id for h in hits] == ["a"]
    assert await again.search_text("o", "stale") == []
    oracle = InMemoryMemoryStore(SPACE)
    await oracle.add([rec("a", [1, 0, 0, 0], content="painted zebras", context="savanna")])
    assert hits[0].score == (await oracle.search_text("o", "zebra savanna"))[0].score
    await again.close()


# ---------------------------------------------------------------- matrix cache


async def test_write_through_other_handle_invalidates_matrix_cache(db: Path) -> None:
    a = SqliteMemoryStore(db, SPACE)
    b = SqliteMemoryStore(db, SPACE)
    q = np.array([1, 0, 0, 0], dtype=np.float32)
    await a.add([rec("x", [1, 0, 0, 0]), rec("y", [0, 1, 0, 0])])
    assert [h.record.id for h in await a.search("o", q)] == ["x", "y"]  # cache warm

    await b.add([rec("z", [1, 0.1, 0, 0])])
    assert [h.record.id for h in await a.search("o", q)] == ["x", "z", "y"]

    await b.update(rec("y", [1, 0, 0, 0.01]))
    assert [h.record.id for h in await a.search("o", q)][:2] == ["x", "y"]

    assert await b.delete("o", "x")
    assert "x" not in [h.record.id for h in await a.search("o", q)]

    assert await b.delete_scope("o") == 2
    assert await a.search("o", q) == []
    await a.close()
    await b.close()


async def test_cache_is_per_owner_and_bounded(db: Path) -> None:
    s = SqliteMemoryStore(db, SPACE, matrix_cache_owners=2)
    q = np.ones(4, dtype=np.float32)
    for owner in ("o1", "o2", "o3"):
        await s.add([rec("r", [1, 1, 1, 1], owner=owner)])
        assert [h.record.owner for h in await s.search(owner, q)] == [owner]
    assert len(s._cache) == 2
    assert [h.record.owner for h in await s.search("o1", q)] == ["o1"]  # reloaded
    await s.close()


async def test_filters_run_in_sql_over_cached_rows(store: SqliteMemoryStore) -> None:
    await store.add(
        [
            rec("a", [1, 0, 0, 0], namespace="n1", kind="k1"),
            rec("b", [1, 0, 0, 0], namespace="n2", kind="k1"),
            rec("c", [1, 0, 0, 0], namespace="n1", kind="k2"),
        ]
    )
    q = np.array([1, 0, 0, 0], dtype=np.float32)
    assert [h.record.id for h in await store.search("o", q, namespace="n1")] == ["a", "c"]
    assert [h.record.id for h in await store.search("o", q, kinds=["k1"])] == ["a", "b"]
    got = await store.search("o", q, namespace="n1", kinds=["k2"])
    assert [h.record.id for h in got] == ["c"]


# ---------------------------------------------------------------- keyword search


async def test_keyword_ranking_ties_and_sync(store: SqliteMemoryStore) -> None:
    await store.add(
        [
            rec("b", [1, 0, 0, 0], content="the zebra grazes"),
            rec("a", [1, 0, 0, 0], content="the zebra grazes"),
            rec("c", [1, 0, 0, 0], content="zebra zebra zebra stripes"),
            rec("d", [1, 0, 0, 0], content="an elephant", context="a zebra nearby"),
            rec("e", [1, 0, 0, 0], content="nothing here"),
        ]
    )
    hits = await store.search_text("o", "Zebra!")
    ids = [h.record.id for h in hits]
    assert ids[0] == "c"
    assert set(ids) == {"a", "b", "c", "d"}
    assert ids.index("a") + 1 == ids.index("b")  # equal scores: id ascending
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)

    await store.update(rec("c", [1, 0, 0, 0], content="a lion"))
    assert "c" not in [h.record.id for h in await store.search_text("o", "zebra")]
    assert [h.record.id for h in await store.search_text("o", "lion")] == ["c"]
    await store.delete("o", "c")
    assert await store.search_text("o", "lion") == []
    await store.delete_scope("o", namespace="ns")
    assert await store.search_text("o", "zebra") == []


@pytest.mark.parametrize(
    "query",
    [
        'zebra" OR "lion',
        "lion OR zebra*",
        "content:lion",
        "NEAR(lion zebra)",
        "(lion",
        "^lion",
        "lion -zebra",
        '"',
        "*",
        "AND",
        "-- ; DROP TABLE x",
        "   ",
        "",
    ],
)
async def test_fts_syntax_in_queries_never_errors_or_widens(
    store: SqliteMemoryStore, query: str
) -> None:
    await store.add([rec("z", [1, 0, 0, 0], content="zebra"), rec("q", [1, 0, 0, 0], content="x")])
    hits = await store.search_text("o", query)
    terms = set(query_terms(query))
    for hit in hits:
        assert terms & set(hit.record.content.split()), (query, hit.record.id)


@PROP
@given(query=st.text(max_size=40))
@example(query='" OR ""')
@example(query="\x00zebra")
@example(query="İstanbul ǅ ß ﬁ")
async def test_any_query_text_is_safe(store: SqliteMemoryStore, query: str) -> None:
    if await store.get("o", "z") is None:
        await store.add([rec("z", [1, 0, 0, 0], content="zebra crossing")])
    stored = query.replace("\x00", "")  # NUL is refused as stored text on every backend
    await store.add([rec(uuid.uuid4().hex, [1, 0, 0, 0], owner="other", content=stored)])
    try:
        hits = await store.search_text("o", query, limit=5)
    except InvalidInput:
        assert "\x00" in query  # the only text a query may be refused for
        return
    assert all(h.record.owner == "o" for h in hits)


_WORDS = st.sampled_from(["zebra", "Zebra", "lion", "gnu", "İz", "straße", "x_y", "a1", "7"])
_TEXT = st.lists(_WORDS, max_size=6).map(" ".join)


@PROP
@given(
    docs=st.lists(
        st.tuples(_TEXT, _TEXT, st.sampled_from(["n1", "n2"]), st.sampled_from(["o", "p"])),
        max_size=8,
    ),
    query=_TEXT,
    namespace=st.none() | st.just("n1"),
    limit=st.integers(1, 5),
)
async def test_keyword_scores_equal_the_in_memory_oracle(
    store: SqliteMemoryStore,
    docs: list[tuple[str, str, str, str]],
    query: str,
    namespace: str | None,
    limit: int,
) -> None:
    """Same hits, same order, same scores as the in-memory adapter; BM25 statistics
    come from the owner's filtered records only (owner "p" never changes "o")."""
    tag = uuid.uuid4().hex  # one file for every example: fresh owners each time
    records = [
        rec(f"r{i}", [1, 0, 0, 0], owner=f"{o}-{tag}", content=c or "-", context=x, namespace=ns)
        for i, (c, x, ns, o) in enumerate(docs)
    ]
    oracle = InMemoryMemoryStore(SPACE)
    await store.add(records)
    await oracle.add(records)
    got = await store.search_text(f"o-{tag}", query, limit=limit, namespace=namespace)
    want = await oracle.search_text(f"o-{tag}", query, limit=limit, namespace=namespace)
    assert [(h.record.id, h.score) for h in got] == [(h.record.id, h.score) for h in want]
    await oracle.close()


async def test_keyword_search_validates(store: SqliteMemoryStore) -> None:
    with pytest.raises(InvalidInput):
        await store.search_text("o", 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        await store.search_text("o", "x", limit=0)
    with pytest.raises(InvalidInput):
        await store.search_text(" ", "x")


# ---------------------------------------------------------------- literal prefixes

# NUL is refused as text on every backend (InvalidInput), so keys never hold it.
_KEY_CHARS = st.sampled_from(["a", "b", "%", "_", "\\", "é", "[", "*", "\U0001f600"])
_KEYS = st.text(_KEY_CHARS, min_size=1, max_size=4)


@PROP
@given(keys=st.lists(_KEYS, min_size=1, max_size=8, unique=True), prefix=st.text(_KEY_CHARS))
@example(keys=["a%b", "axb", "a_c"], prefix="a%")
@example(keys=["a%b", "axb", "a_c"], prefix="a_")
async def test_lease_scan_and_cache_delete_prefix_are_literal(
    leases: SqliteLeaseStore, cache: SqliteCache, keys: list[str], prefix: str
) -> None:
    scope = f"s-{uuid.uuid4().hex}"  # one file for every example: a fresh scope each time
    for k in keys:
        assert await leases.acquire(scope, k, "me", timedelta(seconds=30)) is not None
        await cache.put(scope, k, k.encode())
    expected = sorted(k for k in keys if k.startswith(prefix))
    assert [x.key for x in await leases.scan(scope, prefix)] == expected
    assert await cache.delete_prefix(scope, prefix) == len(expected)
    for k in keys:
        assert (await cache.get(scope, k) is None) == k.startswith(prefix)


# ---------------------------------------------------------------- leases, cache expiry


async def test_tokens_grow_across_handles_release_and_expiry(db: Path) -> None:
    clock = FakeClock()
    a = SqliteLeaseStore(db, clock=clock)
    b = SqliteLeaseStore(db, clock=clock)
    first = await a.acquire("s", "k", "A", timedelta(seconds=1))
    assert first is not None
    assert await b.acquire("s", "k", "B", timedelta(seconds=1)) is None
    clock.t += timedelta(seconds=2)  # A's lease expired
    second = await b.acquire("s", "k", "B", timedelta(seconds=1))
    assert second is not None
    assert second.token > first.token
    assert await b.release("s", "k", "B")
    third = await a.acquire("s", "k", "A", timedelta(seconds=1))
    assert third is not None
    assert third.token > second.token
    await a.close()
    await b.close()


async def test_expired_cache_rows_are_never_returned_and_purged(db: Path) -> None:
    clock = FakeClock()
    cache = SqliteCache(db, clock=clock)
    await cache.put("s", "short", b"1", ttl=timedelta(seconds=1))
    await cache.put("s", "other", b"2", ttl=timedelta(seconds=1))
    await cache.put("s", "keep", b"3")
    clock.t += timedelta(seconds=1)  # expiry is inclusive
    assert await cache.get("s", "short") is None
    assert not await cache.delete("s", "other")
    await cache.put("s", "again", b"4", ttl=timedelta(seconds=1))
    clock.t += timedelta(seconds=5)
    assert await cache.purge_expired() == 1
    with sqlite3.connect(db) as conn:
        left = conn.execute("SELECT key FROM cache ORDER BY key").fetchall()
    assert left == [("keep",)]
    assert await cache.get("s", "keep") == b"3"
    await cache.close()


# ---------------------------------------------------------------- file, errors, lifecycle


async def test_wal_schema_version_and_newer_file_refused(db: Path) -> None:
    s = SqliteEventLog(db)
    await s.ping()
    await s.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    newer = SqliteEventLog(db)
    with pytest.raises(BackendUnavailable, match="newer"):
        await newer.ping()
    await newer.close()


async def test_lock_held_past_busy_timeout_is_backend_unavailable(db: Path) -> None:
    s = SqliteMemoryStore(db, SPACE, busy_timeout=0.2)
    await s.ping()
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        with pytest.raises(BackendUnavailable, match="locked"):
            await s.add([rec("a", [1, 0, 0, 0])])
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        task.cancel()
    assert ticks >= 5, "the event loop was blocked while sqlite waited for the lock"
    await s.add([rec("a", [1, 0, 0, 0])])  # the handle recovers once the lock is gone
    assert await s.get("o", "a") is not None
    await s.close()


async def test_unopenable_file_is_backend_unavailable(tmp_path: Path) -> None:
    s = SqliteCache(tmp_path)  # a directory, not a file
    with pytest.raises(BackendUnavailable):
        await s.ping()
    await s.close()


@pytest.mark.parametrize("path", ["", "   ", ":memory:", "file:x.db?mode=memory", 3])
def test_bad_paths_are_rejected(path: object) -> None:
    with pytest.raises(InvalidInput, match="path"):
        SqliteCache(path)  # type: ignore[arg-type]


def test_bad_options_are_rejected(db: Path) -> None:
    with pytest.raises(InvalidInput, match="synchronous"):
        SqliteCache(db, synchronous="OFF")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="busy_timeout"):
        SqliteCache(db, busy_timeout=0)
    with pytest.raises(InvalidInput, match="retention"):
        SqliteEventLog(db, retention=timedelta(0))


async def test_close_stops_the_worker_thread_and_rejects_calls(db: Path) -> None:
    before = threading.active_count()
    stores = open_sqlite(db, space=SPACE)
    await stores.store.ping()
    await stores.events.ping()
    await stores.leases.ping()
    await stores.cache.ping()
    assert threading.active_count() == before + 4
    await stores.close()
    await stores.close()
    for _ in range(100):
        if threading.active_count() == before:
            break
        await asyncio.sleep(0.01)
    assert threading.active_count() == before
    with pytest.raises(StoreClosed):
        await stores.cache.get("s", "k")
    # The last connection to close checkpoints the WAL into the file and removes it.
    assert not db.with_name(db.name + "-wal").exists()


async def test_open_sqlite_as_context_manager_shares_one_file(db: Path) -> None:
    async with open_sqlite(db, space=SPACE) as stores:
        await stores.cache.put("s", "k", b"v")
        await stores.store.add([rec("a", [1, 0, 0, 0])])
    with pytest.raises(StoreClosed):
        await stores.store.get("o", "a")
    async with open_sqlite(db, space=SPACE) as again:
        assert await again.cache.get("s", "k") == b"v"
        assert await again.store.get("o", "a") is not None


async def test_constructing_does_no_io(tmp_path: Path) -> None:
    before = threading.active_count()
    path = tmp_path / "lazy" / "x.db"
    stores = open_sqlite(path, space=SPACE)
    assert not path.parent.exists()
    assert threading.active_count() == before
    await stores.store.ping()  # the first call creates the directory and the file
    assert path.exists()
    await stores.close()


# ---------------------------------------------------------------- URLs


def test_path_from_url() -> None:
    assert path_from_url("sqlite:///abs/x.db") == ("/abs/x.db", {})
    assert path_from_url("sqlite:////abs/x%20y.db?synchronous=FULL") == (
        "/abs/x y.db",
        {"synchronous": "FULL"},
    )
    assert path_from_url("sqlite:rel/x.db") == ("rel/x.db", {})
    for bad in ("sqlite://host/x.db", "sqlite:///", "sqlite:", "redis://x", "sqlite:///x?n=1"):
        with pytest.raises(ConfigurationError):
            path_from_url(bad)


async def test_open_stores_from_url(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/u.db?busy_timeout=2&synchronous=full"
    parts = await open_stores(url, space=SPACE, retention=timedelta(days=1), deployment="d")
    assert parts["details"]["synchronous"] == "FULL"
    assert parts["events"].retention == timedelta(days=1)
    await parts["store"].add([rec("a", [1, 0, 0, 0])])
    for name in ("store", "events", "leases", "cache"):
        await parts[name].close()
    with pytest.raises(ConfigurationError):
        await open_stores(f"sqlite:///{tmp_path}/u.db?synchronous=off", space=SPACE)
