"""A forget reaches every embedding space the deployment holds records in: the
old space a re-embed keeps until `--drop-old`, and the new one an interrupted
re-embed left half built (which a resumed run would otherwise complete with the
forgotten user's records and switch reads to)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory.cache import InMemoryCache
from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.bootstrap.connect import connect
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.domain.user_facts import FactCandidate
from agent_memory.portability import open_ports, reembed
from agent_memory.ports.storage import Cache, CacheEntry
from agent_memory.services.knowledge import KNOWLEDGE_NAMESPACE, KnowledgeService
from agent_memory.services.portability.reembed import (
    SPACE_PREFIX,
    SPACES_KEY,
    SWITCH_SCOPE,
    _write_spaces,
    read_spaces,
    record_space,
)

from .helpers import settings, sqlite_rows_with

OLD = HashingEmbedder(256).space
NEW = HashingEmbedder(64).space
SECRET = "Zorblax"


async def _remember(url: str, s: Settings) -> dict[str, str]:
    """Two users' facts (the first names the secret); their fact ids."""
    ids = {}
    async with connect(url, settings=s) as m:
        assert m.embedder.space == OLD
        for user, text in (
            ("alice", f"Alice keeps a pet iguana named {SECRET}"),
            ("bob", "Bob plays the theremin on Sundays"),
        ):
            await m.users.reconcile(
                user_id=user, namespace="assistant", candidates=[FactCandidate(text, "preference")]
            )
            (fact,) = await m.users.facts(user_id=user)
            ids[user] = fact.id
    return ids


async def _contents(url: str, s: Settings, space: EmbeddingSpace, owner: str) -> list[str]:
    async with open_ports(url, space=space, settings=s) as ports:
        return [r.content for r in (await ports.store.list(owner)).records]


async def test_forget_after_a_reembed_empties_the_kept_old_space(
    tmp_path: Path, backend: str
) -> None:
    """When this fails, the user's facts stayed in the old space a re-embed keeps
    until `--drop-old`: forgotten for reads, still stored."""
    s = settings(tmp_path, embedder="hashing")
    ids = await _remember(backend, s)
    done = await reembed(backend, to_model="hashing", dimension=64, settings=s)
    assert done.complete
    async with connect(backend, settings=s) as m:
        assert m.embedder.space == NEW
        receipt = await m.users.forget("alice")
        assert receipt.failures == ()
        assert await _contents(backend, s, NEW, "alice") == []
        assert await _contents(backend, s, OLD, "alice") == []
        # a single fact of another user, in both spaces
        forgot = await m.users.forget_fact("bob", ids["bob"])
        assert (forgot.facts, forgot.failures) == (1, ())
    assert await _contents(backend, s, OLD, "bob") == []
    assert await _contents(backend, s, NEW, "bob") == []
    if backend.startswith("sqlite"):
        assert sqlite_rows_with(tmp_path / "m.db", SECRET) == []


async def test_forget_counts_and_removes_fragments_of_the_kept_old_space(
    tmp_path: Path, backend: str
) -> None:
    """A knowledge fragment of alice's request stored in the old space only (a
    domain with no events): the forget finds it through that space's domain
    registry, deletes it, and its receipt counts it (it did not)."""
    s = settings(tmp_path, embedder="hashing")
    await _remember(backend, s)
    done = await reembed(backend, to_model="hashing", dimension=64, settings=s)
    assert done.complete
    async with open_ports(backend, space=OLD, settings=s) as ports:
        old = KnowledgeService(
            store=ports.store, embedder=HashingEmbedder(256), clock=SystemClock()
        )
        stored = await old.store_fragments(
            "support", [(f"{SECRET} needs a visa", 0.5)], kind="fragment",
            attributes={"user_id": "alice"},
        )  # fmt: skip
        assert stored == 1
    async with connect(backend, settings=s) as m:
        receipt = await m.users.forget("alice")
        assert receipt.failures == ()
        fragments = [d for d in receipt.derived if d.kind == "fragment"]
        assert [d.scope for d in fragments] == ["support"], receipt.derived
    async with open_ports(backend, space=OLD, settings=s) as ports:
        left = await ports.store.list("support", namespace=KNOWLEDGE_NAMESPACE)
        assert left.records == ()


