"""Mends of a code review.

1. One helper (`domain.bounded_names.fit_or_digest`) derives the bounded keys
   of the user cache scope, the coordination keys and the LangGraph layout's
   names: the keys of data users already stored, so each caller's output is
   compared, byte for byte, against a frozen copy of the function it replaced.
2. `KnowledgeService` registers a domain with one add (no read first) and keeps
   no process-wide "registered" set a forget of the registry would leave stale.
3. An extraction that withdraws its fragments (its user forgotten meanwhile)
   withdraws only the versions it wrote: a fragment of the same text another
   request stored meanwhile stays.
4. An import that removes what it wrote of a user forgotten while it ran reads
   the target by listing pages, not one read per record.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Settings
from agent_memory.bootstrap.connect import connect
from agent_memory.domain.langgraph_layout import bounded_name, owner_of, registry_shard
from agent_memory.domain.records import Entity, MemoryRecord
from agent_memory.domain.time import SystemClock
from agent_memory.portability import export, import_file, ports_of
from agent_memory.ports.storage import VersionedWrites
from agent_memory.services.coordination import claim_key, request_owner, signal_key
from agent_memory.services.knowledge import (
    DOMAINS_OWNER,
    KNOWLEDGE_NAMESPACE,
    KnowledgeService,
    knowledge_domains,
)
from agent_memory.services.user_memory import UserMemory
from agent_memory.services.user_scope import user_cache_scope

from .conftest import Unversioned
from .scripted import ScriptedModel

# -- 1. one bounded-key helper, byte-identical to the three it replaced -----------------

_MAX = 512  # MAX_ID_BYTES, frozen with the functions below


def _frozen_user_cache_scope(user_id: str) -> str:
    scope = "user:" + json.dumps(user_id, ensure_ascii=False)
    if len(scope.encode("utf-8")) <= _MAX:
        return scope
    return "user:sha256:" + hashlib.sha256(user_id.encode("utf-8")).hexdigest()


def _frozen_coordination_bounded(prefix: str, parts: Sequence[str]) -> str:
    text = json.dumps(list(parts), ensure_ascii=False)
    if len((prefix + text).encode("utf-8")) <= _MAX:
        return prefix + text
    return prefix + "#" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _frozen_bounded_name(name: str) -> str:
    encoded = name.encode("utf-8")
    if len(encoded) <= _MAX:
        return name
    return "langgraph:" + "sha256:" + hashlib.sha256(encoded).hexdigest()


def _frozen_compact_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _frozen_owner_of(first: str) -> str:
    if first.strip() and not first.startswith("langgraph"):
        return _frozen_bounded_name(first)
    return _frozen_bounded_name("langgraph:" + _frozen_compact_json(first))


def _frozen_registry_shard(first: str) -> str:
    return _frozen_bounded_name("langgraph:registry:" + _frozen_compact_json(first))


#: Characters of every UTF-8 width, the JSON specials, separators, quotes, line
#: separators JSON leaves unescaped with ensure_ascii=False, and controls.
_TRICKY = ["a", "Z", "é", "€", "中", "😀", "𝄞", '"', "\\", ",", ":", "[", "]", "#", "'",
           " ", "\n", "\t", "\x01", "\x7f", "\u2028", "\u2029", "\ufeff", "{", "}", "|", "@",
           "*", "-", "user:", "sha256:", "langgraph", "signal:", "claim:"]  # fmt: skip
_NO_SURROGATES = st.characters(blacklist_categories=("Cs",))


def _near(low: int, high: int) -> st.SearchStrategy[str]:
    """Text whose UTF-8 length is around [low, high] bytes: runs of one
    character of each width, padded by tricky characters."""
    return st.builds(
        lambda ch, n, tail: ch * n + "".join(tail),
        st.sampled_from(["a", "é", "€", "😀", '"', "\\", "\n"]),
        st.integers(low // 4, high),
        st.lists(st.sampled_from(_TRICKY), max_size=6),
    ).filter(lambda s: low <= len(s.encode("utf-8")) <= high + 40)


_TEXT = st.one_of(
    st.text(_NO_SURROGATES, max_size=40),
    st.lists(st.sampled_from(_TRICKY), max_size=30).map("".join),
    _near(480, 540),
    _near(230, 280),  # two of them pass the bound together
    _near(160, 190),  # three of them
    st.text(_NO_SURROGATES, min_size=100, max_size=600),
)
_BOUNDARY = [
    "a" * 505,  # "user:" + '"' + 505 + '"' = 512: kept
    "a" * 506,  # 513: hashed
    '"' * 252,  # each quote escapes to two bytes: 5 + 2 + 504 = 511
    '"' * 253,
    "é" * 252,
    "😀" * 126,
    "",
]


@settings(max_examples=400, deadline=None)
@given(user=_TEXT)
@example(user="a" * 505)
@example(user="a" * 506)
@example(user='"' * 252)
@example(user='"' * 253)
@example(user="\\" * 253)
@example(user="😀" * 126 + "a")
def test_user_cache_scope_is_byte_identical_to_the_frozen_copy(user: str) -> None:
    """When this fails, the shared helper changed the cache scope of some user id:
    entries cached under the old scope would no longer be found (nor forgotten)."""
    assert user_cache_scope(user) == _frozen_user_cache_scope(user)


@settings(max_examples=400, deadline=None)
@given(a=_TEXT, b=_TEXT)
@example(a="a" * 252, b="b" * 252)  # request owner: 8 + 504 = 512 bytes, kept
@example(a="a" * 252, b="b" * 253)  # 513: hashed
@example(a="a" * 249, b="b" * 248)  # signal: 7 + 8 + 497 = 512
@example(a="a" * 249, b="b" * 249)  # signal: 513; claim: 6 + 8 + 498 = 512
@example(a="a" * 250, b="b" * 249)  # claim: 513
@example(a='"' * 130, b="\\" * 130)
@example(a="", b="")
def test_coordination_keys_are_byte_identical_to_the_frozen_copy(a: str, b: str) -> None:
    """When this fails, a signal key, claim key or request owner changed for some
    ids: leases held under the old keys would be invisible to new processes."""
    assert signal_key(a, b) == _frozen_coordination_bounded("signal:", [a, b])
    assert request_owner(a, b) == _frozen_coordination_bounded("", [a, b])
    storable = "\x00" not in a + b and len(a.encode()) <= _MAX and len(b.encode()) <= _MAX
    if a.strip() and b.strip() and storable:
        assert claim_key(Entity(a, b)) == _frozen_coordination_bounded("claim:", [a, b])


@settings(max_examples=400, deadline=None)
@given(name=_TEXT)
@example(name="a" * 512)
@example(name="a" * 513)
@example(name="é" * 256)
@example(name="é" * 256 + "a")
@example(name="langgraph:sha256:" + "0" * 64)
def test_langgraph_names_are_byte_identical_to_the_frozen_copy(name: str) -> None:
    """When this fails, a LangGraph owner, registry shard or record namespace
    changed for some labels: items stored under the old names would be lost."""
    assert bounded_name(name) == _frozen_bounded_name(name)
    if name:
        assert owner_of((name,)) == _frozen_owner_of(name)
    assert registry_shard(name) == _frozen_registry_shard(name)


def test_the_boundary_examples_hit_both_forms() -> None:
    """The strategies reach both sides of the bound (else the comparisons above
    would only ever check one form)."""
    kept = [u for u in _BOUNDARY if not _frozen_user_cache_scope(u).startswith("user:sha256:")]
    hashed = [u for u in _BOUNDARY if _frozen_user_cache_scope(u).startswith("user:sha256:")]
    assert kept, _BOUNDARY
    assert hashed, _BOUNDARY
    for user in _BOUNDARY:
        assert user_cache_scope(user) == _frozen_user_cache_scope(user)


# -- shared: stores, clocks, hooks ------------------------------------------------------

EMB = HashingEmbedder(64)
_AT = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


class _FixedClock:
    """Every write in the same microsecond: versions differ by their tags only."""

    def now(self) -> datetime:
        return _AT


class _Reads:
    """A store that counts its reads (`get` by owner, `list` and `search`)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.gets: Counter[str] = Counter()
        self.lists = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        self.gets[owner] += 1
        return await self._inner.get(owner, id)  # type: ignore[no-any-return]

    async def list(self, owner: str, **kw: Any) -> Any:
        self.lists += 1
        return await self._inner.list(owner, **kw)

    async def search(self, *args: Any, **kw: Any) -> Any:
        self.lists += 1
        return await self._inner.search(*args, **kw)

    def reset(self) -> None:
        self.gets.clear()
        self.lists = 0


