"""The collection records the `domain.lexical.LEXICAL_VERSION` its stored terms
follow; a store opening a collection whose terms follow another version (or
none recorded) re-derives them, resumably, and keyword search then equals the
in-process oracle's."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pymilvus import MilvusClient

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.milvus import MilvusMemoryStore
from agent_memory.adapters.milvus._codec import primary_key
from agent_memory.adapters.milvus.store import LEXICAL_PROGRESS_PROPERTY, LEXICAL_PROPERTY
from agent_memory.domain import lexical
from agent_memory.domain.errors import BackendUnavailable
from agent_memory.domain.records import MemoryRecord, ScoredRecord
from milvus.support import SPACE, OpenStore, rec

_QUERIES = ("paintings", "What did Caroline paint?", "the hiking trips", "decided to adopt")
_TEXTS = (
    ("Caroline: I painted a sunset over the lake", "Melanie: lovely"),
    ("Melanie: we went hiking and camping", "Caroline: trips are fun"),
    ("Caroline: she decided to adopt a child", ""),
    ("Melanie: my kids love painting", "the lake again"),
    ("Caroline: the paints arrived", "hike planned"),
)


def _records() -> list[MemoryRecord]:
    """Enough rows to fall into most primary-key digit ranges."""
    return [
        rec(f"r{i}", owner=("alice", "bob")[i % 2], content=c, context=x, seconds=i)
        for i, (c, x) in enumerate(_TEXTS * 8)
    ]


def _unstemmed(text: str) -> list[str]:
    """Another `domain.lexical` release's tokenizer: stopwords dropped, no stemming."""
    words = (w.lower() for w in re.findall(r"[^\W_]+", text))
    return [w for w in words if w not in lexical.STOPWORDS]


def _key(hits: list[ScoredRecord]) -> list[tuple[str, float]]:
    return [(h.record.id, round(h.score, 9)) for h in hits]


async def _answers(store: Any) -> list[list[tuple[str, float]]]:
    return [
        _key(await store.search_text(owner, q, limit=10))
        for owner in ("alice", "bob")
        for q in _QUERIES
    ]


async def _oracle(records: list[MemoryRecord]) -> list[list[tuple[str, float]]]:
    oracle = InMemoryMemoryStore(SPACE)
    await oracle.add(records)
    return await _answers(oracle)


def _props(client: MilvusClient, name: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in dict(client.describe_collection(name)["properties"]).items()}


async def _write_with_other_rules(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch, records: list[MemoryRecord]
) -> MilvusMemoryStore:
    """A collection written by a release with other lexical rules (version "old")."""
    with monkeypatch.context() as patched:
        patched.setattr(lexical, "LEXICAL_VERSION", "old")
        patched.setattr(lexical, "tokenize", _unstemmed)
        old = await open_store()
        await old.add(records)
        assert await _answers(old) == await _oracle(records)
    return old


async def test_new_collection_records_the_version(
    store: MilvusMemoryStore, mclient: MilvusClient
) -> None:
    await store.add([rec("a")])
    assert _props(mclient, store.collection_name)[LEXICAL_PROPERTY] == lexical.LEXICAL_VERSION


async def test_terms_of_another_version_are_rederived(
    open_store: OpenStore, mclient: MilvusClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records()
    old = await _write_with_other_rules(open_store, monkeypatch, records)
    want = await _oracle(records)
    assert any(want)

    # Without the re-derivation the stored (unstemmed) terms miss candidates.
    async def no_migration(self: MilvusMemoryStore, name: str, props: dict[str, str]) -> int:
        return 0

    with monkeypatch.context() as patched:
        patched.setattr(MilvusMemoryStore, "_migrate_terms", no_migration)
        assert await _answers(await open_store()) != want

    reopened = await open_store()
    assert await _answers(reopened) == want
    for r in records:
        assert await reopened.get(r.owner, r.id) == r
    props = _props(mclient, old.collection_name)
    assert props[LEXICAL_PROPERTY] == lexical.LEXICAL_VERSION
    assert await reopened._migrate_terms(old.collection_name, props) == 0


async def test_collection_without_a_recorded_version_is_rederived(
    open_store: OpenStore, mclient: MilvusClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Collections from before the marker have no property: their terms are re-derived."""
    records = _records()
    old = await _write_with_other_rules(open_store, monkeypatch, records)
    mclient.drop_collection_properties(old.collection_name, property_keys=[LEXICAL_PROPERTY])
    assert LEXICAL_PROPERTY not in _props(mclient, old.collection_name)
    assert await _answers(await open_store()) == await _oracle(records)
    assert _props(mclient, old.collection_name)[LEXICAL_PROPERTY] == lexical.LEXICAL_VERSION


async def test_interrupted_rederivation_resumes(
    open_store: OpenStore, mclient: MilvusClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after two key ranges leaves their progress recorded; the next
    open rewrites only the remaining ranges' rows."""
    records = _records()
    old = await _write_with_other_rules(open_store, monkeypatch, records)
    name = old.collection_name
    real_set = MilvusMemoryStore._set_properties
    calls = 0

    async def failing(self: MilvusMemoryStore, n: str, props: dict[str, str]) -> None:
        nonlocal calls
        calls += 1
        if calls > 2:
            raise BackendUnavailable("milvus", "alter_collection_properties: connection lost")
        await real_set(self, n, props)

    with monkeypatch.context() as patched:
        patched.setattr(MilvusMemoryStore, "_set_properties", failing)
        with pytest.raises(BackendUnavailable, match="connection lost"):
            await (await open_store()).search_text("alice", "paint")
    props = _props(mclient, name)
    assert props[LEXICAL_PROPERTY] == "old"
    assert props[LEXICAL_PROGRESS_PROPERTY] == f"{lexical.LEXICAL_VERSION}:1"

    resumed = await open_store()
    rewritten = await resumed._migrate_terms(name, props)
    in_first_ranges = sum(1 for r in records if primary_key(r.owner, r.id)[0] in "01")
    assert rewritten == len(records) - in_first_ranges
    assert in_first_ranges > 0
    assert await _answers(resumed) == await _oracle(records)
    assert _props(mclient, name)[LEXICAL_PROPERTY] == lexical.LEXICAL_VERSION
