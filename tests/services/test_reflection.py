"""The reflection job: distil old events per entity, one replica per pass."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import (
    HashingEmbedder,
    InMemoryEventLog,
    InMemoryLeaseStore,
    InMemoryMemoryStore,
)
from agent_memory.adapters.sqlite import SqliteEventLog
from agent_memory.domain.errors import BackendUnavailable
from agent_memory.domain.records import Entity, Event
from agent_memory.ports.storage import LeaseStore
from agent_memory.services.knowledge import KNOWLEDGE_NAMESPACE, KnowledgeService
from agent_memory.services.reflection import ReflectionJob, ReflectionReport

from .scripted import Delay, ScriptedModel

EMB = HashingEmbedder(64)
OLD = datetime.now(UTC) - timedelta(days=10)


def old_events(entity: Entity, n: int, start: int = 0) -> list[Event]:
    return [
        Event(
            id=f"{entity.id}-{i}",
            domain="k8s",
            agent="a",
            action="restart",
            outcome="failure",
            summary=f"restart {i} of {entity.id}",
            occurred_at=OLD + timedelta(minutes=i),
            recorded_at=OLD + timedelta(minutes=i),
            entities=(entity,),
        )
        for i in range(start, start + n)
    ]


@pytest.fixture(params=["memory", "sqlite"])
async def lease_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], Any]]:
    """Two replicas must see the SAME lease backend: each call opens a new handle."""
    opened: list[LeaseStore] = []
    if request.param == "memory":
        from agent_memory.adapters.memory import MemoryLeaseBackend

        backend = MemoryLeaseBackend()

        def make() -> LeaseStore:
            store = InMemoryLeaseStore(backend=backend)
            opened.append(store)
            return store
    else:
        from agent_memory.adapters.sqlite import SqliteLeaseStore

        def make() -> LeaseStore:
            store = SqliteLeaseStore(tmp_path / "leases.db")
            opened.append(store)
            return store

    yield make
    for store in opened:
        await store.close()


def job(
    leases: LeaseStore, log: InMemoryEventLog, store: InMemoryMemoryStore, model: Any
) -> ReflectionJob:
    clock = SystemClock()
    return ReflectionJob(
        events=log,
        leases=leases,
        knowledge=KnowledgeService(store=store, embedder=EMB, clock=clock),
        clock=clock,
        llm=model,
    )


async def test_two_jobs_started_at_once_run_exactly_one_pass(
    lease_factory: Callable[[], LeaseStore],
) -> None:
    log = InMemoryEventLog()
    await log.append(old_events(Entity("pod", "web-1"), 6))
    store = InMemoryMemoryStore(EMB.space)
    answer = json.dumps([{"content": "web-1 restarts when memory spikes", "importance": 0.9}])
    # the model is slow, so the first pass still holds the lock when the second starts
    a = job(lease_factory(), log, store, ScriptedModel([Delay(0.3, answer)]))
    b = job(lease_factory(), log, store, ScriptedModel([Delay(0.3, answer)]))
    ra, rb = await asyncio.gather(a.run_once(["k8s"]), b.run_once(["k8s"]))
    assert sorted([ra.ran, rb.ran]) == [False, True], "exactly one pass runs"
    skipped = rb if ra.ran else ra
    assert skipped.lock_held_by in (a.replica, b.replica)
    page = await store.list("k8s", namespace=KNOWLEDGE_NAMESPACE)
    assert [r.content for r in page.records] == ["web-1 restarts when memory spikes"]


async def test_pass_groups_old_events_by_entity_and_never_deletes_events() -> None:
    log = InMemoryEventLog()
    recent = [
        Event(
            id="new",
            domain="k8s",
            agent="a",
            action="x",
            outcome="ok",
            summary="recent",
            occurred_at=datetime.now(UTC),
            recorded_at=datetime.now(UTC),
            entities=(Entity("pod", "web-1"),),
        )
    ]
    await log.append(
        old_events(Entity("pod", "web-1"), 5) + old_events(Entity("pod", "db-1"), 4) + recent
    )
    store = InMemoryMemoryStore(EMB.space)
    answer = json.dumps(
        [{"content": "lesson one"}, {"content": "lesson two"}, {"content": "x"}, {"content": "y"}]
    )
    model = ScriptedModel([answer])
    result = await job(InMemoryLeaseStore(), log, store, model).run_once(["k8s"])
    assert (result.entities_discovered, result.entities_processed) == (2, 1)
    assert result.fragments_stored == 3, "1-3 fragments per entity"
    assert result.embedding_tokens > 0
    assert "recent" not in model.prompts[0], "only events older than the age threshold"
    window = await log.window("k8s", since=OLD - timedelta(days=1), limit=100)
    assert len(window.events) == 10, "events are never deleted by reflection"


async def test_without_a_model_a_deterministic_fragment_is_stored() -> None:
    log = InMemoryEventLog()
    await log.append(old_events(Entity("pod", "web-1"), 5))
    store = InMemoryMemoryStore(EMB.space)
    result = await job(InMemoryLeaseStore(), log, store, None).run_once(["k8s"])
    assert result.fragments_stored == 1
    (record,) = (await store.list("k8s", namespace=KNOWLEDGE_NAMESPACE)).records
    assert record.content.startswith("pod web-1: 5 past events (failure x5)")
    assert record.attributes["entity"] == ["pod", "web-1"]


async def test_knowledge_recall_weights_relevance_recency_and_importance() -> None:
    store = InMemoryMemoryStore(EMB.space)
    svc = KnowledgeService(store=store, embedder=EMB, clock=SystemClock())
    await svc.store_fragments(
        "k8s", [("OOMKilled pods need a higher memory limit", 0.2)], kind="fragment"
    )
    await svc.store_fragments(
        "k8s", [("DNS timeouts come from the coredns config", 0.9)], kind="fragment"
    )
    relevant = await svc.recall("k8s", "pod OOMKilled memory limit")
    assert relevant[0].content.startswith("OOMKilled")
    svc.options.relevance_weight = 0.0
    by_importance = await svc.recall("k8s", "pod OOMKilled memory limit")
    assert by_importance[0].content.startswith("DNS"), "weights are configurable"


async def test_request_learn_stores_fragments_recalled_by_later_requests() -> None:
    from agent_memory.services.request import AgentMemory

    store = InMemoryMemoryStore(EMB.space)
    answer = json.dumps([{"content": "OOMKilled api pods need a 512Mi limit", "importance": 0.9}])
    clock = SystemClock()
    knowledge = KnowledgeService(
        store=store, embedder=EMB, clock=clock, llm=ScriptedModel([answer])
    )
    memory = AgentMemory(
        events=InMemoryEventLog(), leases=InMemoryLeaseStore(), clock=clock, knowledge=knowledge
    )
    async with memory.request(agent="a", domain="k8s", request_id="r1", doing="fix OOM") as req:
        scheduled = await req.learn("Raised the api memory limit to 512Mi; OOMKills stopped.")
    assert scheduled.details == {"scheduled": True}
    (done,) = await knowledge.drain()
    assert done.details["stored"] == 1
    async with memory.request(
        agent="b", domain="k8s", request_id="r2", doing="api pods OOMKilled again"
    ) as later:
        ctx = await later.planning_context()
    assert "512Mi limit" in ctx.agent_memory, "the knowledge section shows the fragment"


# -- incremental passes, content-addressed fragments, paging by event time ------


async def test_two_passes_over_the_same_data_store_each_fragment_once() -> None:
    log = InMemoryEventLog()
    await log.append(old_events(Entity("pod", "web-1"), 6) + old_events(Entity("pod", "db-1"), 5))
    store = InMemoryMemoryStore(EMB.space)
    leases = InMemoryLeaseStore()
    first = await job(leases, log, store, None).run_once(["k8s"])
    second = await job(leases, log, store, None).run_once(["k8s"])
    assert (first.entities_processed, first.fragments_stored) == (2, 2)
    assert second.entities_discovered == 0, "nothing newly past the threshold since the last pass"
    page = await store.list("k8s", namespace=KNOWLEDGE_NAMESPACE)
    assert len(page.records) == 2, [r.content for r in page.records]


async def test_a_repeated_pass_without_its_watermark_updates_instead_of_adding() -> None:
    """Lost watermark (another lease store): the same fragments get the same ids."""
    log = InMemoryEventLog()
    await log.append(old_events(Entity("pod", "web-1"), 6))
    store = InMemoryMemoryStore(EMB.space)
    answer = json.dumps([{"content": "web-1 restarts when memory spikes", "importance": 0.7}])
    await job(InMemoryLeaseStore(), log, store, ScriptedModel([answer])).run_once(["k8s"])
    again = await job(InMemoryLeaseStore(), log, store, ScriptedModel([answer])).run_once(["k8s"])
    assert again.report.ok, again.report.failures
    (record,) = (await store.list("k8s", namespace=KNOWLEDGE_NAMESPACE)).records
    assert record.content == "web-1 restarts when memory spikes"


async def test_newly_aged_events_are_picked_up_by_the_next_pass() -> None:
    log = InMemoryEventLog()
    await log.append(old_events(Entity("pod", "web-1"), 5))
    store = InMemoryMemoryStore(EMB.space)
    leases = InMemoryLeaseStore()
    await job(leases, log, store, None).run_once(["k8s"])
    later = [
        Event(
            id=f"late-{i}",
            domain="k8s",
            agent="a",
            action="scale",
            outcome="success",
            summary=f"scaled api {i}",
            occurred_at=datetime.now(UTC) - timedelta(days=7) + timedelta(minutes=10 + i),
            recorded_at=datetime.now(UTC),
            entities=(Entity("svc", "api"),),
        )
        for i in range(5)
    ]
    await log.append(later)
    # younger than the first pass's cutoff; the next pass (emulated an hour later
    # by shrinking the threshold) finds them newly past it
    nxt = job(leases, log, store, None)
    nxt.options.age_threshold = timedelta(days=7, hours=-1)
    result = await nxt.run_once(["k8s"])
    assert result.entities_processed == 1, "only the entity newly past the threshold"
    contents = sorted(r.content for r in (await store.list("k8s")).records)
    assert [c.split(":")[0] for c in contents] == ["pod web-1", "svc api"]


async def _second_pass_after(
    extra: int, *, cap: int = 50
) -> tuple[InMemoryMemoryStore, ReflectionReport]:
    """web-1 has 8 aged events at the first pass and `extra` more aged ones at
    the next (an hour later, emulated by shrinking the threshold)."""
    web1 = Entity("pod", "web-1")
    log = InMemoryEventLog()
    await log.append(old_events(web1, 8) + old_events(Entity("pod", "db-1"), 5))
    store = InMemoryMemoryStore(EMB.space)
    leases = InMemoryLeaseStore()
    first = job(leases, log, store, None)
    first.options.max_events_per_entity = cap
    await first.run_once(["k8s"])
    now = datetime.now(UTC)
    later = [
        attrs.evolve(e, occurred_at=now - timedelta(days=7, minutes=-10 - i), recorded_at=now)
        for i, e in enumerate(old_events(web1, extra, start=8))
    ]
    await log.append(later)
    nxt = job(leases, log, store, None)
    nxt.options.max_events_per_entity = cap
    nxt.options.age_threshold = timedelta(days=7, hours=-1)
    return store, await nxt.run_once(["k8s"])


async def test_a_newer_fragment_of_an_entity_replaces_the_one_it_supersedes() -> None:
    """8 aged events, then 3 more: one fragment for web-1 (the 11-event one), not
    two near-copies side by side; db-1's fragment is untouched."""
    store, second = await _second_pass_after(3)
    assert second.report.ok, second.report.failures
    assert second.entities_processed == 1
    assert second.report.details["fragments_superseded"] == 1
    contents = sorted(r.content for r in (await store.list("k8s")).records)
    assert [c.split(";")[0] for c in contents] == [
        "pod db-1: 5 past events (failure x5)",
        "pod web-1: 11 past events (failure x11)",
    ]
    svc = KnowledgeService(store=store, embedder=EMB, clock=SystemClock())
    recalled = [k.content for k in await svc.recall("k8s", "web-1 restarts")]
    assert sum(c.startswith("pod web-1") for c in recalled) == 1