Hook = Callable[[], Awaitable[None]]


class _ModelThen:
    """A model that runs `hook` (once) while its call is in flight, then answers."""

    def __init__(self, answer: str, hook: Hook) -> None:
        self._model = ScriptedModel([answer])
        self._hook: Hook | None = hook
        self.fingerprint = "hooked-v1"
        self.stable = True

    async def complete(self, prompt: str, **kw: Any) -> str:
        if self._hook is not None:
            hook, self._hook = self._hook, None
            await hook()
        return await self._model.complete(prompt, **kw)


class _CacheReadThen:
    """The cache, running `hook` (once) before its first `get`: the extraction's
    read of its in-flight mark, right after it stored its fragments."""

    def __init__(self, inner: Any, hook: Hook | None) -> None:
        self._inner, self._hook = inner, hook

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def get(self, scope: str, key: str) -> bytes | None:
        if self._hook is not None:
            hook, self._hook = self._hook, None
            await hook()
        return await self._inner.get(scope, key)  # type: ignore[no-any-return]


def _answer(*contents: str) -> str:
    return json.dumps([{"content": c, "importance": 0.5} for c in contents])


async def _knowledge(store: Any) -> list[MemoryRecord]:
    return list((await store.list("travel", namespace=KNOWLEDGE_NAMESPACE)).records)


