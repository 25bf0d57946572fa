"""`agent-memory demo`: the seed scenario, offline, on the embedded default.

1. Agent A investigates an OOMKilled pod: it announces itself and claims the pod.
2. Agent B arrives for the same pod while A is active: its planning context
   shows A's signal and A's claim, so it does not investigate twice.
3. A records its steps and finishes; a new request sees A's events.
4. A user says "I'm vegan, plan a trip to Tokyo"; the next session recalls it;
   then the user is forgotten, and the profile shows nothing.
Every view and stage report is printed. `--url` runs it on another backend.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from agent_memory.bootstrap import Memory, agent_memory_service, connect, user_memory_service
from agent_memory.domain.records import Entity
from agent_memory.domain.steps import Step
from agent_memory.services.request import AgentMemory, MemoryRequest
from agent_memory.services.user_memory import UserMemory

__all__ = ["run_demo"]

DOMAIN = "k8s-incidents"
POD = Entity("pod", "payments/api-7f9c")


def _title(text: str) -> None:
    print()
    print(f"== {text} " + "=" * max(0, 70 - len(text)))


def _reports(req: MemoryRequest) -> None:
    for name, report in req.reports.items():
        print(f"  [{name}] " + json.dumps(report.as_dict(), default=str, sort_keys=True))


def _view_summary(report: Any) -> str:
    return (
        f"outcome={report.outcome} format={report.event_format} "
        f"bytes={report.bytes_used}/{report.budget_bytes}"
    )


async def _scenario(service: AgentMemory, run_id: str) -> None:
    _title("Agent A starts: investigate the OOMKilled pod")
    async with service.request(
        agent="agent-a",
        domain=DOMAIN,
        request_id=f"req-a-{run_id}",
        entities=[POD],
        doing="investigate OOMKilled restarts",
    ) as a:
        print(f"  claim on {POD.type}/{POD.id}: acquired={a.claims[0].acquired}")

        _title("Agent B arrives for the same pod while A is active")
        async with service.request(
            agent="agent-b",
            domain=DOMAIN,
            request_id=f"req-b-{run_id}",
            entities=[POD],
            doing="check payments latency alert",
        ) as b:
            claim = b.claims[0]
            print(
                f"  claim acquired={claim.acquired}; held by {claim.holder_agent} "
                f"(request {claim.holder_request_id})"
            )
            ctx = await b.planning_context()
            print(ctx.agent_memory)
            print(ctx.coordination)
            for name, report in ctx.view_reports.items():
                print(f"  view {name}: {_view_summary(report)}")
            _reports(b)

        _title("Agent A records its steps and finishes")
        report = await a.record(
            [
                Step(
                    action="kubectl describe pod payments/api-7f9c",
                    outcome="failure",
                    failure_cause="container api: OOMKilled (exit 137), limit 256Mi",
                    metadata={"entity_type": "pod", "entity_id": POD.id},
                ),
                Step(
                    action="kubectl top pod payments/api-7f9c",
                    outcome="success",
                    response="memory 251Mi of 256Mi before the restart",
                ),
                Step(
                    action="raise memory limit to 512Mi",
                    outcome="success",
                    response="deployment payments/api patched; pods stable for 10 min",
                    metadata={"entities": [{"type": "deployment", "id": "payments/api"}]},
                ),
            ]
        )
        print(f"  recorded: {json.dumps(report.as_dict(), default=str, sort_keys=True)}")
    _reports(a)

    _title("A new request on the pod sees A's events")
    async with service.request(
        agent="agent-b",
        domain=DOMAIN,
        request_id=f"req-b2-{run_id}",
        entities=[POD],
        doing="follow up on payments latency",
    ) as later:
        ctx = await later.planning_context()
        print(ctx.agent_memory)
        print(ctx.coordination or "  (no other agent active)")
        for name, view_report in ctx.view_reports.items():
            print(f"  view {name}: {_view_summary(view_report)}")
        print(f"  digest: {json.dumps(ctx.report.details.get('digest'), sort_keys=True)}")

    _title("Another request reuses the cached digest (no compaction, no model call)")
    async with service.request(
        agent="agent-c", domain=DOMAIN, request_id=f"req-c-{run_id}", doing="weekly review"
    ) as review:
        ctx = await review.planning_context()
        print(f"  digest: {json.dumps(ctx.report.details.get('digest'), sort_keys=True)}")


async def _user_session(users: UserMemory, run_id: str) -> None:
    user = f"user-{run_id}"
    _title('A user session: "I\'m vegan, plan a trip to Tokyo"')
    report = await users.extract(
        user_id=user,
        namespace="travel-agent",
        conversation="I'm vegan, plan a trip to Tokyo. I prefer aisle seats.",
        wait=True,
    )
    print("  extraction: " + json.dumps(report.as_dict(), default=str, sort_keys=True))

    _title("The next session recalls it")
    view = await users.profile(
        user_id=user, namespace="travel-agent", request="Book dinner in Tokyo for Friday"
    )
    print(view.text)
    again = await users.extract(
        user_id=user, namespace="travel-agent", conversation="As I said, I'm vegan.", wait=True
    )
    ops = again.details.get("reconcile", {}).get("operations")
    print(f"  saying it again reconciles as: {ops}")

    _title("Forget the user, and show that it is gone")
    receipt = await users.forget(user)
    print(
        f"  receipt: facts={receipt.facts} events={receipt.events} "
        f"cache_entries={receipt.cache_entries} complete={receipt.complete}"
    )
    left = await users.facts(user_id=user)
    view = await users.profile(user_id=user, namespace="travel-agent", request="dinner in Tokyo")
    print(f"  facts left: {len(left)}")
    print(view.text)


async def run_demo(url: str | None) -> int:
    """Run the scenario; 0 when it completed."""
    tmp: tempfile.TemporaryDirectory[str] | None = None
    if url is None:
        tmp = tempfile.TemporaryDirectory(prefix="agent-memory-demo-")
        url = f"sqlite:///{Path(tmp.name) / 'memory.db'}"
    try:
        memory: Memory = await connect(url)
        async with memory:
            print(f"agent-memory demo on {memory.url} (offline: hashing embedder, rule summaries)")
            service = agent_memory_service(memory)
            import uuid

            run_id = uuid.uuid4().hex[:8]
            await _scenario(service, run_id)
            await _user_session(user_memory_service(memory), run_id)
        print()
        print("demo complete")
        return 0
    finally:
        if tmp is not None:
            tmp.cleanup()
