"""The reflection job: distil old events per entity, one replica per pass."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import (
    HashingEmbedder,
    InMemoryEventLog,
    InMemoryLeaseStore,
    InMemoryMemoryStore,
)
from agent_memory.domain.records import Entity, Event
from agent_memory.ports.storage import LeaseStore
from agent_memory.services.knowledge import KNOWLEDGE_NAMESPACE, KnowledgeService
from agent_memory.services.reflection import ReflectionJob

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
