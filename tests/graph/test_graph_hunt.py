"""Hunt: graph memory where it meets validation, walks, checkpoints, forget and portability."""

from __future__ import annotations

import sqlite3
import unicodedata
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

import agent_memory.adapters.postgres.triples as pg_triples
import agent_memory.adapters.sqlite.triples as sqlite_triples
import agent_memory.domain.triples as domain_triples
from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import InMemoryTripleStore
from agent_memory.adapters.postgres import PostgresDatabase
from agent_memory.adapters.postgres.triples import PostgresTripleStore
from agent_memory.adapters.sqlite.triples import SqliteTripleStore
from agent_memory.bootstrap import Settings, open_stores
from agent_memory.bootstrap.connect import connect
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.triples import Triple
from agent_memory.domain.validation import MAX_ID_BYTES
from agent_memory.portability import Ports, export, import_file, open_ports
from agent_memory.ports.storage import CacheListing, TripleStore
from agent_memory.services.graph_memory import (
    CHECKPOINT_SCOPE,
    GraphMemory,
    checkpoint_key,
    forget_checkpoints,
)
from agent_memory.services.user_memory import UserMemory
from graph.test_kv_cache import _Buckets
from portability.helpers import settings as portable_settings
from services.test_forget_backends import EMB, SECRET, USER, Dump, backend

__all__ = ["backend"]  # the fixture (memory, sqlite, redis, postgres) of the forget tests

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _t(s: str, p: str, o: str, *, owner: str = "o", loop: str = "l", at: int = 0) -> Triple:
    return Triple(
        owner=owner,
        loop=loop,
        subject=s,
        predicate=p,
        object=o,
        created_at=T0 + timedelta(seconds=at),
    )


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def triples(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TripleStore]:
    store: Any
    if request.param == "memory":
        store = InMemoryTripleStore()
    elif request.param == "sqlite":
        store = SqliteTripleStore(tmp_path / "t.db")
    else:
        url: str = request.getfixturevalue("postgres_url")
        schema = f"hunt_{uuid.uuid4().hex[:12]}"
        db = PostgresDatabase(url, schema=schema, min_size=1, max_size=4)
        await db.open()
        store = PostgresTripleStore(db, owns_database=True)
    yield store
    await store.close()
    if request.param == "postgres":
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.parametrize("bad", ["a\x00b", "\x00", "a\ud800"])
@pytest.mark.parametrize("field", ["subject", "predicate", "object", "loop"])
async def test_nul_in_a_query_filter_is_invalid_input_naming_it(
    triples: TripleStore, field: str, bad: str
) -> None:
    """No triple holds NUL, so a filter with one is bad input: `InvalidInput`
    naming the filter on every backend (PostgreSQL used to fail with field
    "text", the others answered [])."""
    await triples.add([_t("a", "b", "c")])
    kwargs: dict[str, Any] = {field: bad}
    with pytest.raises(InvalidInput) as caught:
        await triples.query("o", **kwargs)
    assert caught.value.field == field


@pytest.mark.parametrize("bad", ["a\x00", "\ud800"])
async def test_nul_in_a_walk_start_is_invalid_input_naming_it(
    triples: TripleStore, bad: str
) -> None:
    await triples.add([_t("a", "b", "c")])
    with pytest.raises(InvalidInput) as caught:
        await triples.neighbours("o", bad)
    assert caught.value.field == "node"


_META = [
    *"%_*?[]{}|@-:\\'\"`$^.()+ \t\n",
    "\u00e9",
    "e\u0301",
    "\u00c9",
    "ß",
    "SS",
    "ﬁ",
    "İ",
    "i̇",
    "\u212b",
    "\u00c5",
]
_term = st.one_of(
    st.lists(st.sampled_from(_META + list("aAbB")), min_size=1, max_size=6).map("".join),
    st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
        min_size=1,
        max_size=8,
    ),
).filter(lambda s: s.strip() != "")


