"""Where digests, distilled knowledge, claims, activity signals and the prompt
views meet, on every backend (memory, SQLite, Redis, PostgreSQL).

Interleavings are deterministic: a hook runs the interfering operation (a
forget, a release) right after a chosen round trip of the port, or the
renewal loop's sleep is replaced by a tick the test gives.

- An event is identified by (domain, id): a global event of another domain may
  reuse a local event's id. The digest cache keyed the events it represents by
  id alone, so such a global event never reached a cached digest (the
  decision said "unchanged window"); the `<agent_memory>` view deduplicated by
  id alone, so it hid the second event and reported it as a duplicate.
- A reflection pass racing a forget: the pass read the user's events, the
  forget erased them and deleted the user's fragments, then the pass stored a
  fragment distilled from the erased events — after the forget had returned.
- A request's activity signal that expired between two renewals (a backend
  outage longer than the TTL, a paused process) was dropped for good: the
  request stayed invisible to the other agents for the rest of its run.
- A claim whose holder let it go between the acquire that found it held and
  the read of the holder came back neither acquired nor held by anyone.
- A digest cache entry whose event times cannot be read made the planning
  hook raise a bare ValueError instead of failing open.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import InMemoryCache, InMemoryEventLog
from agent_memory.bootstrap import Settings, Stores, open_stores
from agent_memory.domain.digest import (
    EXTRACTIVE_FINGERPRINT,
    CacheEntry,
    DecisionPath,
    decide,
    window_fingerprint,
)
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import Entity, Event
from agent_memory.domain.views import render_agent_memory
from agent_memory.ports.storage import TripleStore
from agent_memory.services import request as request_module
from agent_memory.services.compaction import CACHE_KEY, Compactor, CompactorOptions
from agent_memory.services.coordination import (
    SIGNAL_PREFIX,
    Coordinator,
    claim_key,
    request_owner,
    signal_key,
)
from agent_memory.services.knowledge import KNOWLEDGE_NAMESPACE, KnowledgeService
from agent_memory.services.reflection import ReflectionJob
from agent_memory.services.request import AgentMemory, RequestOptions
from agent_memory.services.user_memory import UserMemory

from .test_forget_backends import EMB, SECRET, USER, Dump, backend

__all__ = ["backend"]  # the fixture: memory, sqlite, redis and postgres

Backend = tuple[str, Settings, Dump | None, TripleStore]
Hook = Callable[[], Awaitable[None]]
POD = Entity("pod", "web-1")


class _After:
    """Stands in for a port: after each awaited call it awaits `after(name)`."""

    def __init__(self, inner: Any, after: Callable[[str], Awaitable[None]]) -> None:
        self._inner, self._after = inner, after

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            out = await attr(*args, **kwargs)
            await self._after(name)
            return out

        return call


async def _open(url: str, settings: Settings) -> Stores:
    stores = await open_stores(url, space=EMB.space, settings=settings)
    assert stores.events is not None
    assert stores.leases is not None
    assert stores.cache is not None
    return stores


def _event(
    id: str, domain: str, summary: str, at: datetime, *, is_global: bool = False, **kw: Any
) -> Event:
    return Event(
        id=id,
        domain=domain,
        agent="a",
        action="act",
        outcome="ok",
        summary=summary,
        occurred_at=at,
        recorded_at=at,
        is_global=is_global,
        **kw,
    )


# -- events are identified by (domain, id): the digest cache --------------------


async def test_a_global_event_reusing_a_local_event_id_reaches_the_cached_digest(
    backend: Backend,
) -> None:
    """A local event `r1#0` of k8s is digested and cached; then a global event
    of domain ops, also `r1#0` (ids are unique per domain only), enters k8s's
    window. The next digest must not reuse the cached one as "unchanged": it
    leaves the global event out. When it fails, the cache entry's represented
    events (or the decision) identify events by id without their domain."""
    url, settings, _dump, _ = backend
    stores = await _open(url, settings)
    try:
        assert stores.events is not None
        assert stores.cache is not None
        compactor = Compactor(events=stores.events, cache=stores.cache, clock=SystemClock())
        now = datetime.now(UTC).replace(microsecond=0)
        await stores.events.append(
            [_event("r1#0", "k8s", "local restart", now - timedelta(minutes=9))]
        )
        first = await compactor.digest("k8s")
        assert first.path is DecisionPath.FULL
        await stores.events.append(
            [_event("r1#0", "ops", "GLOBAL OUTAGE", now - timedelta(minutes=3), is_global=True)]
        )
        second = await compactor.digest("k8s")
        assert second.path is not DecisionPath.CACHED, second.report.details
        assert second.digest is not None
        assert "GLOBAL OUTAGE" in second.digest
        assert "2 events" in second.digest
        third = await compactor.digest("k8s")
        assert third.path is DecisionPath.CACHED, "both events are represented now"
        assert third.digest == second.digest
    finally:
        await stores.close()


async def test_the_cache_decision_tells_same_id_events_of_two_domains_apart() -> None:
    """An entry representing (k8s, e1), read back from the cache: a window holding
    it and (ops, e1) has one event to add; a window where only (ops, e1) is
    left has lost the represented event."""
    at = datetime.now(UTC).replace(microsecond=0)
    local = _event("e1", "k8s", "local", at - timedelta(minutes=2))
    other = _event("e1", "ops", "global", at - timedelta(minutes=1), is_global=True)
    log, cache = InMemoryEventLog(), InMemoryCache()
    compactor = Compactor(events=log, cache=cache, clock=SystemClock())
    await log.append([local])
    assert (await compactor.digest("k8s")).path is DecisionPath.FULL
    raw = await cache.get("k8s", CACHE_KEY)
    assert raw is not None
    entry = CacheEntry.from_bytes(raw)
    fp = window_fingerprint(compactor._policy("k8s"), EXTRACTIVE_FINGERPRINT)
    grown = decide(entry, window_fp=fp, window=[other, local], limited=False, threshold=5)
    assert grown.path is DecisionPath.INCREMENTAL, grown
    assert len(grown.added) == 1
    swapped = decide(entry, window_fp=fp, window=[other], limited=False, threshold=5)
    assert swapped.path is DecisionPath.FULL_RECOMPACT, swapped


# -- events are identified by (domain, id): the <agent_memory> view ---------------

_T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)
_SAME_ID_EVENTS = st.lists(
    st.tuples(
        st.sampled_from(("e1", "e2", "r1#0")),
        st.sampled_from(("k8s", "ops")),
        st.text(max_size=30),
        st.integers(0, 3600),
    ),
    max_size=8,
).map(
    lambda rows: [
        _event(i, d, s, _T0 - timedelta(seconds=age), is_global=d != "k8s") for i, d, s, age in rows
    ]
)


@given(events=_SAME_ID_EVENTS, history=_SAME_ID_EVENTS, budget=st.integers(0, 3000))
@example(
    events=[
        _event("r1#0", "ops", "GLOBAL OUTAGE", _T0 - timedelta(minutes=5), is_global=True),
        _event("r1#0", "k8s", "local step", _T0 - timedelta(minutes=9)),
    ],
    history=[],
    budget=8000,
)
def test_the_view_counts_as_duplicates_only_events_it_already_saw(
    events: list[Event], history: list[Event], budget: int
) -> None:
    """Whatever the budget: a section's duplicates are exactly its events whose
    (domain, id) came earlier in the view, the rest are admitted or omitted, the
    view stays within its budget, and it is `complete` only when every distinct
    event is shown. When it fails, the view deduplicates events by id alone."""
    view = render_agent_memory(
        domain="k8s",
        as_of=_T0,
        events=events,
        entity=POD,
        entity_events=history,
        budget_bytes=budget,
    )
    assert len(view.text.encode("utf-8")) <= budget
    seen: set[tuple[str, str]] = set()
    for name, section in (("domain_events", events), ("entity_history", history)):
        expected = 0
        for e in section:
            if (e.domain, e.id) in seen:
                expected += 1
            seen.add((e.domain, e.id))
        report = view.report.section(name)
        assert report.duplicates == expected, (name, report)
        assert report.admitted + report.omitted + report.duplicates == len(section)
    if view.report.outcome == "complete":
        shown = sum(view.report.section(n).admitted for n in ("domain_events", "entity_history"))
        assert shown == len(seen)


# -- distilled knowledge racing a forget -------------------------------------------


class _HookModel:
    """A language model that runs `hook()` (the forget) once, inside its first
    call, then answers; `echo` makes the answer say whether the prompt (the
    events it distils) quoted the forgotten user's text."""

    fingerprint = "hook-model"
    stable = True

    def __init__(self, answer: str, hook: Hook | None = None, *, echo: bool = False) -> None:
        self.answer, self.hook, self.echo = answer, hook, echo

    async def complete(
        self, prompt: str, *, max_tokens: int, timeout: float, system: str | None = None
    ) -> str:
        if self.hook is not None:
            hook, self.hook = self.hook, None
            await hook()
        if self.echo:
            said = f"web-1 restarts for {SECRET}" if SECRET in prompt else "web-1 restarts for ops"
            return json.dumps([{"content": said, "importance": 0.8}])
        return self.answer


