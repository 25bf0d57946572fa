"""Stored keyword terms and their migration.

Collections written before the store kept `domain.lexical` terms (the previous
format: Qdrant full-text indexes on content/context, `token_count` in Qdrant
word tokens, no `terms`) and points whose terms follow another
`LEXICAL_VERSION` are re-derived when a store opens the collection; keyword
search then equals a fresh store's (and the in-process oracle's).
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.qdrant import QdrantMemoryStore
from agent_memory.adapters.qdrant import store as store_module
from agent_memory.adapters.qdrant._codec import point_ids, record_to_payload
from agent_memory.domain import lexical
from agent_memory.domain.errors import BackendUnavailable
from agent_memory.domain.records import MemoryRecord, ScoredRecord
from qdrant.support import SPACE, OpenStore, rec

_OLD_WORD = re.compile(r"[^\W_]+")
_QUERIES = (
    "paintings",
    "What did Caroline paint?",
    "the hiking trips",
    "sunset over the lake",
    "decided to adopt",
    "Melanie",
)


def _records() -> list[MemoryRecord]:
    texts = [
        ("Caroline: I painted a sunset over the lake", "Melanie: lovely"),
        ("Melanie: we went hiking and camping", "Caroline: trips are fun"),
        ("Caroline: she decided to adopt a child", ""),
        ("Melanie: my kids love painting", "the lake again"),
        ("Caroline: the paints arrived", "hike planned"),
        ("a the of and", ""),
    ]
    out = [
        rec(f"r{i}", content=content, context=context, namespace="n" + str(i % 2), seconds=i)
        for i, (content, context) in enumerate(texts)
    ]
    out += [rec(f"b{i}", "bob", content=c, context=x) for i, (c, x) in enumerate(texts[:3])]
    return out


def _old_payload(record: MemoryRecord) -> dict[str, Any]:
    """A point as the previous release stored it."""
    payload = record_to_payload(record)
    for key in ("terms", "term_counts", "lexical"):
        del payload[key]
    words = _OLD_WORD.findall(record.content) + _OLD_WORD.findall(record.context)
    payload["token_count"] = len(words)
    return payload


async def _write_old_format(
    client: AsyncQdrantClient, name: str, records: list[MemoryRecord]
) -> None:
    """The previous release's collection: text indexes, no keyword-term fields."""
    await client.create_collection(
        name, vectors_config=qm.VectorParams(size=SPACE.dimension, distance=qm.Distance.COSINE)
    )
    text = qm.TextIndexParams(
        type=qm.TextIndexType.TEXT, tokenizer=qm.TokenizerType.WORD, lowercase=True
    )
    schemas: list[tuple[str, Any]] = [
        ("owner", qm.PayloadSchemaType.KEYWORD),
        ("namespace", qm.PayloadSchemaType.KEYWORD),
        ("kind", qm.PayloadSchemaType.KEYWORD),
        ("created_us", qm.PayloadSchemaType.INTEGER),
        ("content", text),
        ("context", text),
    ]
    with warnings.catch_warnings():
        # Local mode warns that it builds no payload indexes.
        warnings.filterwarnings("ignore", message="Payload indexes have no effect")
        for field_name, schema in schemas:
            await client.create_payload_index(name, field_name, field_schema=schema)
    ids = point_ids([(r.owner, r.id) for r in records])
    await client.upsert(
        name,
        points=[
            qm.PointStruct(id=pid, vector=r.vector.tolist(), payload=_old_payload(r))
            for pid, r in zip(ids, records, strict=True)
        ],
        wait=True,
    )


def _key(hits: list[ScoredRecord]) -> list[tuple[str, float]]:
    return [(h.record.id, round(h.score, 9)) for h in hits]


async def _answers(store: Any) -> list[list[tuple[str, float]]]:
    out = []
    for owner in ("alice", "bob"):
        for q in _QUERIES:
            out.append(_key(await store.search_text(owner, q, limit=10)))
        out.append(_key(await store.search_text("alice", "painting lake", namespace="n1")))
    return out


async def _oracle(records: list[MemoryRecord]) -> list[list[tuple[str, float]]]:
    oracle = InMemoryMemoryStore(SPACE)
    await oracle.add(records)
    return await _answers(oracle)


async def _fresh(open_store: OpenStore, records: list[MemoryRecord]) -> QdrantMemoryStore:
    """A store on its own collection (the test's prefix plus `fresh_`)."""
    probe = await open_store()
    prefix = probe.collection_name.removesuffix(SPACE.identity)
    fresh = QdrantMemoryStore(probe.client, SPACE, collection_prefix=f"{prefix}fresh_")
    await fresh.add(records)
    return fresh


