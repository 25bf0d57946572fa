"""Request lifecycle: signals, claims, renewal and cleanup on every exit."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import InMemoryEventLog, InMemoryLeaseStore
from agent_memory.domain.records import Entity
from agent_memory.domain.steps import Step
from agent_memory.services.coordination import CLAIM_PREFIX, SIGNAL_PREFIX
from agent_memory.services.request import AgentMemory, RequestOptions

POD = Entity("pod", "web-1")


def make_memory(**opts: object) -> AgentMemory:
    return AgentMemory(
        events=InMemoryEventLog(),
        leases=InMemoryLeaseStore(),
        clock=SystemClock(),
        options=RequestOptions(**opts),  # type: ignore[arg-type]
    )


async def test_two_concurrent_requests_exactly_one_claim_holder() -> None:
    memory = make_memory()
    a = memory.request(agent="A", domain="k8s", request_id="ra", entities=[POD])
    b = memory.request(agent="B", domain="k8s", request_id="rb", entities=[POD])
    async with asyncio.TaskGroup() as tg:
        ta = tg.create_task(a.__aenter__())
        tb = tg.create_task(b.__aenter__())
    await ta, await tb
    holders = [r for r in (a, b) if r.claims[0].acquired]
    assert len(holders) == 1, "exactly one request holds the claim"
    loser = b if holders[0] is a else a
    winner = holders[0]
    assert loser.claims[0].holder_agent == winner.agent
    assert loser.claims[0].holder_request_id == winner.request_id
    claims = await memory.leases.scan("k8s", CLAIM_PREFIX)
    assert len(claims) == 1
    await a.__aexit__(None, None, None)
    await b.__aexit__(None, None, None)
    assert await memory.leases.scan("k8s", "") == []


async def test_cancelled_request_leaves_no_signal_and_no_claim() -> None:
    memory = make_memory()
    entered = asyncio.Event()

    async def agent() -> None:
        async with memory.request(agent="A", domain="k8s", request_id="r1", entities=[POD]):
            entered.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(agent())
    await entered.wait()
    assert len(await memory.leases.scan("k8s", SIGNAL_PREFIX)) == 1
    assert len(await memory.leases.scan("k8s", CLAIM_PREFIX)) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await memory.leases.scan("k8s", "") == []


async def test_exception_exit_releases_and_reports() -> None:
    memory = make_memory()
    req = memory.request(agent="A", domain="k8s", request_id="r1", entities=[POD])
    with pytest.raises(RuntimeError, match="agent failed"):
        async with req:
            raise RuntimeError("agent failed")
    assert await memory.leases.scan("k8s", "") == []
    assert req.reports["cleanup"].details == {"exit": "error", "released": 2}


async def test_the_signal_is_renewed_while_running_and_claims_expire_at_their_ttl() -> None:
    memory = make_memory(signal_ttl=timedelta(milliseconds=300))
    async with memory.request(agent="A", domain="k8s", request_id="r1", entities=[POD]) as req:
        await asyncio.sleep(0.75)  # more than twice the TTL
        assert len(await memory.leases.scan("k8s", SIGNAL_PREFIX)) == 1, "signal renewed"
        assert await memory.leases.scan("k8s", CLAIM_PREFIX) == [], "claims are not renewed"
    assert req.reports["activity-renewal"].details["renewals"] >= 2
    assert await memory.leases.scan("k8s", "") == []


async def test_claim_renewal_is_an_option_off_by_default() -> None:
    memory = make_memory(signal_ttl=timedelta(milliseconds=300), renew_claims=True)
    async with memory.request(agent="A", domain="k8s", request_id="r1", entities=[POD]):
        await asyncio.sleep(0.75)
        assert len(await memory.leases.scan("k8s", "")) == 2, "both renewed when asked"
    assert RequestOptions().renew_claims is False


async def test_status_update_is_carried_by_the_next_renewal() -> None:
    memory = make_memory(signal_ttl=timedelta(milliseconds=300))
    async with memory.request(agent="A", domain="k8s", request_id="r1", doing="deploy") as req:
        req.status("waiting for approval")
        await asyncio.sleep(0.25)  # past TTL/3: one renewal has run
        async with memory.request(agent="B", domain="k8s", request_id="r2") as other:
            ctx = await other.planning_context()
    assert "waiting for approval" in ctx.coordination
    assert "deploy" in ctx.coordination, "the original request identity is kept"


async def test_a_suspended_request_stops_advertising_and_resume_restores_it() -> None:
    memory = make_memory(signal_ttl=timedelta(milliseconds=300))
    async with memory.request(agent="A", domain="k8s", request_id="r1", entities=[POD]) as req:
        suspended = await req.suspend()
        assert suspended.ok, suspended.failures
        assert await memory.leases.scan("k8s", "") == [], "no signal, no claim while suspended"
        await asyncio.sleep(0.4)  # no renewal resurrects them
        assert await memory.leases.scan("k8s", "") == []
        resumed = await req.resume()
        assert resumed.ok, resumed.failures
        assert len(await memory.leases.scan("k8s", SIGNAL_PREFIX)) == 1
        assert len(await memory.leases.scan("k8s", CLAIM_PREFIX)) == 1, "fresh ownership"
        await asyncio.sleep(0.4)
        assert len(await memory.leases.scan("k8s", SIGNAL_PREFIX)) == 1, "renewal restarted"
    assert await memory.leases.scan("k8s", "") == []


async def test_backend_down_request_completes_and_reports_failures() -> None:
    memory = make_memory()
    await memory.leases.close()
    await memory.events.close()
    async with memory.request(agent="A", domain="k8s", request_id="r1", entities=[POD]) as req:
        report = await req.record([Step(action="look")])
    announce = req.reports["activity-announcement"]
    assert {f.operation for f in announce.failures} == {"announce", "claim pod/web-1"}
    assert {f.error_type for f in announce.failures} == {"StoreClosed"}
    assert [f.operation for f in report.failures] == ["append"]
    assert req.reports["cleanup"].ok


async def test_cleanup_is_bounded_by_the_timeout() -> None:
    class SlowReleases(InMemoryLeaseStore):
        async def release(self, scope: str, key: str, owner: str) -> bool:
            await asyncio.sleep(10)
            return True

    memory = AgentMemory(
        events=InMemoryEventLog(),
        leases=SlowReleases(),
        clock=SystemClock(),
        options=RequestOptions(cleanup_timeout=0.1),
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with memory.request(agent="A", domain="k8s", request_id="r1") as req:
        pass
    assert loop.time() - started < 2.0
    assert [f.operation for f in req.reports["cleanup"].failures] == ["cleanup"]


def test_invalid_request_arguments_are_typed_errors() -> None:
    memory = make_memory()
    from agent_memory.domain.errors import InvalidInput, ScopeRequired

    with pytest.raises(ScopeRequired):
        memory.request(agent="A", domain=" ", request_id="r1")
    with pytest.raises(InvalidInput):
        memory.request(agent="", domain="k8s", request_id="r1")
    with pytest.raises(InvalidInput):
        RequestOptions(cleanup_timeout=0)


async def test_second_agent_sees_first_agents_signal_claim_and_later_its_events() -> None:
    memory = make_memory()
    async with memory.request(
        agent="agent-a",
        domain="k8s",
        request_id="ra",
        entities=[POD],
        doing="investigate OOMKilled",
    ) as a:
        async with memory.request(
            agent="agent-b", domain="k8s", request_id="rb", entities=[POD]
        ) as b:
            assert not b.claims[0].acquired
            ctx = await b.planning_context()
            assert ctx.report.ok, ctx.report.failures
            assert "agent-a" in ctx.coordination
            assert "investigate OOMKilled" in ctx.coordination
            assert '"ra"' in ctx.agent_memory, "the investigation names the holder's request"
            assert "agent-b" not in ctx.coordination, "the caller's own request is left out"
        await a.record([Step(action="kubectl describe pod", outcome="found OOMKilled")])
    async with memory.request(agent="agent-c", domain="k8s", request_id="rc", entities=[POD]) as c:
        ctx = await c.planning_context()
    assert "kubectl describe pod" in ctx.agent_memory
    assert ctx.coordination.count("agent-a") == 0, "A's signal is gone after it finished"
    report = ctx.view_reports["agent_memory"]
    assert report.bytes_used <= report.budget_bytes


async def test_the_user_profile_hook_skips_silently_without_a_user_id() -> None:
    """An event-driven or cron agent has no user: no profile, and no error."""
    from agent_memory.adapters.memory import HashingEmbedder, InMemoryMemoryStore
    from agent_memory.services.user_memory import UserMemory

    embedder = HashingEmbedder(32)
    users = UserMemory(
        store=InMemoryMemoryStore(embedder.space), embedder=embedder, clock=SystemClock()
    )
    view = await users.profile(user_id=None, namespace="travel", request="plan a trip")
    assert view.text == ""
    assert view.report.bytes_used == 0


_FOREIGN = {
    "blank agent": {"agent": " ", "request_id": "rx", "started_at": "2026-01-01T00:00:00+00:00"},
    "naive time": {"agent": "x", "request_id": "rx", "started_at": "2026-01-01T00:00:00"},
    "blank request id": {"agent": "x", "request_id": "", "started_at": "2026-01-01T00:00:00+00:00"},
    "agent over MAX_ID_BYTES": {
        "agent": "x" * 600, "request_id": "rx", "started_at": "2026-01-01T00:00:00+00:00",
    },
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(_FOREIGN))
async def test_one_unreadable_signal_or_claim_costs_only_itself(case: str) -> None:
    """A signal or claim another writer left that no view can show (a blank or
    oversized agent, a blank request id, a naive time) is left out and reported;
    the other agents' signals and claims are still shown. It used to make
    the whole `<agent_coordination>` view, or the investigations of
    `<agent_memory>`, fail to render."""
    import json

    memory = make_memory()
    payload = json.dumps(_FOREIGN[case]).encode()
    await memory.leases.acquire(
        "k8s", f'{SIGNAL_PREFIX}["x","rx"]', "foreign", timedelta(minutes=5), payload
    )
    claim = {**_FOREIGN[case], "since": _FOREIGN[case]["started_at"]}
    await memory.leases.acquire(
        "k8s", f'{CLAIM_PREFIX}["pod","db-1"]', "foreign", timedelta(minutes=5),
        json.dumps(claim).encode(),
    )  # fmt: skip
    async with (
        memory.request(
            agent="agent-a", domain="k8s", request_id="ra", entities=[POD], doing="scale web"
        ),
        memory.request(agent="agent-b", domain="k8s", request_id="rb") as b,
    ):
        ctx = await b.planning_context()
    assert "agent-a" in ctx.coordination
    assert "scale web" in ctx.coordination
    assert '"ra"' in ctx.agent_memory, "agent-a's claim is still shown"
    assert not any(f.stage.startswith("render") for f in ctx.report.failures), ctx.report.failures
    assert ctx.report.details["unreadable"] == {"signals": 1, "claims": 1}
    assert '"db-1"' not in ctx.agent_memory
