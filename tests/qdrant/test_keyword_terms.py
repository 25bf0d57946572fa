"""`keyword=false`: a store whose `add` and `update` neither derive nor store
keyword terms; the first keyword search over such records (on any handle)
derives and stores them, so keyword results equal `memory://`'s whichever
handle wrote a record."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qdrant_client import AsyncQdrantClient

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.qdrant import QdrantMemoryStore, open_qdrant_store, open_stores
from agent_memory.adapters.qdrant import store as store_module
from agent_memory.adapters.qdrant._lexical import record_terms
from agent_memory.adapters.qdrant.factory import keyword_from_url
from agent_memory.domain.errors import ConfigurationError
from agent_memory.domain.records import MemoryRecord, ScoredRecord
from agent_memory.ports.storage import KeywordSearch
from qdrant.support import SPACE, OpenStore, new_client, rec

_KEYWORD_FIELDS = {"terms", "term_counts", "token_count", "lexical"}
_TEXTS = [
    ("Caroline: I painted a sunset over the lake", "Melanie: lovely"),
    ("Melanie: we went hiking and camping", "Caroline: trips are fun"),
    ("Caroline: she decided to adopt a child", ""),
    ("Melanie: my kids love painting", "the lake again"),
    ("Caroline: the paints arrived", "hike planned"),
    ("a the of and", ""),
    ("painting the lake at sunset, painting again", ""),
]
_QUERIES = ("paintings", "the lake", "Caroline hiking", "sunset painting", "adopt", "kids")


def _records() -> list[MemoryRecord]:
    out = [
        rec(f"r{i}", content=content, context=context, namespace=f"n{i % 2}", seconds=i)
        for i, (content, context) in enumerate(_TEXTS)
    ]
    out += [rec(f"b{i}", "bob", content=c, context=x) for i, (c, x) in enumerate(_TEXTS[:4])]
    return out


def _key(hits: list[ScoredRecord]) -> list[tuple[str, float]]:
    return [(h.record.id, round(h.score, 9)) for h in hits]


async def _answers(store: Any) -> list[list[tuple[str, float]]]:
    out = []
    for owner in ("alice", "bob"):
        for q in _QUERIES:
            out.append(_key(await store.search_text(owner, q, limit=10)))
    out.append(_key(await store.search_text("alice", "painting lake", namespace="n1")))
    out.append(_key(await store.search_text("alice", "painting", limit=2)))
    return out


async def _oracle(records: list[MemoryRecord]) -> list[list[tuple[str, float]]]:
    oracle = InMemoryMemoryStore(SPACE)
    await oracle.add(records)
    return await _answers(oracle)


def _handle(store: QdrantMemoryStore, *, keyword: bool) -> QdrantMemoryStore:
    """Another handle on `store`'s collection (same client and prefix)."""
    prefix = store.collection_name.removesuffix(SPACE.identity)
    return QdrantMemoryStore(store.client, SPACE, collection_prefix=prefix, keyword=keyword)


async def _payloads(client: AsyncQdrantClient, name: str) -> dict[str, dict[str, Any]]:
    points, _ = await client.scroll(name, limit=1000, with_payload=True, with_vectors=False)
    return {str((p.payload or {})["id"]): dict(p.payload or {}) for p in points}


async def test_keyword_false_add_and_update_store_no_terms(open_store: OpenStore) -> None:
    normal = await open_store()
    await normal.list("alice")  # open (a normal handle opening later would migrate)
    off = _handle(normal, keyword=False)
    assert (normal.keyword, off.keyword) == (True, False)
    records = _records()
    await off.add(records[:3])
    await normal.add(records[3:])
    stored = await _payloads(normal.client, normal.collection_name)
    for r in records[:3]:
        assert not _KEYWORD_FIELDS & set(stored[r.id]), stored[r.id]
    for r in records[3:]:
        assert set(stored[r.id]) >= _KEYWORD_FIELDS, stored[r.id]
    # An update through the keyword=false handle drops the record's terms too
    # (they would describe the old text).
    await off.update(attrs.evolve(records[4], content="new text about kites"))
    stored = await _payloads(normal.client, normal.collection_name)
    assert not _KEYWORD_FIELDS & set(stored["r4"]), stored["r4"]
    # Everything else round-trips as from a normal handle.
    assert await off.get("alice", "r0") == records[0]
    assert await normal.get("alice", "r0") == records[0]


async def test_normal_handle_finds_keyword_false_records_like_memory(
    open_store: OpenStore,
) -> None:
    """The normal handle is open (its open-time migration done) before the other
    handle adds: only the fill before a keyword search can give those records terms."""
    records = _records()
    normal = await open_store()
    await normal.add(records[::2])
    assert await normal.search_text("alice", "paintings")  # ready, and searched once
    off = _handle(normal, keyword=False)
    await off.add(records[1::2])
    want = await _oracle(records)
    assert any(want), "the queries find something"
    assert await _answers(normal) == want
    # The terms are stored now: a raw look shows them on every point.
    stored = await _payloads(normal.client, normal.collection_name)
    assert all(set(p) >= _KEYWORD_FIELDS for p in stored.values())
    # And a later update through the keyword=false handle is found by its new text.
    changed = attrs.evolve(records[1], content="Caroline flew kites", context="")
    await off.update(changed)
    hits = await normal.search_text("alice", "kites")
    assert [h.record.id for h in hits] == ["r1"]
    assert _key(hits) == _key(await _oracle_after(records, changed, "kites"))