# -- 2. the knowledge-domain registry is written again after it was deleted -------------


async def test_a_deleted_domain_registry_is_written_again_and_a_forget_finds_the_fragments(
    stores: Any,
) -> None:
    """When this fails, `KnowledgeService` remembered in process that it had
    registered the domain: after the registry was deleted (here by forgetting
    its owner id, as a user id) a later `learn()` did not register it again, so
    a forget (no event log to list the domain) left the user's fragments."""
    clock = SystemClock()
    knowledge = KnowledgeService(
        store=stores.store,
        embedder=EMB,
        clock=clock,
        llm=ScriptedModel([_answer("Visas take a week"), _answer("Ferries leave at dawn")]),
        cache=stores.cache,
    )
    users = UserMemory(store=stores.store, embedder=EMB, clock=clock, cache=stores.cache)
    first = await knowledge.extract(
        domain="travel", request_id="r1", result="done", wait=True, user_id="alice"
    )
    assert first.ok, first.failures
    assert await knowledge_domains(stores.store) == ["travel"]

    gone = await users.forget(DOMAINS_OWNER)
    assert gone.complete, gone.failures
    assert await knowledge_domains(stores.store) == []

    second = await knowledge.extract(
        domain="travel", request_id="r2", result="done", wait=True, user_id="alice"
    )
    assert second.ok, second.failures
    assert await knowledge_domains(stores.store) == ["travel"], (
        "a learn() after the registry was deleted did not register its domain again"
    )
    assert len(await _knowledge(stores.store)) == 2
    receipt = await users.forget("alice")
    assert receipt.complete, receipt.failures
    assert await _knowledge(stores.store) == [], "the forget did not find alice's fragments"


async def test_registering_a_domain_does_not_read_the_registry(stores: Any) -> None:
    """When this fails, `KnowledgeService._register` read the registry record
    before adding it: the add, its `DuplicateRecord` ignored, is enough. Every
    learn() registers (no in-process memory of it), each with that one add."""
    reads = _Reads(stores.store)
    knowledge = KnowledgeService(
        store=reads,
        embedder=EMB,
        clock=SystemClock(),
        llm=ScriptedModel([_answer("Visas take a week"), _answer("Ferries leave at dawn")]),
    )
    for request in ("r1", "r2"):
        report = await knowledge.extract(domain="travel", request_id=request, result="x", wait=True)
        assert report.ok, report.failures
    assert reads.gets[DOMAINS_OWNER] == 0, "the registry was read before it was written"
    assert await knowledge_domains(stores.store) == ["travel"]


# -- 3. a withdrawn extraction leaves another request's copy of a fragment --------------


