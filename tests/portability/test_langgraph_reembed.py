"""The LangGraph store's semantic search after a re-embed: its vector records
hold the text they embed, so a re-embed (which embeds stored content) rebuilds
them; records written before held their path, which a re-embed refuses until
`AgentMemoryStore.areindex()` rewrote them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from agent_memory.bootstrap.connect import connect
from agent_memory.domain.langgraph_layout import VECTOR_KIND, holds_path_only
from agent_memory.entrypoints.langgraph import AgentMemoryStore
from agent_memory.entrypoints.langgraph.store import _indexed_text, owner_of
from agent_memory.portability import reembed
from agent_memory.services.portability.errors import PortabilityError

from .helpers import settings

NS = ("ana", "notes")
ITEMS = {
    "zebra": {"text": "zebras graze on the savanna grass", "tags": ["animal", "africa"]},
    "code": {"text": "python code compiles quickly", "tags": ["software", "tools"]},
    "bread": {"text": "sourdough bread rises overnight", "tags": ["kitchen", "baking"]},
}
INDEX: Any = {"fields": ["text", "tags[*]"]}


async def _top(store: AgentMemoryStore, query: str) -> list[str]:
    return [hit.key for hit in await store.asearch(NS, query=query, limit=3)]


async def _vector_records(memory: Any) -> list[Any]:
    page = await memory.store.list(owner_of(NS), kinds=[VECTOR_KIND], limit=100)
    return list(page.records)


async def test_search_finds_the_same_items_after_a_reembed(tmp_path: Path, backend: str) -> None:
    """When this fails, a re-embed rebuilt the LangGraph store's vectors from
    their paths ("text", "tags[*].0"), not their texts: every item scored alike
    afterwards, and semantic search returned them in no useful order."""
    s = settings(tmp_path, embedder="hashing")
    async with connect(backend, settings=s) as m:
        store = AgentMemoryStore(m, index=INDEX)
        for key, value in ITEMS.items():
            await store.aput(NS, key, value)
        before = {q: await _top(store, q) for q in ("zebras savanna", "sourdough bread")}
        assert before["zebras savanna"][0] == "zebra"
        assert before["sourdough bread"][0] == "bread"
    assert (await reembed(backend, to_model="hashing", dimension=64, settings=s)).complete
    async with connect(backend, settings=s) as m:
        assert m.embedder.space.dimension == 64
        store = AgentMemoryStore(m, index=INDEX)
        for query, keys in before.items():
            assert (await _top(store, query))[0] == keys[0], query
        hits = await store.asearch(NS, query="zebras savanna", limit=3)
        assert len({round(h.score or 0.0, 6) for h in hits}) == 3  # not all alike


async def test_records_that_hold_their_path_are_refused_until_reindexed(
    tmp_path: Path,
) -> None:
    """When this fails, a re-embed embedded the paths of vector records written
    before they held their text (silently breaking search), or `areindex()` did
    not give them their text back."""
    s = settings(tmp_path, embedder="hashing")
    url = f"sqlite:///{tmp_path}/m.db"
    async with connect(url, settings=s) as m:
        store = AgentMemoryStore(m, index=INDEX)
        for key, value in ITEMS.items():
            await store.aput(NS, key, value)
        texts = {r.id: r.content for r in await _vector_records(m)}
        for record in await _vector_records(m):  # as the earlier version wrote them
            path = record.attributes["langgraph"]["path"]
            await m.store.update(
                attrs.evolve(
                    record,
                    content=path,
                    attributes={"langgraph": {"key": record.attributes["langgraph"]["key"],
                                              "path": path}},
                )
            )  # fmt: skip
        assert all(holds_path_only(r) for r in await _vector_records(m))
    with pytest.raises(PortabilityError, match="areindex"):
        await reembed(url, to_model="hashing", dimension=64, settings=s)
    async with connect(url, settings=s) as m:
        store = AgentMemoryStore(m, index=INDEX)
        assert await store.areindex() == len(texts)
        assert await store.areindex() == 0  # idempotent
        records = await _vector_records(m)
        assert {r.id: r.content for r in records} == texts
        assert not any(holds_path_only(r) for r in records)
    assert (await reembed(url, to_model="hashing", dimension=64, settings=s)).complete
    async with connect(url, settings=s) as m:
        assert (await _top(AgentMemoryStore(m, index=INDEX), "zebras savanna"))[0] == "zebra"


@pytest.mark.parametrize(
    ("path", "want"),
    [
        ("text", "hello"),
        ("$", None),  # the whole value: checked below against LangGraph's own text
        ("tags[*].0", "a"),
        ("tags[*].1", "b"),
        ("tags[0]", "a"),
        ("nested.deep", "x"),
        ("missing", None),
        ("tags[*].7", None),
        ("tags[*]", None),  # two texts: a put wrote them as tags[*].0 and tags[*].1
    ],
)
def test_indexed_text_reads_the_path_as_puts_wrote_it(path: str, want: str | None) -> None:
    value = {"text": "hello", "tags": ["a", "b"], "nested": {"deep": "x"}}
    got = _indexed_text(value, path)
    if path == "$":
        from langgraph.store.base import get_text_at_path

        assert got == get_text_at_path(value, "$")[0]
    else:
        assert got == want


class _PutAtTheRewrite:
    """The memory's store, where a put of the same vector record (its text,
    later) lands right before `areindex`'s rewrite of it reaches the store."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.landed = inner, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def _land(self, record: Any) -> None:
        if not self.landed:
            self.landed = True
            put = attrs.evolve(
                record,
                content="written by a put meanwhile",
                updated_at=record.updated_at + timedelta(seconds=1),
            )
            await self.inner.update(put)

    async def update(self, record: Any) -> None:
        await self._land(record)
        await self.inner.update(record)

    async def update_if_older(self, record: Any) -> bool:
        await self._land(record)
        return bool(await self.inner.update_if_older(record))


async def test_reindex_keeps_a_put_that_lands_during_it(tmp_path: Path) -> None:
    """When this fails, `areindex` replaced a vector record a put wrote after
    the rewrite listed it (it read, then wrote unconditionally)."""
    s = settings(tmp_path, embedder="hashing")
    async with connect(f"sqlite:///{tmp_path}/m.db", settings=s) as m:
        store = AgentMemoryStore(m, index=INDEX)
        await store.aput(NS, "zebra", ITEMS["zebra"])
        (first, *_) = await _vector_records(m)
        path = first.attributes["langgraph"]["path"]
        meta = {"key": first.attributes["langgraph"]["key"], "path": path}
        await m.store.update(attrs.evolve(first, content=path, attributes={"langgraph": meta}))
        racing = _PutAtTheRewrite(m.store)
        store._store = racing  # type: ignore[assignment]
        await store.areindex()
        assert racing.landed
        got = await m.store.get(first.owner, first.id)
        assert got is not None
        assert got.content == "written by a put meanwhile"