async def test_forget_during_an_interrupted_reembed_is_not_undone_by_resuming(
    tmp_path: Path,
) -> None:
    """When this fails, the half-built new space kept the user's records, and
    the resumed re-embed (which skips what the new space already holds) completed
    it with them and switched reads to it: the forgotten facts came back."""
    s = settings(tmp_path, embedder="hashing")
    url = f"sqlite:///{tmp_path}/m.db"
    await _remember(url, s)

    class Interrupted:
        """The new space's embedder, failing after its first batch."""

        def __init__(self) -> None:
            self.inner, self.calls = HashingEmbedder(64), 0

        @property
        def space(self) -> EmbeddingSpace:
            return self.inner.space

        async def embed(self, texts: Sequence[str]) -> Any:
            self.calls += 1
            if self.calls > 1:
                raise RuntimeError("interrupted")
            vectors: np.ndarray[Any, Any] = await self.inner.embed(texts)
            return vectors

    with pytest.raises(RuntimeError, match="interrupted"):
        await reembed(url, to_model="hashing", embedder=Interrupted(), batch_size=1, settings=s)
    assert await _contents(url, s, NEW, "alice") + await _contents(url, s, NEW, "bob")
    async with connect(url, settings=s) as m:
        assert m.embedder.space == OLD  # the switch is not recorded yet
        receipt = await m.users.forget("alice")
        assert receipt.failures == ()
    done = await reembed(url, to_model="hashing", dimension=64, settings=s)
    assert done.complete
    async with connect(url, settings=s) as m:
        assert m.embedder.space == NEW
        assert await m.users.facts(user_id="alice") == []
        assert len(await m.users.facts(user_id="bob")) == 1
    assert sqlite_rows_with(tmp_path / "m.db", SECRET) == []


async def _reembedded(tmp_path: Path) -> tuple[str, Settings]:
    """A SQLite deployment with both users' facts, re-embedded from OLD to NEW."""
    s = settings(tmp_path, embedder="hashing")
    url = f"sqlite:///{tmp_path}/m.db"
    await _remember(url, s)
    await reembed(url, to_model="hashing", dimension=64, settings=s)
    return url, s


async def _listed_spaces(url: str, s: Settings) -> list[str]:
    """The identities of the spaces the deployment lists (`read_spaces`)."""
    async with open_ports(url, space=NEW, settings=s) as ports:
        assert ports.cache is not None
        return [sp.identity for sp in await read_spaces(ports.cache)]


async def test_a_write_after_drop_old_from_a_process_connected_before_is_forgotten(
    tmp_path: Path, backend: str
) -> None:
    """`--drop-old` keeps the emptied old space on the list of spaces: a process
    connected before the switch may still write there, and a forget reaches
    that write through the list whatever the recorded switch names by then (its
    own fallback covers only a local default's space). Before, the emptied
    space was taken off the list (the listing assertion fails)."""
    s = settings(tmp_path, embedder="hashing")
    url = backend
    await _remember(url, s)
    async with connect(url, settings=s) as late:
        assert late.embedder.space == OLD
        await reembed(url, to_model="hashing", dimension=64, settings=s)
        done = await reembed(url, to_model="hashing", dimension=64, drop_old=True, settings=s)
        assert done.complete
        assert not done.old_kept
        assert await _contents(url, s, OLD, "alice") == []
        assert set(await _listed_spaces(url, s)) == {OLD.identity, NEW.identity}
        # a second re-embed: the recorded switch is now 64 -> 32
        assert (await reembed(url, to_model="hashing", dimension=32, settings=s)).complete
        await late.users.reconcile(
            user_id="alice",
            namespace="assistant",
            candidates=[FactCandidate(f"Alice named her new iguana {SECRET} Jr", "preference")],
        )
    assert await _contents(url, s, OLD, "alice")
    async with connect(url, settings=s) as m:
        assert m.embedder.space == HashingEmbedder(32).space
        assert (await m.users.forget("alice")).failures == ()
    assert await _contents(url, s, OLD, "alice") == []
    if url.startswith("sqlite"):
        assert sqlite_rows_with(tmp_path / "m.db", SECRET) == []