def _variants(s: str) -> list[str]:
    out = {
        s,
        s.upper(),
        s.lower(),
        s.casefold(),
        unicodedata.normalize("NFC", s),
        unicodedata.normalize("NFD", s),
        unicodedata.normalize("NFKC", s),
        s + "%",
        s[:-1] + "%",
        s[:-1] + "_",
        s.strip() or s,
        " " + s,
        s + "*",
        s[:1],
    }
    return [v for v in out if v.strip()]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_adversarial_terms_match_oracle(triples: TripleStore, data: st.DataObject) -> None:
    owner = f"h-{uuid.uuid4().hex}"
    terms = data.draw(st.lists(_term, min_size=1, max_size=5, unique=True))
    facts = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(terms),
                st.sampled_from(terms),
                st.sampled_from(terms),
                st.sampled_from(["l1", "L1", "l%"]),
                st.integers(0, 2),
            ),
            max_size=10,
        )
    )
    batch = [_t(s, p, o, owner=owner, loop=lp, at=at) for s, p, o, lp, at in facts]
    oracle = InMemoryTripleStore()
    assert await triples.add(batch) == await oracle.add(batch)
    probes = sorted({v for t in terms for v in _variants(t)})
    for probe in probes:
        for field in ("subject", "predicate", "object"):
            kw: dict[str, Any] = {field: probe}
            got = await triples.query(owner, **kw)
            want = await oracle.query(owner, **kw)
            assert got == want, (field, probe)
        for loop in (None, "l1"):
            for hops in (1, 3):
                got_w = await triples.neighbours(owner, probe, hops=hops, loop=loop, limit=7)
                want_w = await oracle.neighbours(owner, probe, hops=hops, loop=loop, limit=7)
                assert got_w == want_w, (probe, hops, loop)
    for lp in ("l1", "L1", "l%", "l_"):
        assert await triples.query(owner, loop=lp) == await oracle.query(owner, loop=lp)
    await triples.delete_scope(owner)


# -- checkpoints racing a forget --------------------------------------------------


class _Hooked:
    """Stands in for a port: after the `at`-th awaited call of `method`, awaits `hook()`."""

    def __init__(self, inner: Any, method: str, at: int, hook: Any) -> None:
        self._inner, self._method, self._at, self._hook = inner, method, at, hook
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != self._method:
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            out = await attr(*args, **kwargs)
            self.calls += 1
            if self.calls == self._at:
                await self._hook()
            return out

        return call


async def test_checkpoint_racing_forget_and_a_new_fact_quotes_no_erased_triple(
    backend: tuple[str, Settings, Dump | None, TripleStore],
) -> None:
    """The forget lands between the checkpoint's read of the loop's triples and
    its writes, and a concurrent extraction stores a new fact for the loop right
    after the forget. The checkpoint must not keep the erased decision."""
    url, settings, dump, triples = backend
    clock = SystemClock()
    stores = await open_stores(url, space=EMB.space, settings=settings)
    assert stores.cache is not None
    users = UserMemory(
        store=stores.store, embedder=EMB, clock=clock, cache=stores.cache, triples=triples
    )
    try:
        now = datetime.now(UTC)
        await triples.add([Triple(USER, "loop", "user", "decided", f"on {SECRET}", now)])

        async def forget_then_new_fact() -> None:
            receipt = await users.forget(USER)
            assert receipt.complete, receipt.failures
            later = datetime.now(UTC) + timedelta(seconds=1)
            await triples.add([Triple(USER, "loop", "agent", "read", "src/new.py", later)])

        graph = GraphMemory(
            _Hooked(triples, "query", 1, forget_then_new_fact), stores.cache, None, clock=clock
        )
        await graph.checkpoint(USER, "loop", summary="step")
        last = await GraphMemory(triples, stores.cache, None, clock=clock).last_checkpoint(
            USER, "loop"
        )
        assert last is None or all(SECRET not in d for d in last.decisions), last
        if dump is not None:
            assert SECRET not in await dump()
    finally:
        await stores.close()