async def _oracle_after(
    records: list[MemoryRecord], changed: MemoryRecord, query: str
) -> list[ScoredRecord]:
    oracle = InMemoryMemoryStore(SPACE)
    await oracle.add([changed if r.id == changed.id else r for r in records])
    return await oracle.search_text("alice", query)


async def test_keyword_false_handle_searches_like_memory(open_store: OpenStore) -> None:
    """Its own keyword search derives the missing terms first: the same answers."""
    probe = await open_store()
    off = _handle(probe, keyword=False)
    records = _records()
    await off.add(records)
    assert isinstance(off, KeywordSearch)
    assert await _answers(off) == await _oracle(records)


async def test_keyword_false_store_skips_the_open_migration(open_store: OpenStore) -> None:
    """Opening with keyword=false derives nothing; a normal handle opened later
    migrates at open (as for any point without the current terms)."""
    probe = await open_store()
    off = _handle(probe, keyword=False)
    records = _records()
    await off.add(records)
    again = _handle(probe, keyword=False)
    await again.list("alice")  # opens the collection
    stored = await _payloads(probe.client, probe.collection_name)
    assert not any(_KEYWORD_FIELDS & set(p) for p in stored.values())
    fresh = _handle(probe, keyword=True)
    await fresh.list("alice")
    stored = await _payloads(probe.client, probe.collection_name)
    assert all(set(p) >= _KEYWORD_FIELDS for p in stored.values())


