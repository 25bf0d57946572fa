"""The services on real backends: cancelled requests leave nothing behind,
concurrent claims have one holder, two reflection jobs run one pass, and
identical conversation exchanges stored at once keep one copy — checked in the
store on memory, SQLite and Redis."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Settings, Stores, open_stores
from agent_memory.domain.records import Entity, Event
from agent_memory.domain.steps import Step
from agent_memory.services.conversation import ConversationConfig, ConversationMemory, RouteOverride
from agent_memory.services.coordination import CLAIM_PREFIX, SIGNAL_PREFIX
from agent_memory.services.knowledge import KNOWLEDGE_NAMESPACE, KnowledgeService
from agent_memory.services.reflection import ReflectionJob
from agent_memory.services.request import AgentMemory

from .scripted import Delay, ScriptedModel

EMB = HashingEmbedder(64)
POD = Entity("pod", "web-1")


@pytest.fixture(params=["memory", "sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory://svc-{uuid.uuid4().hex}"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'svc.db'}"
    return str(request.getfixturevalue("redis_url"))


@pytest.fixture
async def opener(url: str) -> AsyncIterator[object]:
    """Opens independent handles (like separate processes) on one deployment."""
    settings = Settings(deployment=f"svc-{uuid.uuid4().hex[:10]}")
    opened: list[Stores] = []

    async def open_() -> Stores:
        stores = await open_stores(url, space=EMB.space, settings=settings)
        opened.append(stores)
        return stores

    yield open_
    for stores in opened:
        await stores.close()


def service(stores: Stores) -> AgentMemory:
    assert stores.events is not None
    assert stores.leases is not None
    return AgentMemory(events=stores.events, leases=stores.leases, clock=SystemClock())


async def test_cancelled_request_leaves_no_signal_and_no_claim(opener) -> None:  # type: ignore[no-untyped-def]
    stores = await opener()
    memory = service(stores)
    entered = asyncio.Event()

    async def agent() -> None:
        async with memory.request(agent="A", domain="k8s", request_id="r1", entities=[POD]):
            entered.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(agent())
    await entered.wait()
    assert stores.leases is not None
    assert len(await stores.leases.scan("k8s", SIGNAL_PREFIX)) == 1
    assert len(await stores.leases.scan("k8s", CLAIM_PREFIX)) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    other = await opener()  # a fresh handle sees the store itself
    assert other.leases is not None
    assert await other.leases.scan("k8s", "") == []


async def test_two_concurrent_requests_one_claim_holder_across_handles(opener) -> None:  # type: ignore[no-untyped-def]
    a_mem, b_mem = service(await opener()), service(await opener())
    a = a_mem.request(agent="A", domain="k8s", request_id="ra", entities=[POD])
    b = b_mem.request(agent="B", domain="k8s", request_id="rb", entities=[POD])
    await asyncio.gather(a.__aenter__(), b.__aenter__())
    try:
        holders = [r for r in (a, b) if r.claims[0].acquired]
        assert len(holders) == 1
        loser = b if holders[0] is a else a
        assert loser.claims[0].holder_agent == holders[0].agent
        ctx = await loser.planning_context()
        assert f'"{holders[0].request_id}"' in ctx.agent_memory, "the other's view names the holder"
    finally:
        await a.__aexit__(None, None, None)
        await b.__aexit__(None, None, None)


async def test_two_reflection_jobs_at_once_run_exactly_one_pass(opener) -> None:  # type: ignore[no-untyped-def]
    old = datetime.now(UTC) - timedelta(days=10)
    first = await opener()
    assert first.events is not None
    await first.events.append(
        [
            Event(
                id=f"e{i}",
                domain="k8s",
                agent="a",
                action="restart",
                outcome="failure",
                summary=f"restart {i}",
                occurred_at=old + timedelta(minutes=i),
                recorded_at=old,
                entities=(POD,),
            )
            for i in range(6)
        ]
    )
    answer = json.dumps([{"content": "web-1 restarts under memory pressure", "importance": 0.8}])
    jobs = []
    for _ in range(2):
        stores = await opener()
        assert stores.events is not None
        assert stores.leases is not None
        clock = SystemClock()
        jobs.append(
            ReflectionJob(
                events=stores.events,
                leases=stores.leases,
                knowledge=KnowledgeService(store=stores.store, embedder=EMB, clock=clock),
                clock=clock,
                llm=ScriptedModel([Delay(0.3, answer)]),
            )
        )
    results = await asyncio.gather(*(j.run_once(["k8s"]) for j in jobs))
    assert sorted(r.ran for r in results) == [False, True], "exactly one pass runs"
    page = await first.store.list("k8s", namespace=KNOWLEDGE_NAMESPACE)
    assert [r.content for r in page.records] == ["web-1 restarts under memory pressure"]


async def test_request_completes_with_redis_stopped_and_reports_what_failed(
    restartable_redis,  # type: ignore[no-untyped-def]
) -> None:
    stores = await open_stores(restartable_redis.url, space=EMB.space, settings=Settings())
    try:
        memory = service(stores)
        restartable_redis.stop()
        async with memory.request(
            agent="A", domain="k8s", request_id="r-down", entities=[POD]
        ) as req:
            ctx = await req.planning_context()
            record = await req.record([Step(action="look", outcome="ok")])
        announce = req.reports["activity-announcement"]
        assert {f.error_type for f in announce.failures} == {"BackendUnavailable"}
        assert {f.operation for f in ctx.report.failures} >= {"event-window", "signals"}
        assert [f.operation for f in record.failures] == ["append"]
        assert record.details["events_written"] == 0
        assert "<agent_memory>" in ctx.agent_memory, "the view still renders, without history"
    finally:
        await stores.close()


async def test_identical_exchanges_on_two_handles_store_one_copy(opener) -> None:  # type: ignore[no-untyped-def]
    """Two handles (like two processes) storing the same exchange at once: the
    derived record id makes the store reject the second copy."""
    config = ConversationConfig(routes={"support": RouteOverride(auto_store=True)})
    handles = [await opener() for _ in range(2)]
    convs = [ConversationMemory(s.store, EMB, config) for s in handles]
    exchange = ("My seat preference is the aisle", "Aisle seats from now on.")
    outs = await asyncio.gather(*(c.after_model("support", "ana", *exchange) for c in convs))
    assert sorted((o.status, o.reason) for o in outs) == [("skipped", "duplicate"), ("stored", "")]
    assert outs[0].record_id == outs[1].record_id
    assert len((await handles[0].store.list("ana")).records) == 1


async def test_a_newer_reflection_of_an_entity_replaces_the_older_one(opener) -> None:  # type: ignore[no-untyped-def]
    """On every backend: the pass after web-1 gained aged events leaves one
    fragment for it (listing by kind and deleting by id are the backend's)."""
    stores = await opener()
    assert stores.events is not None
    assert stores.leases is not None
    now = datetime.now(UTC)

    def events(ids: range, at: Callable[[int], datetime]) -> list[Event]:
        return [
            Event(
                id=f"e{i}",
                domain="k8s",
                agent="a",
                action="restart",
                outcome="failure",
                summary=f"restart {i}",
                occurred_at=at(i),
                recorded_at=now,
                entities=(POD,),
            )
            for i in ids
        ]

    await stores.events.append(events(range(8), lambda i: now - timedelta(days=10, minutes=-i)))
    clock = SystemClock()

    def job() -> ReflectionJob:
        assert stores.events is not None
        assert stores.leases is not None
        return ReflectionJob(
            events=stores.events,
            leases=stores.leases,
            knowledge=KnowledgeService(store=stores.store, embedder=EMB, clock=clock),
            clock=clock,
        )

    await job().run_once(["k8s"])
    await stores.events.append(
        events(range(8, 11), lambda i: now - timedelta(days=7, minutes=-10 - i))
    )
    later = job()
    later.options.age_threshold = timedelta(days=7, hours=-1)
    result = await later.run_once(["k8s"])
    assert result.report.ok, result.report.failures
    page = await stores.store.list("k8s", namespace=KNOWLEDGE_NAMESPACE)
    assert [r.content.split(";")[0] for r in page.records] == [
        "pod web-1: 11 past events (failure x11)"
    ]