async def test_a_switch_recorded_before_the_list_still_has_its_old_space_forgotten(
    tmp_path: Path,
) -> None:
    """A deployment re-embedded before the list of spaces existed has only the
    switch: its old space, a local default's, is still reached."""
    url, s = await _reembedded(tmp_path)
    async with open_ports(url, space=NEW, settings=s) as ports:
        assert ports.cache is not None
        assert await ports.cache.delete_prefix(SWITCH_SCOPE, SPACE_PREFIX) == 2
    assert await _listed_spaces(url, s) == []
    async with connect(url, settings=s) as m:
        assert m.embedder.space == NEW
        assert (await m.users.forget("alice")).failures == ()
    assert await _contents(url, s, OLD, "alice") == []
    assert sqlite_rows_with(tmp_path / "m.db", SECRET) == []


# --- the list of spaces under concurrent re-embeds --------------------------------

SPACES = [HashingEmbedder(d).space for d in range(8, 8 + 12)]


class YieldingCache:
    """A cache whose every call yields to the event loop first, as a network or
    file cache does: concurrent read-then-write sequences interleave."""

    def __init__(self, inner: InMemoryCache) -> None:
        self.inner = inner

    async def get(self, scope: str, key: str) -> bytes | None:
        await asyncio.sleep(0)
        return await self.inner.get(scope, key)

    async def put(self, scope: str, key: str, value: bytes, ttl: Any = None) -> None:
        await asyncio.sleep(0)
        await self.inner.put(scope, key, value, ttl)

    async def delete(self, scope: str, key: str) -> bool:
        await asyncio.sleep(0)
        return await self.inner.delete(scope, key)

    async def delete_prefix(self, scope: str, prefix: str) -> int:
        await asyncio.sleep(0)
        return await self.inner.delete_prefix(scope, prefix)

    async def entries(self, scope: str, prefix: str = "") -> list[CacheEntry]:
        await asyncio.sleep(0)
        return await self.inner.entries(scope, prefix)

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


class UnlistedCache(YieldingCache):
    """The same without `entries`: a cache that cannot enumerate its keys."""

    entries = None  # type: ignore[assignment]


async def test_spaces_recorded_at_once_are_all_listed() -> None:
    """When this fails, two re-embeds recording their spaces at once each read the
    list and wrote it back with only their own added: a forget then missed the
    space the other wrote, and the user's facts stayed there."""
    cache = YieldingCache(InMemoryCache())
    await asyncio.gather(*(record_space(cache, sp) for sp in SPACES))
    assert {sp.identity for sp in await read_spaces(cache)} == {sp.identity for sp in SPACES}


async def test_a_list_written_in_one_entry_is_still_read() -> None:
    """A deployment whose list was written as one entry (`SPACES_KEY`) by an
    earlier version, and a cache that cannot list keys, which keeps writing it."""
    cache = YieldingCache(InMemoryCache())
    await _write_spaces(cache, SPACES[:2])
    await record_space(cache, SPACES[2])
    assert [sp.identity for sp in await read_spaces(cache)] == [s.identity for s in SPACES[:3]]
    unlisted: Cache = UnlistedCache(InMemoryCache())
    for sp in [*SPACES[:3], SPACES[1]]:
        await record_space(unlisted, sp)
    assert [sp.identity for sp in await read_spaces(unlisted)] == [sp.identity for sp in SPACES[:3]]
    assert await unlisted.get(SWITCH_SCOPE, SPACES_KEY) is not None


async def test_spaces_recorded_at_once_on_each_backend(backend: str, tmp_path: Path) -> None:
    """Concurrent writers, each with its own connection to the deployment's cache."""
    s = settings(tmp_path, embedder="hashing")

    async def one(space: EmbeddingSpace) -> None:
        async with open_ports(backend, space=OLD, settings=s) as ports:
            assert ports.cache is not None
            await record_space(ports.cache, space)

    await asyncio.gather(*(one(sp) for sp in SPACES[:6]))
    async with open_ports(backend, space=OLD, settings=s) as ports:
        assert ports.cache is not None
        listed = {sp.identity for sp in await read_spaces(ports.cache)}
        assert listed == {sp.identity for sp in SPACES[:6]}
        # the session's server is shared: leave no list behind
        await ports.cache.delete_prefix(SWITCH_SCOPE, SPACE_PREFIX)
        assert await read_spaces(ports.cache) == []


