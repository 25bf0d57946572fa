"""A forget racing concurrent writers, made deterministic: a hook runs
`users.forget(user)` right after one chosen round trip of the writer, so the
whole forget lands between two of the writer's steps. Then the raw backend
(every SQLite table, every Redis key and value, every PostgreSQL table — the
scans of test_forget_backends) must hold nothing the forgotten user had
acknowledged before the forget started.

Digest rebuilds: a `Compactor` reads the domain's window (the user's events in
it), then builds and caches a digest. A forget that erased the events and
invalidated the digest between that read and the cache write used to leave a
digest quoting the erased events — found by no later forget either, since the
events that link the digest to the user were gone."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.bootstrap import Settings, open_stores
from agent_memory.domain.records import Event
from agent_memory.domain.triples import Triple
from agent_memory.ports.storage import TripleStore
from agent_memory.services.compaction import CACHE_KEY, Compactor
from agent_memory.services.graph_memory import GraphMemory
from agent_memory.services.knowledge import KNOWLEDGE_NAMESPACE, KnowledgeService
from agent_memory.services.user_memory import UserMemory, user_cache_scope

from .scripted import ScriptedModel
from .test_forget_backends import EMB, SECRET, USER, Dump, backend

__all__ = ["backend"]  # the fixture: memory, sqlite, redis and postgres

Hook = Callable[[], Awaitable[None]]


class _After:
    """Stands in for a port: after each awaited call it awaits `after()`."""

    def __init__(self, inner: Any, after: Hook) -> None:
        self._inner, self._after = inner, after

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            out = await attr(*args, **kwargs)
            await self._after()
            return out

        return call


def _event(id: str, user: str, summary: str, at: datetime) -> Event:
    return Event(
        id=id,
        domain="travel",
        agent="planner",
        action="plan",
        outcome="failed",
        summary=summary,
        occurred_at=at,
        recorded_at=at,
        user_id=user,
    )


async def test_forget_between_the_steps_of_a_digest_rebuild_leaves_no_digest_of_the_user(
    backend: tuple[str, Settings, Dump | None, TripleStore],
) -> None:
    """For every round trip of `Compactor.digest` (window read, cache read,
    cache write, ...): the user's forget runs right after it. Afterwards no
    cached digest quotes the user's erased events. When it fails, check that
    the compactor withdraws a digest whose events vanished while it built it."""
    url, settings, dump, _ = backend
    clock = SystemClock()
    stores = await open_stores(url, space=EMB.space, settings=settings)
    assert stores.events is not None
    assert stores.cache is not None
    users = UserMemory(
        store=stores.store, embedder=EMB, clock=clock, events=stores.events, cache=stores.cache
    )
    step = 1
    try:
        while True:
            await stores.cache.delete("travel", CACHE_KEY)
            now = datetime.now(UTC).replace(microsecond=0)
            await stores.events.append(
                [
                    _event("e1", USER, f"trip to {SECRET}", now),
                    _event("e2", "u2", "trip to Lisbon", now),
                ]
            )
            trips = 0
            forgot: list[Any] = []

            async def after(at: int = step, forgot: list[Any] = forgot) -> None:
                nonlocal trips
                trips += 1
                if trips == at:
                    forgot.append(await users.forget(USER))

            compactor = Compactor(
                events=_After(stores.events, after),
                cache=_After(stores.cache, after),
                clock=clock,
            )
            await compactor.digest("travel")
            assert forgot, f"step {step}: the forget ran"
            assert forgot[0].complete, forgot[0].failures
            cached = await stores.cache.get("travel", CACHE_KEY)
            assert cached is None or SECRET.encode() not in cached, (
                f"step {step} of {trips}: the cached digest quotes the forgotten "
                f"user's erased events: {cached!r}"
            )
            if dump is not None:
                raw = await dump()
                assert SECRET not in raw, f"step {step}: the user's text in the raw backend"
            # nor can a later forget find it: nothing stored links it to the user
            await users.forget(USER)
            cached = await stores.cache.get("travel", CACHE_KEY)
            assert cached is None or SECRET.encode() not in cached, f"step {step}"
            if step >= trips:
                break
            step += 1
    finally:
        await stores.close()


async def test_forget_between_the_steps_of_a_checkpoint_leaves_no_checkpoint_of_the_user(
    backend: tuple[str, Settings, Dump | None, TripleStore],
) -> None:
    """For every round trip of `GraphMemory.checkpoint` (the loop's triples read,
    the two cache writes, the re-check): the user's forget runs right after it.
    Afterwards no checkpoint quotes the user's erased triples. When it fails, the
    checkpoint written after the forget's delete outlived it (it quotes the
    decision triple the forget erased)."""
    url, settings, dump, triples = backend
    clock = SystemClock()
    stores = await open_stores(url, space=EMB.space, settings=settings)
    assert stores.cache is not None
    users = UserMemory(
        store=stores.store, embedder=EMB, clock=clock, cache=stores.cache, triples=triples
    )
    step = 1
    try:
        while True:
            now = datetime.now(UTC)
            await triples.add([Triple(USER, "loop", "user", "decided", f"on {SECRET}", now)])
            trips = 0
            forgot: list[Any] = []

            async def after(at: int = step, forgot: list[Any] = forgot) -> None:
                nonlocal trips
                trips += 1
                if trips == at:
                    forgot.append(await users.forget(USER))

            graph = GraphMemory(
                _After(triples, after), _After(stores.cache, after), None, clock=clock
            )
            await graph.checkpoint(USER, "loop", summary="step")
            assert forgot, f"step {step}: the forget ran"
            assert forgot[0].complete, forgot[0].failures
            plain_graph = GraphMemory(triples, stores.cache, None, clock=clock)
            last = await plain_graph.last_checkpoint(USER, "loop")
            assert last is None or all(SECRET not in d for d in last.decisions), (
                f"step {step} of {trips}: the checkpoint quotes the forgotten user's "
                f"erased triples: {last!r}"
            )
            if dump is not None:
                assert SECRET not in await dump(), (
                    f"step {step}: the user's text in the raw backend"
                )
            if step >= trips:
                break
            step += 1
    finally:
        await stores.close()


async def test_forget_between_the_steps_of_a_knowledge_extraction_leaves_no_fragment_of_the_user(
    backend: tuple[str, Settings, Dump | None, TripleStore],
) -> None:
    """For every round trip of a request's knowledge extraction (`learn`: the
    model call, the store, the cache) the user's forget runs right after it.
    Afterwards no fragment derived from the user's request is stored, and the
    raw backend holds none of its text. Without the in-flight mark, a forget
    that ran during the model call left the fragments stored after it."""
    url, settings, dump, _ = backend
    clock = SystemClock()
    stores = await open_stores(url, space=EMB.space, settings=settings)
    assert stores.cache is not None
    users = UserMemory(
        store=stores.store, embedder=EMB, clock=clock, events=stores.events, cache=stores.cache
    )
    answer = json.dumps([{"content": f"Trips to {SECRET} need a visa", "importance": 0.8}])
    step = 1
    try:
        while True:
            trips = 0
            forgot: list[Any] = []

            async def after(at: int = step, forgot: list[Any] = forgot) -> None:
                nonlocal trips
                trips += 1
                if trips == at:
                    forgot.append(await users.forget(USER))

            knowledge = KnowledgeService(
                store=_After(stores.store, after),
                embedder=_After(EMB, after),
                clock=clock,
                llm=_After(ScriptedModel([answer]), after),
                cache=_After(stores.cache, after),
            )
            report = await knowledge.extract(
                domain="travel", request_id=f"r{step}", result="done", wait=True, user_id=USER
            )
            assert report.ok, f"step {step}: {report.failures}"
            assert forgot, f"step {step}: the forget ran"
            assert forgot[0].complete, forgot[0].failures
            left = await stores.store.list("travel", namespace=KNOWLEDGE_NAMESPACE)
            assert [r.content for r in left.records] == [], (
                f"step {step} of {trips}: a fragment of the forgotten user's request is stored"
            )
            assert await stores.cache.delete_prefix(user_cache_scope(USER), "") == 0, (
                f"step {step}: the in-flight mark outlived the extraction"
            )
            if dump is not None:
                raw = await dump()
                assert SECRET not in raw, f"step {step}: the request's text in the raw backend"
            if step >= trips:
                break
            step += 1
    finally:
        await stores.close()