async def test_a_fragment_covering_events_the_new_one_does_not_is_kept() -> None:
    """With at most 8 events per entity, the second distillation no longer reaches
    web-1's oldest events, so it does not stand in for the first fragment."""
    store, second = await _second_pass_after(3, cap=8)
    assert second.report.ok, second.report.failures
    assert second.report.details.get("fragments_superseded", 0) == 0
    web1 = [r for r in (await store.list("k8s")).records if r.content.startswith("pod web-1")]
    assert len(web1) == 2


class FlakyLeases(InMemoryLeaseStore):
    """A real in-memory lease store whose backend is down for the first `down` calls."""

    def __init__(self, down: int) -> None:
        super().__init__()
        self.down = down

    def _maybe_fail(self) -> None:
        if self.down > 0:
            self.down -= 1
            raise BackendUnavailable("lease store unreachable")

    async def acquire(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail()
        return await super().acquire(*args, **kwargs)

    async def release(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail()
        return await super().release(*args, **kwargs)


async def test_a_lease_store_outage_is_reported_and_the_next_pass_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = InMemoryEventLog()
    await log.append(old_events(Entity("pod", "web-1"), 5))
    store = InMemoryMemoryStore(EMB.space)
    reflection = job(FlakyLeases(down=1), log, store, None)
    reflection.options.interval = timedelta(milliseconds=10)
    reflection.options.retry_backoff = timedelta(milliseconds=10)
    reports: list[ReflectionReport] = []
    caplog.set_level(logging.INFO, logger="agent_memory.services.reflection")
    ran = asyncio.Event()

    def on_report(result: ReflectionReport) -> None:
        reports.append(result)
        if result.ran:
            ran.set()

    loop = asyncio.create_task(reflection.run_forever(["k8s"], on_report=on_report))
    try:
        async with asyncio.timeout(5):
            await ran.wait()
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
    failed = reports[0]
    assert not failed.ran
    assert [f.operation for f in failed.report.failures] == ["acquire-lock"]
    assert next(r for r in reports if r.ran).fragments_stored == 1, "the next pass ran"
    completed = [r.getMessage() for r in caplog.records if "pass completed" in r.getMessage()]
    assert completed
    assert "fragments_stored=1" in completed[-1]
    assert any("pass starting" in r.getMessage() for r in caplog.records)


async def test_an_outage_mid_pass_does_not_escape_run_once() -> None:
    """Acquire works, then the store goes down: release fails; run_once returns a report."""
    log = InMemoryEventLog()
    await log.append(old_events(Entity("pod", "web-1"), 5))
    leases = FlakyLeases(down=0)
    reflection = job(leases, log, InMemoryMemoryStore(EMB.space), None)
    original = leases.acquire

    async def acquire_then_fail(*args: Any, **kwargs: Any) -> Any:
        lease = await original(*args, **kwargs)
        leases.down = 100
        return lease

    leases.acquire = acquire_then_fail  # type: ignore[method-assign]
    result = await reflection.run_once(["k8s"])
    assert result.ran
    assert not result.report.ok
    assert "release-lock" in {f.operation for f in result.report.failures}


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_week_old_events_are_reached_behind_fifty_thousand_newer_ones(
    backend: str, tmp_path: Path
) -> None:
    log: Any = InMemoryEventLog() if backend == "memory" else SqliteEventLog(tmp_path / "events.db")
    await log.append(_busy_events())
    await log.append(old_events(Entity("pod", "web-1"), 5))
    store = InMemoryMemoryStore(EMB.space)
    try:
        result = await job(InMemoryLeaseStore(), log, store, None).run_once(["k8s"])
    finally:
        await log.close()
    assert result.report.ok, result.report.failures
    assert (result.entities_discovered, result.fragments_stored) == (1, 1)


@functools.cache
def _busy_events() -> tuple[Event, ...]:
    """50,000 events of the last 14 hours (built once for both backends)."""
    now = datetime.now(UTC)
    return tuple(
        Event(
            id=f"busy-{i}",
            domain="k8s",
            agent="a",
            action="poll",
            outcome="success",
            summary="poll",
            occurred_at=now - timedelta(seconds=i),
            recorded_at=now,
        )
        for i in range(50_000)
    )


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_paging_back_in_event_time_reads_every_tied_event(
    backend: str, tmp_path: Path
) -> None:
    """Pages of 2 over 10 aged events sharing 3 instants: every entity is found once."""
    log: Any = InMemoryEventLog() if backend == "memory" else SqliteEventLog(tmp_path / "events.db")
    await log.append(
        [
            Event(
                id=f"e{i}",
                domain="k8s",
                agent="a",
                action="restart",
                outcome="failure",
                summary=f"restart of pod p{i}",
                occurred_at=OLD + timedelta(minutes=i % 3),
                recorded_at=OLD,
                entities=(Entity("pod", f"p{i}"),),
            )
            for i in range(10)
        ]
    )
    store = InMemoryMemoryStore(EMB.space)
    reflection = job(InMemoryLeaseStore(), log, store, None)
    reflection.options.page_size = 2
    reflection.options.min_events = 1
    try:
        result = await reflection.run_once(["k8s"])
    finally:
        await log.close()
    assert (result.entities_discovered, result.fragments_stored) == (10, 10)
