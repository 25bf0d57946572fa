"""`agent-memory demo`: the seed scenario, told as a story, offline, on the
embedded default.

1. Agent A investigates an OOMKilled pod: it announces itself and claims the pod.
2. Agent B arrives for the same pod while A is active: its planning context
   shows A's signal and A's claim, so it does not investigate twice.
3. A records its steps and finishes; a new request sees A's events and a digest,
   and the next one reuses the cached digest.
4. A user says "I'm vegan, plan a trip to Tokyo"; the next session recalls it;
   then the user is forgotten, and the profile shows nothing.

The views are printed as the model would see them; each stage report is one
line (`--json` prints them whole). `--url` runs it on another backend.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent_memory.bootstrap import Memory, connect
from agent_memory.domain.errors import BackendUnavailable
from agent_memory.domain.records import Entity
from agent_memory.domain.steps import Step
from agent_memory.services.planning import PlanningContext
from agent_memory.services.reports import StageReport
from agent_memory.services.request import AgentMemory, MemoryRequest
from agent_memory.services.user_memory import UserMemory

__all__ = ["run_demo", "summarise"]

DOMAIN = "k8s-incidents"
POD = Entity("pod", "payments/api-7f9c")


def summarise(report: StageReport) -> str:
    """One line: the stage, ok or its failures, and its scalar details."""
    parts: list[str] = []
    for key, value in sorted(report.details.items()):
        if isinstance(value, bool | int | float | str) or value is None:
            parts.append(f"{key}={json.dumps(value)}")
        elif isinstance(value, Mapping) and all(
            isinstance(v, bool | int | float | str) for v in value.values()
        ):
            inner = ",".join(f"{k}:{json.dumps(v)}" for k, v in sorted(value.items()))
            parts.append(f"{key}={{{inner}}}")
        elif isinstance(value, list | tuple | Mapping):
            parts.append(f"{key}=[{len(value)}]")
    status = (
        "ok"
        if report.ok
        else "FAILED "
        + "; ".join(f"{f.operation}: {f.error_type}: {f.message}" for f in report.failures)
    )
    return f"{report.stage}: {status}" + (f" ({' '.join(parts)})" if parts else "")


class _Story:
    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json
        self.failed = 0
        self.chapter = 0

    def title(self, text: str) -> None:
        self.chapter += 1
        print()
        print(f"{self.chapter}. {text}")

    def say(self, text: str) -> None:
        print(f"   {text}")

    def view(self, text: str) -> None:
        print(text)

    def reports(self, reports: Mapping[str, StageReport]) -> None:
        for report in reports.values():
            self.failed += not report.ok
            self.say("report " + summarise(report))
            if self.as_json:
                self.say("  " + json.dumps(report.as_dict(), default=str, sort_keys=True))

    def planning(self, ctx: PlanningContext) -> None:
        self.view(ctx.agent_memory)
        if "## active_agents: admitted=0" in ctx.coordination:
            self.say("(no other agent is active in the domain: the coordination view is empty)")
        else:
            self.view(ctx.coordination)
        for name, report in ctx.view_reports.items():
            self.say(
                f"view {name}: {report.outcome}, {report.bytes_used} of {report.budget_bytes} bytes"
            )


def _claim(req: MemoryRequest) -> str:
    if not req.claims:
        return "no claim could be taken (memory is unavailable; the request goes on)"
    claim = req.claims[0]
    if claim.acquired:
        return f"it claims {claim.entity.type} {claim.entity.id}"
    return (
        f"its claim is refused: {claim.holder_agent} holds it "
        f"(request {claim.holder_request_id}), so it does not investigate twice"
    )


def _digest(ctx: PlanningContext) -> str:
    digest: Any = ctx.report.details.get("digest")
    if not isinstance(digest, Mapping):
        return "no digest this time"
    model = "a model call" if digest.get("model_called") else "no model call"
    if digest.get("cache_hit"):
        return f"the digest is reused from the cache (no compaction, {model})"
    return f"the digest is built ({digest.get('path')} compaction, {model})"


def _steps(now: datetime) -> list[Step]:
    """A's three steps, minutes apart, so the digest's span and its latest
    notable event read as they would in real life."""
    return [
        Step(
            action="kubectl describe pod payments/api-7f9c",
            outcome="failure",
            failure_cause="container api: OOMKilled (exit 137), limit 256Mi",
            started_at=now - timedelta(minutes=12),
            ended_at=now - timedelta(minutes=11),
            metadata={"entity_type": "pod", "entity_id": POD.id},
        ),
        Step(
            action="kubectl top pod payments/api-7f9c",
            outcome="success",
            response="memory 251Mi of 256Mi before the restart",
            started_at=now - timedelta(minutes=9),
            ended_at=now - timedelta(minutes=8),
        ),
        Step(
            action="raise memory limit to 512Mi",
            outcome="success",
            response="deployment payments/api patched; pods stable for 10 min",
            started_at=now - timedelta(minutes=5),
            ended_at=now - timedelta(minutes=1),
            metadata={"entities": [{"type": "deployment", "id": "payments/api"}]},
        ),
    ]


async def _scenario(story: _Story, service: AgentMemory, run_id: str) -> None:
    story.title(f"Agent A starts to investigate the OOMKilled pod {POD.id}.")
    async with service.request(
        agent="agent-a",
        domain=DOMAIN,
        request_id=f"req-a-{run_id}",
        entities=[POD],
        doing="investigate OOMKilled restarts",
    ) as a:
        story.say(f"It announces what it is doing, and {_claim(a)}.")

        story.title("Agent B arrives for the same pod while A is still at work.")
        async with service.request(
            agent="agent-b",
            domain=DOMAIN,
            request_id=f"req-b-{run_id}",
            entities=[POD],
            doing="check payments latency alert",
        ) as b:
            story.say(f"B announces itself too; {_claim(b)}.")
            story.say("B's planner gets these views:")
            story.planning(await b.planning_context())
        story.reports(b.reports)

        story.title("Agent A records its three steps and finishes.")
        await a.record(_steps(datetime.now(UTC)))
    story.say("Its signal and claim are withdrawn on the way out.")
    story.reports(a.reports)

    story.title("A new request on the pod sees A's events.")
    async with service.request(
        agent="agent-b",
        domain=DOMAIN,
        request_id=f"req-b2-{run_id}",
        entities=[POD],
        doing="follow up on payments latency",
    ) as later:
        ctx = await later.planning_context()
        story.planning(ctx)
        story.say(_digest(ctx) + ".")
    story.reports(later.reports)

    story.title("Another request reads the same domain.")
    async with service.request(
        agent="agent-c", domain=DOMAIN, request_id=f"req-c-{run_id}", doing="weekly review"
    ) as review:
        ctx = await review.planning_context()
        story.say(_digest(ctx) + ": nothing changed since it was built.")
    story.reports(review.reports)


async def _user_session(story: _Story, users: UserMemory, run_id: str) -> None:
    user = f"user-{run_id}"
    story.title('A user says: "I\'m vegan, plan a trip to Tokyo. I prefer aisle seats."')
    report = await users.extract(
        user_id=user,
        namespace="travel-agent",
        conversation="I'm vegan, plan a trip to Tokyo. I prefer aisle seats.",
        wait=True,
    )
    ops = report.details.get("reconcile", {}).get("operations")
    story.say(f"Two facts are extracted and stored: {ops}.")
    story.reports({"extract": report})

    story.title("In the next session the assistant recalls them.")
    view = await users.profile(
        user_id=user, namespace="travel-agent", request="Book dinner in Tokyo for Friday"
    )
    story.view(view.text)
    again = await users.extract(
        user_id=user, namespace="travel-agent", conversation="As I said, I'm vegan.", wait=True
    )
    ops = again.details.get("reconcile", {}).get("operations")
    story.say(f"Saying it again reconciles as {ops}: nothing is stored twice.")

    story.title("The user asks to be forgotten.")
    receipt = await users.forget(user)
    story.say(
        f"Receipt: {receipt.facts} facts, {receipt.events} events and "
        f"{receipt.cache_entries} cache entries removed; complete: {receipt.complete}."
    )
    left = await users.facts(user_id=user)
    view = await users.profile(user_id=user, namespace="travel-agent", request="dinner in Tokyo")
    story.say(f"Facts left: {len(left)}. The profile the assistant gets now:")
    story.view(view.text)


async def run_demo(url: str | None, *, as_json: bool = False) -> int:
    """Run the scenario; 0 when every stage succeeded, 1 when some failed open,
    and 1 with a one-line error when the backend cannot be reached at all."""
    tmp: tempfile.TemporaryDirectory[str] | None = None
    if url is None:
        tmp = tempfile.TemporaryDirectory(prefix="agent-memory-demo-")
        url = f"sqlite:///{Path(tmp.name) / 'memory.db'}"
    story = _Story(as_json=as_json)
    try:
        async with connect(url) as memory:
            await _reachable(memory)
            print(
                f"agent-memory demo on {memory.url}\n"
                "(offline: a hashing embedder and rule-based summaries stand in for models)"
            )
            run_id = uuid.uuid4().hex[:8]
            await _scenario(story, memory.agents, run_id)
            await _user_session(story, memory.users, run_id)
    finally:
        if tmp is not None:
            tmp.cleanup()
    print()
    if story.failed:
        print(f"demo complete, but {story.failed} stage(s) failed open (see the reports)")
        return 1
    print("demo complete")
    return 0


async def _reachable(memory: Memory) -> None:
    """Refuse to tell the story on a backend that cannot be reached at all (each
    stage would only fail open); one line says why."""
    for port in (memory.store, memory.events, memory.leases, memory.cache):
        try:
            await port.ping()
        except BackendUnavailable:
            raise
        except Exception as exc:
            raise BackendUnavailable(memory.url, f"{type(exc).__name__}: {exc}") from None