@pytest.mark.parametrize("source", ["e" * 415, "é" * 256, "x" * 512, "latest", "a/b", "evt-1"])
async def test_checkpoint_of_any_valid_event_id_is_saved(
    backend: tuple[str, Settings, Dump | None, TripleStore], source: str
) -> None:
    """The processor passes the event's id (any id of up to MAX_ID_BYTES) as the
    checkpoint's source and id: every one is saved and read back as the latest."""
    url, settings, _dump, triples = backend
    clock = SystemClock()
    stores = await open_stores(url, space=EMB.space, settings=settings)
    assert stores.cache is not None
    try:
        graph = GraphMemory(triples, stores.cache, None, clock=clock)
        first, failures = await graph.checkpoint("o", "loop", summary="first", source="evt-0")
        assert first is not None, failures
        cp, failures = await graph.checkpoint("o", "loop", summary="s", source=source)
        assert failures == ()
        assert cp is not None
        assert (cp.id, cp.source) == (source, source)
        assert await graph.last_checkpoint("o", "loop") == cp
        if isinstance(stores.cache, CacheListing):  # each keeps its own copy, plus `latest`
            entries = await stores.cache.entries(CHECKPOINT_SCOPE, checkpoint_key("o", "loop"))
            assert len(entries) == 3, [e.key for e in entries]
        receipt = await UserMemory(
            store=stores.store, embedder=EMB, clock=clock, cache=stores.cache, triples=triples
        ).forget("o")
        assert receipt.complete, receipt.failures
        assert await graph.last_checkpoint("o", "loop") is None
    finally:
        await stores.close()


async def test_filters_longer_than_any_term_match_nothing(triples: TripleStore) -> None:
    await triples.add([_t("a" * 512, "b", "c")])
    assert await triples.query("o", subject="a" * 5000) == []
    assert await triples.neighbours("o", "a" * 5000, hops=2) == []
    assert len(await triples.query("o", subject="a" * 512)) == 1


# -- concurrent checkpoint writers -------------------------------------------------


class _Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


async def test_a_checkpoint_written_late_does_not_replace_a_newer_latest(
    backend: tuple[str, Settings, Dump | None, TripleStore],
) -> None:
    """Two writers checkpoint one loop: A builds its checkpoint first, then stalls
    after writing its own copy; B checkpoints the loop completely meanwhile. When
    A goes on, `latest` must stay B's (the newer one), on every cache."""
    url, settings, _dump, triples = backend
    stores = await open_stores(url, space=EMB.space, settings=settings)
    assert stores.cache is not None
    cache = stores.cache
    try:
        start = datetime.now(UTC).replace(microsecond=0)
        clock_b = _Clock(start + timedelta(seconds=5))
        done: list[Any] = []

        async def b_checkpoints() -> None:
            graph_b = GraphMemory(triples, cache, None, clock=clock_b)
            done.append(await graph_b.checkpoint("o", "loop", summary="B", source="b"))

        graph_a = GraphMemory(
            triples, _Hooked(cache, "put", 1, b_checkpoints), None, clock=_Clock(start)
        )
        cp_a, failures = await graph_a.checkpoint("o", "loop", summary="A", source="a")
        assert cp_a is not None
        assert failures == ()
        cp_b, failures = done[0]
        assert cp_b is not None
        assert failures == ()
        last = await GraphMemory(triples, cache, None, clock=clock_b).last_checkpoint("o", "loop")
        assert last == cp_b, last
        # and one instance whose clock lags another's does not move `latest` back
        lagging = GraphMemory(triples, cache, None, clock=_Clock(start + timedelta(seconds=1)))
        cp_c, failures = await lagging.checkpoint("o", "loop", summary="C", source="c")
        assert cp_c is not None
        assert failures == ()
        assert await lagging.last_checkpoint("o", "loop") == cp_b
    finally:
        await stores.close()


# -- export / import ---------------------------------------------------------------


_NASTY = [
    "a%",
    "a_",
    "ab",
    "*",
    "?",
    "[x]",
    "{a}",
    "a|b",
    "@x",
    "-x",
    "a:b",
    "\\",
    "'\"`",
    "'; DROP TABLE graph_triples; --",
    "\u00e9",
    "e\u0301",
    "\u00c9",
    "ß",
    "SS",
    "İ",
    "tab\tnew\nline\r",
    " padded ",
    "A",
    "a",
    "a\u2028b",
    "\ufeff",
    "🧠",
    "\U0010ffff",
    "日本語" * 40,
    "é" * 256,
    "x" * MAX_ID_BYTES,
]