@pytest.mark.parametrize("clock", [SystemClock(), _FixedClock()], ids=["system", "fixed"])
@pytest.mark.parametrize("other_stores", ["after", "before"])
async def test_a_withdrawn_extraction_keeps_the_same_fragment_of_another_request(
    stores: Any, clock: Any, other_stores: str
) -> None:
    """Request A (alice) and request B (bob) extract the same fragment text;
    alice is forgotten while A's model call runs, so A withdraws what it stored.
    B stores its copy `after` A stored (and before A withdraws) or `before` A
    stores (A's store then replaced B's version). Either way B's fragment, with
    B's tags, must stay; A's own fragment must go; a forget of bob then finds
    B's. When this fails, the withdrawal deleted by content address whatever
    was stored under it (or left A's tags on B's fragment)."""
    users = UserMemory(store=stores.store, embedder=EMB, clock=clock, cache=stores.cache)
    shared, own = "Ferries to the islands leave at dawn", "Alice's visa took a week"

    async def request_b() -> None:
        b = KnowledgeService(
            store=stores.store,
            embedder=EMB,
            clock=clock,
            llm=ScriptedModel([_answer(shared)]),
            cache=stores.cache,
        )
        report = await b.extract(
            domain="travel", request_id="rb", result="done", wait=True, user_id="bob"
        )
        assert report.ok, report.failures
        assert "withdrawn" not in report.details

    async def forget_alice() -> None:
        assert (await users.forget("alice")).complete
        if other_stores == "before":
            await request_b()

    a = KnowledgeService(
        store=stores.store,
        embedder=EMB,
        clock=clock,
        llm=_ModelThen(_answer(shared, own), forget_alice),
        cache=_CacheReadThen(stores.cache, request_b if other_stores == "after" else None),
    )
    report = await a.extract(
        domain="travel", request_id="ra", result="done", wait=True, user_id="alice"
    )
    assert report.ok, report.failures
    assert report.details["stored"] == 2
    left = await _knowledge(stores.store)
    assert [(r.content, r.attributes) for r in left] == [
        (shared, {"request_id": "rb", "user_id": "bob"})
    ], f"B's fragment (bob's tags) must stay, alice's must go; stored: {left!r}"
    receipt = await users.forget("bob")
    assert receipt.complete, receipt.failures
    assert await _knowledge(stores.store) == []


async def test_a_withdrawn_extraction_does_not_restore_a_version_of_the_same_user(
    stores: Any,
) -> None:
    """Two extractions of alice's requests run while alice is forgotten and store
    the same fragment: r2 first, then r1 (replacing r2's version); r1 withdraws,
    then r2. Nothing of alice's stays. When this fails, r1 put back the version
    it replaced although it was derived from the forgotten user too (and on a
    store with `VersionedWrites` r2 no longer recognised it as its own)."""
    clock = SystemClock()
    users = UserMemory(store=stores.store, embedder=EMB, clock=clock, cache=stores.cache)
    text = "Alice prefers aisle seats on night trains"
    a_in_model, b_stored, a_done = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def a_model() -> None:  # r1's mark is written: r2 may go on
        a_in_model.set()
        await b_stored.wait()

    async def b_model() -> None:  # both marks written: alice's forget deletes them
        await a_in_model.wait()
        assert (await users.forget("alice")).complete

    async def b_read_mark() -> None:  # r2 stored: r1 stores and withdraws first
        b_stored.set()
        await a_done.wait()

    def service(model_hook: Hook, read_hook: Hook | None) -> KnowledgeService:
        return KnowledgeService(
            store=stores.store,
            embedder=EMB,
            clock=clock,
            llm=_ModelThen(_answer(text), model_hook),
            cache=_CacheReadThen(stores.cache, read_hook),
        )

    async def run_a() -> Any:
        try:
            return await service(a_model, None).extract(
                domain="travel", request_id="r1", result="done", wait=True, user_id="alice"
            )
        finally:
            a_done.set()

    first, second = await asyncio.wait_for(
        asyncio.gather(
            run_a(),
            service(b_model, b_read_mark).extract(
                domain="travel", request_id="r2", result="done", wait=True, user_id="alice"
            ),
        ),
        timeout=20,
    )
    assert first.ok, first.failures
    assert second.ok, second.failures
    assert first.details["withdrawn"] == 1, first.details
    left = await _knowledge(stores.store)
    assert left == [], f"a fragment of the forgotten user stays: {left!r}"