async def test_a_langgraph_delete_after_a_reembed_empties_the_kept_old_space(
    tmp_path: Path, backend: str
) -> None:
    """When this fails, an item deleted through the LangGraph store stayed in the
    old space a re-embed keeps until `--drop-old` (its value and its vectors):
    deleted for reads, still stored."""
    from agent_memory.entrypoints.langgraph import AgentMemoryStore
    from agent_memory.entrypoints.langgraph.store import REGISTRY_OWNER

    s = settings(tmp_path, embedder="hashing")
    ns = ("alice", "notes")
    async with connect(backend, settings=s) as m:
        store = AgentMemoryStore(m, index={"fields": ["text"]})
        await store.aput(ns, "pet", {"text": f"my iguana is named {SECRET}"})
        await store.aput(ns, "hobby", {"text": "theremin on Sundays"})
        await store.aput(("bob", "notes"), "pet", {"text": "a cat"})
    done = await reembed(backend, to_model="hashing", dimension=64, settings=s)
    assert done.complete
    assert any(SECRET in c for c in await _contents(backend, s, OLD, "alice"))
    async with connect(backend, settings=s) as m:
        assert m.embedder.space == NEW
        store = AgentMemoryStore(m, index={"fields": ["text"]})
        await store.adelete(ns, "pet")
        await store.adelete(("bob", "notes"), "pet")  # bob's last item: its namespace goes
        assert await store.aget(ns, "pet") is None
        assert await store.aget(ns, "hobby") is not None
        assert await store.alist_namespaces() == [ns]
    for space in (NEW, OLD):
        left = await _contents(backend, s, space, "alice")
        assert not any(SECRET in c for c in left), (space.identity, left)
        assert any("theremin" in c for c in left), (space.identity, left)  # the other item stays
        assert await _contents(backend, s, space, "bob") == []
        registry = await _contents(backend, s, space, REGISTRY_OWNER)
        assert not any("bob" in c for c in registry), (space.identity, registry)
        assert any("alice" in c for c in registry), (space.identity, registry)
    if backend.startswith("sqlite"):
        assert sqlite_rows_with(tmp_path / "m.db", SECRET) == []


async def test_forgetting_a_user_removes_their_langgraph_namespaces_everywhere(
    tmp_path: Path, backend: str
) -> None:
    """When this fails, `users.forget(user)` left the LangGraph store's registry
    entries of the user's namespaces (first label the user id), which name the
    user and the namespaces: the items went with the user's scope, the entries
    stayed, in the space reads use or the old one a re-embed kept."""
    from agent_memory.entrypoints.langgraph import AgentMemoryStore
    from agent_memory.entrypoints.langgraph.store import REGISTRY_OWNER

    s = settings(tmp_path, embedder="hashing")
    async with connect(backend, settings=s) as m:
        store = AgentMemoryStore(m, index={"fields": ["text"]})
        await store.aput(("alice", "medical"), "k", {"text": f"note {SECRET}"})
        await store.aput(("bob", "notes"), "k", {"text": "a cat"})
    assert (await reembed(backend, to_model="hashing", dimension=64, settings=s)).complete
    async with connect(backend, settings=s) as m:
        store = AgentMemoryStore(m, index={"fields": ["text"]})
        await store.aput(("alice", "diary"), "k", {"text": "written after the switch"})
        receipt = await m.users.forget("alice")
        assert receipt.failures == ()
        assert [(d.kind, d.count) for d in receipt.derived] == [("langgraph_namespaces", 2)]
        assert await store.alist_namespaces() == [("bob", "notes")]
    for space in (NEW, OLD):
        registry = await _contents(backend, s, space, REGISTRY_OWNER)
        assert not any("alice" in c for c in registry), (space.identity, registry)
        assert await _contents(backend, s, space, "alice") == []
    assert any("bob" in c for c in await _contents(backend, s, NEW, REGISTRY_OWNER))
    if backend.startswith("sqlite"):
        rows = [t for t in sqlite_rows_with(tmp_path / "m.db", "alice") if t != "audit_log"]
        assert rows == []  # the audit trail names the subject by design (docs/audit.md)