def _nasty_triples(owner: str) -> list[Triple]:
    out = []
    for i, term in enumerate(_NASTY):
        other = _NASTY[(i * 7 + 3) % len(_NASTY)]
        out.append(
            Triple(
                owner=owner,
                loop=_NASTY[(i * 5 + 1) % len(_NASTY)],
                subject=term,
                predicate=other,
                object=_NASTY[(i * 3 + 2) % len(_NASTY)],
                created_at=T0 + timedelta(microseconds=i * 1_000_001 + 7),
                source=term[:500],
            )
        )
    return out


@pytest.mark.parametrize("target", ["sqlite", "postgres"])
async def test_adversarial_triples_and_checkpoints_survive_export_and_import(
    tmp_path: Path, target: str, request: pytest.FixtureRequest
) -> None:
    """Triples and checkpoints with adversarial terms, ids and owners go memory ->
    file -> backend -> file -> memory and come back equal; every filter still
    matches exactly after the trip."""
    s = portable_settings(tmp_path)
    owners = ["ana", "bo:{x}*", "é" * 200]
    want = [t for owner in owners for t in _nasty_triples(owner)]
    mem = await connect("memory://", settings=s)
    store = InMemoryTripleStore()
    clock = _Clock(T0)
    try:
        graph = GraphMemory(store, mem.cache, None, clock=clock)
        await store.add(want)
        checkpoints = {}
        for owner in owners:
            for loop in ("l%", "l_", _NASTY[-1]):
                cp, failures = await graph.checkpoint(
                    owner, loop, summary=f"s {owner}", source="é" * 250
                )
                assert cp is not None, failures
                checkpoints[(owner, loop)] = cp
        src = Ports(
            store=mem.store,
            events=mem.events,
            cache=mem.cache,
            leases=mem.leases,
            triples=store,
            backend="memory",
        )
        path = str(tmp_path / "out.jsonl")
        await export(src, path)
    finally:
        await mem.close()
    url = (
        f"sqlite:///{tmp_path}/t.db"
        if target == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    done = await import_file(url, path, settings=s)
    assert done.complete, done.describe()
    assert done.written["triple"] == len(want)
    async with open_ports(url, space=mem.store.space, settings=s) as dst:
        assert dst.triples is not None
        assert dst.cache is not None
        oracle = InMemoryTripleStore()
        await oracle.add(want)
        for owner in owners:
            got = await dst.triples.query(owner, limit=1000)
            assert got == await oracle.query(owner, limit=1000)
            for term in ("a%", "a_", "a", "A", "e\u0301", "\u00e9", "*", "x" * MAX_ID_BYTES):
                for field in ("subject", "predicate", "object", "loop"):
                    kw: dict[str, Any] = {field: term}
                    assert await dst.triples.query(owner, **kw) == await oracle.query(owner, **kw)
                assert await dst.triples.neighbours(owner, term, hops=3) == (
                    await oracle.neighbours(owner, term, hops=3)
                )
        back = GraphMemory(dst.triples, dst.cache, None, clock=clock)
        for (owner, loop), cp in checkpoints.items():
            assert await back.last_checkpoint(owner, loop) == cp
        path2 = str(tmp_path / "again.jsonl")
        await export(dst, path2)
    mem2 = await connect("memory://", settings=s)
    store2 = InMemoryTripleStore()
    try:
        dst2 = Ports(
            store=mem2.store,
            events=mem2.events,
            cache=mem2.cache,
            leases=mem2.leases,
            triples=store2,
            backend="memory",
        )
        done = await import_file(dst2, path2)
        assert done.complete, done.describe()
        for owner in owners:
            assert await store2.query(owner, limit=1000) == await oracle.query(owner, limit=1000)
        back2 = GraphMemory(store2, mem2.cache, None, clock=clock)
        for (owner, loop), cp in checkpoints.items():
            assert await back2.last_checkpoint(owner, loop) == cp
    finally:
        await mem2.close()


async def test_checkpoints_on_a_key_value_bucket_long_ids_late_writers_and_forget(
    nats_url: str,
) -> None:
    """The processor's checkpoint bucket: a checkpoint whose id is a maximal
    event id is saved, a late writer does not move `latest` back, and
    `forget_checkpoints` removes every entry of the owner."""
    buckets = _Buckets(nats_url)
    try:
        cache = await buckets.open()
        triples = InMemoryTripleStore()
        owner, loop = "bo:{x} *", "loop.1 é"
        start = datetime.now(UTC).replace(microsecond=0)
        new = GraphMemory(triples, cache, None, clock=_Clock(start + timedelta(seconds=9)))
        old = GraphMemory(triples, cache, None, clock=_Clock(start))
        cp_new, failures = await new.checkpoint(owner, loop, summary="new", source="ü" * 256)
        assert cp_new is not None
        assert failures == ()
        cp_old, failures = await old.checkpoint(owner, loop, summary="old", source="v" * 512)
        assert cp_old is not None
        assert failures == ()
        assert await old.last_checkpoint(owner, loop) == cp_new
        entries = await cache.entries(CHECKPOINT_SCOPE, checkpoint_key(owner, loop))
        assert len(entries) == 3, [e.key for e in entries]
        assert await forget_checkpoints(cache, owner, [loop]) == 3
        assert await old.last_checkpoint(owner, loop) is None
        await cache.close()
    finally:
        await buckets.destroy()


# -- walks read one state of the graph ----------------------------------------------


async def test_a_walk_reads_one_state_of_the_graph(
    triples: TripleStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A fact stored while a walk runs (between its hops) is seen at its true
    distance or not at all: every triple at its smallest distance in the one
    graph the walk read. The memory walk is atomic and SQLite's runs in one read
    transaction; PostgreSQL read each hop in its own autocommit statement."""
    t0 = _t("a", "p", "b")
    t1 = _t("a", "q", "b", at=1)
    await triples.add([t0])
    if isinstance(triples, PostgresTripleStore):
        writer: TripleStore = PostgresTripleStore(triples._db)
    elif isinstance(triples, SqliteTripleStore):
        writer = SqliteTripleStore(tmp_path / "t.db")
    else:
        writer = triples
    hooked = {"hops": 0}

    def wrap(edges_of: Any) -> Any:
        async def between_hops(frontier: frozenset[str]) -> Any:
            hooked["hops"] += 1
            if hooked["hops"] == 2:
                await writer.add([t1])  # the concurrent write, just before hop 2 reads
            out = edges_of(frontier)
            return await out if hasattr(out, "__await__") else out

        return between_hops

    real_async = domain_triples.walk_async

    async def walk_async(node: str, hops: int, limit: int, edges_of: Any) -> Any:
        return await real_async(node, hops, limit, wrap(edges_of))

    monkeypatch.setattr(pg_triples, "walk_async", walk_async)
    if isinstance(triples, PostgresTripleStore | InMemoryTripleStore):
        steps = await triples.neighbours("o", "a", hops=2)
    else:  # SQLite walks synchronously on its worker thread: hook a sync wrapper
        real_walk = sqlite_triples.walk

        def walk(node: str, hops: int, limit: int, edges_of: Any) -> Any:
            def between_hops(frontier: frozenset[str]) -> Any:
                hooked["hops"] += 1
                if hooked["hops"] == 2:
                    conn = sqlite3.connect(tmp_path / "t.db", timeout=0.2)
                    with conn:
                        conn.execute(
                            "INSERT INTO graph_triples VALUES (?, ?, ?, ?, ?, ?, ?)",
                            ("o", "l", "a", "q", "b", 1_767_225_601_000_000, ""),
                        )
                    conn.close()
                return edges_of(frontier)

            return real_walk(node, hops, limit, between_hops)

        monkeypatch.setattr(sqlite_triples, "walk", walk)
        steps = await triples.neighbours("o", "a", hops=2)
    if not isinstance(triples, InMemoryTripleStore):  # atomic: nothing to hook
        assert hooked["hops"] == 2
    got = [(s.distance, s.triple.predicate) for s in steps]
    assert got in ([(1, "p")], [(1, "q"), (1, "p")]), got
    if writer is not triples:
        await writer.close()