# -- 4. an import un-writes a user forgotten while it ran by listing pages --------------


def _import_settings(tmp_path: Path) -> Settings:
    deployment = f"mend{datetime.now(UTC).timestamp():.6f}".replace(".", "")
    return attrs.evolve(
        Settings.from_env(),
        deployment=deployment,
        coordination_url=f"sqlite:///{tmp_path}/coord-{deployment}.db",
    )


def _records(owner: str, n: int, dimension: int, *, start: int = 0) -> list[MemoryRecord]:
    rng = np.random.default_rng(start)
    out = []
    for i in range(start, start + n):
        at = _AT + timedelta(milliseconds=37 * i)
        out.append(
            MemoryRecord(
                id=f"r-{i}",
                owner=owner,
                namespace="prefs" if i % 3 else "notes",
                kind="fact",
                content=f"fact number {i} about {owner}",
                vector=rng.standard_normal(dimension).astype(np.float32),
                created_at=at,
                updated_at=at + timedelta(seconds=1),
            )
        )
    return out


class _ForgetWhileTheBatchIsStored(_Reads):
    """The target's store: `users.forget(user)` completes while the import's
    batch is being stored (the batch lands after it), then another writer
    rewrites one of the user's records; reads are counted from then on (what
    the import does to remove what it wrote of the forgotten user)."""

    def __init__(self, memory: Any, user: str, rewrite: MemoryRecord) -> None:
        super().__init__(memory.store)
        self._memory, self._user, self._rewrite = memory, user, rewrite
        self.forgot = False

    async def add(self, batch: list[MemoryRecord]) -> None:
        if self.forgot:
            await self._inner.add(batch)
            return
        self.forgot = True
        receipt = await self._memory.users.forget(self._user)
        assert receipt.complete, receipt.failures
        await self._inner.add(batch)
        await self._inner.update(self._rewrite)  # written after the forget: kept
        self.reset()


@pytest.mark.parametrize("backend", ["sqlite", "sqlite-unversioned", "redis", "postgres"])
async def test_an_import_unwrites_a_forgotten_user_with_paged_reads(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    """A forget completes while the import stores the file's only batch (40
    records of ana's, 6 of bo's): at its end the import removes what it wrote
    of ana's, except the record another writer rewrote since (delete only the
    version the file has), and leaves bo's. When the read count fails, it read
    the target once per record of the forgotten user instead of listing the
    owner's records page by page."""
    s = _import_settings(tmp_path)
    source = f"sqlite:///{tmp_path}/source.db"
    async with connect(source, settings=s) as m:
        dimension = m.store.space.dimension
        ana, bo = _records("ana", 40, dimension), _records("bo", 6, dimension, start=40)
        await m.store.add([*ana, *bo])
    path = str(tmp_path / "backup.jsonl")
    await export(source, path, settings=s)
    rewritten = attrs.evolve(
        ana[7], content="rewritten after the forget", updated_at=ana[7].updated_at + timedelta(1)
    )
    url = f"sqlite:///{tmp_path}/target.db"
    if backend in ("redis", "postgres"):
        url = request.getfixturevalue(f"{backend}_url")
    async with connect(url, settings=_import_settings(tmp_path)) as m:
        store = _ForgetWhileTheBatchIsStored(m, "ana", rewritten)
        target: Any = Unversioned(store) if backend.endswith("unversioned") else store
        assert isinstance(target, VersionedWrites) != backend.endswith("unversioned")
        summary = await import_file(attrs.evolve(ports_of(m), store=target), path, batch_size=100)
        assert store.forgot
        assert summary.forgotten_users == 1
        reads = sum(store.gets.values()) + store.lists
        assert reads <= 3, (
            f"{reads} reads to un-write 40 records of one owner "
            f"({sum(store.gets.values())} gets, {store.lists} listings)"
        )
        left = (await m.store.list("ana")).records
        assert [(r.id, r.content) for r in left] == [(rewritten.id, rewritten.content)]
        assert len((await m.store.list("bo")).records) == len(bo)