def _web1_events(old: datetime, users: dict[str, int], domain: str = "k8s") -> list[Event]:
    """web-1's aged events: `n` per user id, the forgotten user's quoting SECRET."""
    out: list[Event] = []
    for user, n in users.items():
        for _ in range(n):
            i = len(out)
            text = f"restart {i} for {SECRET}" if user == USER else f"restart {i} for ops"
            out.append(
                _event(
                    f"e{i}",
                    domain,
                    text,
                    old + timedelta(minutes=i),
                    entities=(POD,),
                    user_id=user,
                )
            )
    return out


async def test_a_reflection_pass_racing_a_forget_keeps_no_fragment_of_the_erased_events(
    backend: Backend,
) -> None:
    """web-1's aged events: six of the forgotten user's, six of another user's.
    For every round trip of the pass's event reads, the whole `forget(USER)`
    runs right after it. Afterwards (and after the next pass) no knowledge
    fragment quotes the user or names it: web-1 has at most the fragment
    distilled from the other user's events. When it fails, the pass stored a
    fragment distilled from events the forget erased while the pass ran (the
    forget deleted the user's fragments before that one existed), or it
    advanced the domain's watermark past the withdrawn distillation."""
    url, settings, dump, _ = backend
    clock = SystemClock()
    stores = await _open(url, settings)
    try:
        assert stores.events is not None
        assert stores.leases is not None
        users = UserMemory(
            store=stores.store, embedder=EMB, clock=clock, events=stores.events, cache=stores.cache
        )
        knowledge = KnowledgeService(store=stores.store, embedder=EMB, clock=clock)
        step = 0
        while True:
            step += 1
            domain = f"k8s-{step}"  # each step on fresh events, fragments and watermark
            old = datetime.now(UTC).replace(microsecond=0) - timedelta(days=10)
            await stores.events.append(_web1_events(old, {USER: 6, "u2": 6}, domain))
            forgot: list[Any] = []
            trips = 0

            async def after(_name: str, at: int = step, forgot: list[Any] = forgot) -> None:
                nonlocal trips
                trips += 1
                if trips == at:
                    forgot.append(await users.forget(USER))

            for events in (_After(stores.events, after), stores.events):  # a pass, the next
                job = ReflectionJob(
                    events=events,
                    leases=stores.leases,
                    knowledge=knowledge,
                    clock=clock,
                    llm=_HookModel("", echo=True),
                )
                assert (await job.run_once([domain])).ran
                if not forgot:
                    break
                assert forgot[0].complete, forgot[0].failures
                page = await stores.store.list(domain, namespace=KNOWLEDGE_NAMESPACE)
                leaked = [
                    r.content
                    for r in page.records
                    if SECRET in r.content or USER in json.dumps(r.attributes)
                ]
                assert leaked == [], (
                    f"step {step} of {trips}: a fragment of the forgotten user's erased "
                    f"events outlived the forget: {leaked}"
                )
            if not forgot:  # past the pass's last round trip
                assert step > 2, "the pass reads events more than once"
                assert (await users.forget(USER)).complete  # leave no SECRET behind
                break
            # what is left of web-1 is distilled from the other user's events only
            # (or nothing: a forget after the pass stored its fragment deletes it)
            page = await stores.store.list(domain, namespace=KNOWLEDGE_NAMESPACE)
            assert [r.content for r in page.records] in ([], ["web-1 restarts for ops"]), step
            assert all(r.attributes.get("users") == ["u2"] for r in page.records)
            if dump is not None:
                assert SECRET not in await dump(), f"step {step}: the user's text in the backend"
    finally:
        await stores.close()