async def test_without_the_fill_the_comparison_fails(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above can fail: a store that skips the fill misses those records."""

    async def no_fill(self: QdrantMemoryStore, name: str, ids: list[str]) -> None:
        return None

    monkeypatch.setattr(store_module.QdrantMemoryStore, "_fill_terms", no_fill)
    records = _records()
    normal = await open_store()
    await normal.list("alice")
    await _handle(normal, keyword=False).add(records[1::2])
    await normal.add(records[::2])
    assert await _answers(normal) != await _oracle(records)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    writers=st.lists(st.booleans(), min_size=len(_records()), max_size=len(_records())),
    search_with=st.booleans(),
)
async def test_any_mix_of_writers_searches_like_memory(
    writers: list[bool], search_with: bool
) -> None:
    """Each record written by a normal or a keyword=false handle (a random mix),
    searched by either: the answers are memory://'s."""
    client = new_client("local")
    try:
        normal = QdrantMemoryStore(client, SPACE, keyword=True)
        off = QdrantMemoryStore(client, SPACE, keyword=False)
        await normal.list("alice")
        records = _records()
        for r, by_normal in zip(records, writers, strict=True):
            await (normal if by_normal else off).add([r])
        assert await _answers(normal if search_with else off) == await _oracle(records)
    finally:
        await client.close()


async def test_url_option_round_trips() -> None:
    assert keyword_from_url("qdrant+memory://") is True
    for value, want in (("false", False), ("0", False), ("off", False), ("true", True)):
        url = f"qdrant+memory://?keyword={value}"
        assert keyword_from_url(url) is want
        store = open_qdrant_store(url, SPACE)
        assert store.keyword is want
        await store.close()
        parts = await open_stores(url, space=SPACE, deployment="team")
        assert parts["store"].keyword is want
        assert parts["details"]["keyword"] is want
        await parts["store"].close()
    store = open_qdrant_store("qdrant+memory://?keyword=false&prefix=p_&hnsw_m=8", SPACE)
    assert (store.keyword, store.collection_name[:2], store.index_options.m) == (False, "p_", 8)
    await store.close()
    assert QdrantMemoryStore(new_client("local"), SPACE).keyword is True


@pytest.mark.parametrize("value", ["maybe", "", "2", "False!"])
async def test_bad_url_values_name_the_option(value: str) -> None:
    url = f"qdrant+memory://?keyword={value}"
    with pytest.raises(ConfigurationError, match="keyword"):
        keyword_from_url(url)
    with pytest.raises(ConfigurationError, match="keyword"):
        open_qdrant_store(url, SPACE)
    with pytest.raises(ConfigurationError, match="keyword"):
        await open_stores(url, space=SPACE)


@pytest.mark.parametrize("value", ["false", 0, None, 1])
def test_bad_constructor_values_name_the_argument(value: object) -> None:
    with pytest.raises(ConfigurationError, match="keyword"):
        QdrantMemoryStore(new_client("local"), SPACE, keyword=value)  # type: ignore[arg-type]


class _Interleaved(QdrantMemoryStore):
    """A store whose keyword search lets another writer in at one step: after the
    `at`-th call named `what` (a `_call` name, or "corpus" for the scope read),
    `write()` runs once, as another process's write would (around this process's
    write lock, which that process does not share)."""

    what: str
    at: int
    write: Any

    async def _call(self, what: str, awaitable: Any) -> Any:
        result = await super()._call(what, awaitable)
        await self._step(what)
        return result

    async def _corpus(self, name: str, scope: Any) -> Any:
        result = await super()._corpus(name, scope)
        await self._step("corpus")
        return result

    async def _step(self, what: str) -> None:
        if what == getattr(self, "what", None):
            self.at -= 1
            if self.at == 0:
                await self.write()
                if self.then is not None:  # the next step: (`_call` name, write)
                    self.what, self.write = self.then
                    self.at, self.then = 1, None

    then: tuple[str, Any] | None = None


def _interleaved(store: QdrantMemoryStore, what: str, at: int, write: Any) -> _Interleaved:
    prefix = store.collection_name.removesuffix(SPACE.identity)
    out = _Interleaved(store.client, SPACE, collection_prefix=prefix)
    out.what, out.at, out.write = what, at, write
    return out


@pytest.mark.parametrize(
    ("written_by_off", "what", "at"),
    [
        # The fill set the terms; the other writer rewrites the same text before
        # the fill reads the points again (their text unchanged: nothing redone).
        (True, "batch_update_points", 1),
        # Every point had its terms when the scope was read; the other writer
        # rewrites one before the candidates are read.
        (False, "corpus", 1),
        # ...or after the fill, before the scope is read again.
        (True, "corpus", 2),
    ],
)
async def test_a_keyword_false_write_during_a_search_loses_no_record(
    open_store: OpenStore, written_by_off: bool, what: str, at: int
) -> None:
    """A keyword=false handle updating a record (same text, other attributes)
    while another handle's keyword search runs: the record existed, with that
    text, all along, so the search finds it as memory:// does."""
    records = _records()
    normal = await open_store()
    await normal.list("alice")
    off = _handle(normal, keyword=False)
    changed = attrs.evolve(records[0], attributes={"seen": 1})  # r0: "painted", "lake"
    name = normal.collection_name

    async def write() -> None:
        # `off.update` without its lock (another process's update).
        await off._upsert(name, [changed], [store_module.point_id("alice", "r0")])

    searcher = _interleaved(normal, what, at, write)
    await searcher.list("alice")  # opened (its open-time migration done) before the adds
    await (off if written_by_off else normal).add(records)
    got = await searcher.search_text("alice", "painted lake", limit=10)
    assert searcher.at <= 0, "the write ran"
    want = await _oracle_after(records, changed, "painted lake")
    assert _key(got) == _key(want)
    # And the next search too (the terms the write dropped are derived again).
    assert _key(await normal.search_text("alice", "painted lake", limit=10)) == _key(want)


async def test_a_record_deleted_during_the_fill_is_skipped(open_store: OpenStore) -> None:
    """Another process deletes a record between the fill's read of its text and the
    write of its terms: the search answers as memory:// without that record,
    instead of failing on the missing point."""
    records = _records()
    normal = await open_store()
    await normal.list("alice")
    off = _handle(normal, keyword=False)
    name = normal.collection_name

    async def delete() -> None:  # `off.delete` without its lock (another process)
        ids = [store_module.point_id("alice", "r0")]
        await normal.client.delete(name, points_selector=ids, wait=True)

    searcher = _interleaved(normal, "retrieve", 1, delete)
    await searcher.list("alice")
    await off.add(records)
    got = await searcher.search_text("alice", "painted lake", limit=10)
    assert searcher.at <= 0, "the delete ran"
    oracle = InMemoryMemoryStore(SPACE)
    await oracle.add([r for r in records if r.id != "r0"])
    assert _key(got) == _key(await oracle.search_text("alice", "painted lake", limit=10))
    assert await normal.get("alice", "r0") is None


async def test_terms_of_a_replaced_text_are_never_stored(open_store: OpenStore) -> None:
    """Another process replaces a record's text (with its own terms) between the
    fill's read of the old text and the write of the old text's terms, and the
    search stops right after that write (cancelled: no read-back to repair it).
    The point keeps the terms of the text it holds: the write applies only to
    the text it was derived from."""
    records = _records()
    normal = await open_store()
    await normal.list("alice")
    off = _handle(normal, keyword=False)
    name = normal.collection_name
    changed = attrs.evolve(records[0], content="Caroline flew kites", context="")

    async def replace() -> None:  # `normal.update` without its lock (another process)
        await normal._upsert(name, [changed], [store_module.point_id("alice", "r0")])

    async def cancel() -> None:
        raise asyncio.CancelledError

    searcher = _interleaved(normal, "retrieve", 1, replace)
    await searcher.list("alice")
    await off.add(records)
    searcher.then = ("batch_update_points", cancel)
    with pytest.raises(asyncio.CancelledError):
        await searcher.search_text("alice", "painted lake", limit=10)
    stored = (await _payloads(normal.client, name))["r0"]
    assert stored["content"] == changed.content
    assert stored["terms"] == record_terms(changed.content, changed.context)[0]
    # And searches answer as memory:// does with the new text.
    for query in ("kites", "painted lake"):
        got = await normal.search_text("alice", query, limit=10)
        assert _key(got) == _key(await _oracle_after(records, changed, query))