async def test_old_format_collection_is_migrated_on_open(
    open_store: OpenStore, qclient: AsyncQdrantClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records()
    first = await open_store()
    await _write_old_format(qclient, first.collection_name, records)
    want = await _answers(await _fresh(open_store, records))
    assert want == await _oracle(records)
    assert any(want), "the queries find something"

    # Without the migration (and without the fill before a keyword search, which
    # would derive the same terms) the old points hold no terms: the comparison
    # catches it.
    async def no_migration(self: QdrantMemoryStore, name: str) -> int:
        return 0

    async def no_fill(self: QdrantMemoryStore, name: str, ids: list[str]) -> None:
        return None

    with monkeypatch.context() as patched:
        patched.setattr(QdrantMemoryStore, "_migrate_terms", no_migration)
        patched.setattr(QdrantMemoryStore, "_fill_terms", no_fill)
        unmigrated = await open_store()
        assert await _answers(unmigrated) != want

    migrated = await open_store()
    assert await _answers(migrated) == want
    # Records read back unchanged, and the collection is now current.
    for r in records:
        assert await migrated.get(r.owner, r.id) == r
    stale = qm.Filter(
        must_not=[
            qm.FieldCondition(key="lexical", match=qm.MatchValue(value=lexical.LEXICAL_VERSION))
        ]
    )
    assert (await qclient.count(first.collection_name, count_filter=stale)).count == 0
    # A later open finds nothing to do.
    assert await migrated._migrate_terms(first.collection_name) == 0


async def test_interrupted_migration_resumes(
    open_store: OpenStore, qclient: AsyncQdrantClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after the first batch leaves that batch done and the rest stale;
    the next open finishes the job."""
    records = _records()
    first = await open_store()
    name = first.collection_name
    await _write_old_format(qclient, name, records)
    monkeypatch.setattr(store_module, "_SCROLL_BATCH", 3)
    real = qclient.batch_update_points
    calls = 0

    async def failing(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise OSError("connection lost")
        return await real(*args, **kwargs)

    stale = qm.Filter(
        must_not=[
            qm.FieldCondition(key="lexical", match=qm.MatchValue(value=lexical.LEXICAL_VERSION))
        ]
    )
    with monkeypatch.context() as patched:
        patched.setattr(qclient, "batch_update_points", failing)
        broken = await open_store()
        with pytest.raises(BackendUnavailable, match="batch_update_points"):
            await broken.search_text("alice", "paint")
    left = (await qclient.count(name, count_filter=stale)).count
    assert left == len(records) - 3
    again = await open_store()
    assert await _answers(again) == await _oracle(records)
    assert (await qclient.count(name, count_filter=stale)).count == 0


async def test_text_changed_during_migration_is_redone(
    open_store: OpenStore, qclient: AsyncQdrantClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer elsewhere changes a point's text between the migration's read and
    its write: the migration reads the batch again and derives from the new text."""
    records = _records()
    first = await open_store()
    name = first.collection_name
    await _write_old_format(qclient, name, records)
    target = point_ids([("alice", "r2")])[0]
    real = qclient.batch_update_points
    changed = False

    async def racing(*args: Any, **kwargs: Any) -> Any:
        nonlocal changed
        if not changed:
            changed = True
            # The other writer (a previous release: no terms) rewrites r2's text.
            await qclient.set_payload(
                name, payload={"content": "Caroline: a violin concert"}, points=[target]
            )
        return await real(*args, **kwargs)

    monkeypatch.setattr(qclient, "batch_update_points", racing)
    s = await open_store()
    hits = await s.search_text("alice", "violin")
    assert [h.record.id for h in hits] == ["r2"]
    assert await s.search_text("alice", "adopt") == []


def _unstemmed(text: str) -> list[str]:
    """Another `domain.lexical` release's tokenizer: stopwords dropped, no stemming."""
    words = (w.lower() for w in re.findall(r"[^\W_]+", text))
    return [w for w in words if w not in lexical.STOPWORDS]


async def test_lexical_version_change_rederives_terms(
    open_store: OpenStore, qclient: AsyncQdrantClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records()
    bumped = f"{lexical.LEXICAL_VERSION}+next"
    old = await open_store()
    await old.add(records)  # terms of the current version
    assert sorted(h.record.id for h in await old.search_text("alice", "paintings")) == [
        "r0",
        "r3",
        "r4",
    ]
    with monkeypatch.context() as patched:
        patched.setattr(lexical, "LEXICAL_VERSION", bumped)
        patched.setattr(lexical, "tokenize", _unstemmed)
        want = await _oracle(records)
        reopened = await open_store()
        assert await _answers(reopened) == want
        # Unstemmed: "paintings" no longer finds "painted" or "paints".
        assert await reopened.search_text("alice", "paintings") == []
        payload = (await qclient.retrieve(old.collection_name, ids=point_ids([("alice", "r0")])))[
            0
        ].payload
        assert payload is not None
        assert payload["lexical"] == bumped
        assert "painted" in payload["terms"]
    # Back to the stemming tokenizer, still under the bumped version: the stored terms
    # (unstemmed) are not re-derived, so the marker is what triggers it.
    with monkeypatch.context() as patched:
        patched.setattr(lexical, "LEXICAL_VERSION", bumped)
        unbumped = await open_store()
        assert await _answers(unbumped) != await _oracle(records)