async def test_a_reflection_pass_whose_model_call_overlaps_a_forget_withdraws_its_fragment(
    backend: Backend,
) -> None:
    """The forget runs inside the model call (after every event read): the
    fragment the model returns is withdrawn, not stored, and the watermark of
    the domain stays where it was, so the next pass distils web-1 again from
    the other user's events."""
    url, settings, _dump, _ = backend
    clock = SystemClock()
    stores = await _open(url, settings)
    try:
        assert stores.events is not None
        assert stores.leases is not None
        old = datetime.now(UTC).replace(microsecond=0) - timedelta(days=10)
        await stores.events.append(_web1_events(old, {USER: 3, "u2": 5}))
        users = UserMemory(
            store=stores.store, embedder=EMB, clock=clock, events=stores.events, cache=stores.cache
        )
        forgot: list[Any] = []

        async def forget() -> None:
            forgot.append(await users.forget(USER))

        knowledge = KnowledgeService(store=stores.store, embedder=EMB, clock=clock)
        job = ReflectionJob(
            events=stores.events,
            leases=stores.leases,
            knowledge=knowledge,
            clock=clock,
            llm=_HookModel("", forget, echo=True),
        )
        first = await job.run_once(["k8s"])
        assert forgot
        assert forgot[0].complete
        page = await stores.store.list("k8s", namespace=KNOWLEDGE_NAMESPACE)
        assert [r.content for r in page.records] == [], "the fragment of erased events was stored"
        assert "k8s" not in first.report.details.get("watermarks", {}), first.report.as_dict()
        again = ReflectionJob(
            events=stores.events,
            leases=stores.leases,
            knowledge=knowledge,
            clock=clock,
            llm=_HookModel("", echo=True),
        )
        second = await again.run_once(["k8s"])
        assert second.report.ok, second.report.as_dict()
        page = await stores.store.list("k8s", namespace=KNOWLEDGE_NAMESPACE)
        assert [r.content for r in page.records] == ["web-1 restarts for ops"]
        assert page.records[0].attributes["events"] == 5
        assert page.records[0].attributes["users"] == ["u2"]
    finally:
        await stores.close()


# -- activity signals: renewal after expiry -----------------------------------------


class _Ticks:
    """Replaces `asyncio` in the request module: its `sleep` waits for a tick the
    test gives (and says it is waiting), everything else is asyncio's."""

    def __init__(self) -> None:
        self.ticks: asyncio.Queue[None] = asyncio.Queue()
        self.waiting = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, _seconds: float) -> None:
        self.waiting.set()
        await self.ticks.get()

    async def tick(self) -> None:
        """Let the renewal loop run one round, and wait until it is back asleep."""
        self.waiting.clear()
        self.ticks.put_nowait(None)
        await asyncio.wait_for(self.waiting.wait(), 10)


async def test_a_signal_that_expired_between_renewals_is_announced_again(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request's signal is gone when its renewal comes (it expired: a
    backend outage or a pause longer than the TTL; here it is freed exactly as
    an expiry frees it). The request is still running, and its signal key is
    its own: the renewal announces it again, with the latest status, instead
    of leaving the request invisible to the others for the rest of its run."""
    url, settings, _dump, _ = backend
    ticks = _Ticks()
    await asyncio.sleep(0)
    monkeypatch.setattr(request_module, "asyncio", ticks)
    stores = await _open(url, settings)
    try:
        assert stores.leases is not None
        assert stores.events is not None
        memory = AgentMemory(
            events=stores.events,
            leases=stores.leases,
            clock=SystemClock(),
            options=RequestOptions(signal_ttl=timedelta(minutes=5)),
        )
        async with memory.request(
            agent="A", domain="k8s", request_id="r1", entities=[POD], doing="triage"
        ) as req:
            await asyncio.wait_for(ticks.waiting.wait(), 10)
            key, owner = signal_key("A", "r1"), request_owner("A", "r1")
            assert [x.key for x in await stores.leases.scan("k8s", SIGNAL_PREFIX)] == [key]
            await ticks.tick()  # an ordinary renewal
            assert req.reports["activity-renewal"].ok
            assert await stores.leases.release("k8s", key, owner), "the signal lapses"
            req.status("waiting for approval")
            await ticks.tick()
            signals = await stores.leases.scan("k8s", SIGNAL_PREFIX)
            assert [x.key for x in signals] == [key], (
                "the running request's expired signal was not announced again: "
                f"{req.reports['activity-renewal'].as_dict()}"
            )
            assert json.loads(signals[0].payload)["status"] == "waiting for approval"
            await ticks.tick()  # and it is renewed from then on
            assert [x.key for x in await stores.leases.scan("k8s", SIGNAL_PREFIX)] == [key]
        assert await stores.leases.scan("k8s", "") == [], "the exit releases it"
    finally:
        await stores.close()


# -- claims: the holder goes away between the acquire and the holder read -------


class _Interleaved:
    """A lease store whose `acquire` returning None is followed by `hook()`."""

    def __init__(self, inner: Any, hook: Hook) -> None:
        self._inner, self._hook = inner, hook

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def acquire(self, *args: Any, **kwargs: Any) -> Any:
        lease = await self._inner.acquire(*args, **kwargs)
        if lease is None:
            await self._hook()
        return lease


async def test_a_claim_freed_between_the_acquire_and_the_holder_read_is_taken(
    backend: Backend,
) -> None:
    """A holds web-1; B's acquire finds it held, then A releases it before B
    reads who holds it. B must not come back with "not acquired, held by
    nobody" (then nobody holds the claim and B believes someone does): it
    takes the free claim. When it fails, `Coordinator.claim` reads the holder
    once and gives up when it is gone."""
    url, settings, _dump, _ = backend
    stores = await _open(url, settings)
    try:
        assert stores.leases is not None
        ttl = timedelta(minutes=5)
        a = Coordinator(stores.leases, "k8s", ttl)
        now = datetime.now(UTC)
        assert (await a.claim("A", "ra", POD, now)).acquired

        async def release_a() -> None:
            await a.release("A", "ra", [claim_key(POD)])

        b = Coordinator(_Interleaved(stores.leases, release_a), "k8s", ttl)  # type: ignore[arg-type]
        result = await b.claim("B", "rb", POD, now)
        holder = await stores.leases.get("k8s", claim_key(POD))
        assert result.acquired, result
        assert holder is not None
        assert holder.owner == request_owner("B", "rb"), holder
    finally:
        await stores.close()


async def test_two_agents_claiming_with_interleaved_releases_never_both_hold(
    backend: Backend,
) -> None:
    """Many rounds of two agents claiming the same entity at once while the
    previous holder lets go right after a loser's acquire: each round ends with
    exactly one agent that believes it holds the claim, it is the store's
    holder, and the other names a holder (never "held by nobody")."""
    url, settings, _dump, _ = backend
    stores = await _open(url, settings)
    try:
        assert stores.leases is not None
        ttl = timedelta(minutes=5)
        base = Coordinator(stores.leases, "k8s", ttl)
        now = datetime.now(UTC)
        for n in range(6):
            assert (await base.claim("Z", f"z{n}", POD, now)).acquired
            released = False

            async def release_z(n: int = n) -> None:
                nonlocal released
                if not released:
                    released = True
                    await base.release("Z", f"z{n}", [claim_key(POD)])

            agents = [
                Coordinator(_Interleaved(stores.leases, release_z), "k8s", ttl)  # type: ignore[arg-type]
                for _ in range(2)
            ]
            results = await asyncio.gather(
                *(c.claim(f"A{i}", f"r{n}-{i}", POD, now) for i, c in enumerate(agents))
            )
            holder = await stores.leases.get("k8s", claim_key(POD))
            winners = [i for i, r in enumerate(results) if r.acquired]
            assert len(winners) == 1, results
            assert holder is not None
            assert holder.owner == request_owner(f"A{winners[0]}", f"r{n}-{winners[0]}")
            loser = results[1 - winners[0]]
            # who held it when the loser looked: the winner, or Z not yet gone
            assert loser.holder_agent in (f"A{winners[0]}", "Z"), loser
            await base.release(f"A{winners[0]}", f"r{n}-{winners[0]}", [claim_key(POD)])
    finally:
        await stores.close()


# -- fail-open: an unreadable digest cache entry -------------------------------------


@pytest.mark.parametrize(
    "occurred",
    ["yesterday", "2026-01-01T00:00:00", 7, None],
    ids=["not-a-time", "naive", "a-number", "null"],
)
async def test_an_unreadable_digest_entry_fails_open_in_the_planning_hook(
    backend: Backend, occurred: object
) -> None:
    """The domain's cached digest entry names an event time that is not an aware
    ISO timestamp (a damaged or foreign entry). The planning hook still returns
    its views and reports a `cache-read` failure; the compaction goes on as if
    there were no entry. When it fails, `CacheEntry.from_bytes` accepted the
    entry and the cache decision raised on it."""
    url, settings, _dump, _ = backend
    stores = await _open(url, settings)
    try:
        assert stores.events is not None
        assert stores.leases is not None
        assert stores.cache is not None
        clock = SystemClock()
        compactor = Compactor(
            events=stores.events,
            cache=stores.cache,
            clock=clock,
            options=CompactorOptions(raw_limit=2),  # a full window: times get compared
        )
        now = datetime.now(UTC)
        await stores.events.append(
            [_event(f"e{i}", "k8s", f"s{i}", now - timedelta(minutes=i + 1)) for i in range(3)]
        )
        fp = window_fingerprint(compactor._policy("k8s"), EXTRACTIVE_FINGERPRINT)
        gone = {"gone": ["f", occurred]}
        raw = {"window_fp": fp, "digest": "d", "represented": gone, "created_at": "c"}
        raw["model_fingerprint"] = EXTRACTIVE_FINGERPRINT
        await stores.cache.put("k8s", CACHE_KEY, json.dumps(raw).encode())
        memory = AgentMemory(
            events=stores.events, leases=stores.leases, clock=clock, compactor=compactor
        )
        async with memory.request(agent="A", domain="k8s", request_id="r1") as req:
            ctx = await req.planning_context()
        assert "<agent_memory>" in ctx.agent_memory
        assert [f.operation for f in ctx.report.failures] == ["cache-read"]
        assert ctx.report.details["digest"]["path"] == "full"
        with pytest.raises(InvalidInput, match="digest cache entry"):
            CacheEntry.from_bytes(json.dumps(raw).encode())
    finally:
        await stores.close()
