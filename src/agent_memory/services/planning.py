"""Planning context: the inputs gathered for one request and their rendering
into the budgeted `<agent_memory>` and `<agent_coordination>` views."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from attrs import define, field

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import Entity, Event
from agent_memory.domain.views import (
    ActivitySignal,
    Investigation,
    KnowledgeItem,
    render_agent_memory,
    render_coordination,
)
from agent_memory.services.coordination import SignalInfo
from agent_memory.services.reports import StageReport

__all__ = ["PlanningContext", "PlanningInputs", "render_planning"]


@define
class PlanningInputs:
    """What the enrichment stage gathered (each part may be empty after a failure)."""

    agent: str
    domain: str
    request_id: str
    now: datetime
    events: list[Event] = field(factory=list)
    events_limited: bool = False
    entity: Entity | None = None
    entity_history: list[Event] = field(factory=list)
    signals: list[SignalInfo] = field(factory=list)
    claims: list[tuple[Entity, str, str, datetime | None]] = field(factory=list)
    knowledge: list[KnowledgeItem] = field(factory=list)
    digest: str | None = None


@define
class PlanningContext:
    """The rendered views and the report of the stage that built them."""

    agent_memory: str
    coordination: str
    report: StageReport
    view_reports: dict[str, Any] = field(factory=dict)

    @property
    def text(self) -> str:
        return "\n".join(part for part in (self.agent_memory, self.coordination) if part)


def _own(inputs: PlanningInputs, agent: str, request_id: str) -> bool:
    """Whether (agent, request id) is the caller's request: a request is the
    pair (its signal key and lease owner), so another agent working under the
    same request id (one id fanned out to several agents) is another request."""
    return agent == inputs.agent and request_id == inputs.request_id


def _signals(inputs: PlanningInputs, unreadable: Counter[str]) -> list[ActivitySignal]:
    out = []
    for info in inputs.signals:
        if info.started_at is None or _own(inputs, info.agent, info.request_id):
            continue
        try:
            out.append(
                ActivitySignal(
                    agent=info.agent,
                    request_id=info.request_id,
                    domain=inputs.domain,
                    action=info.doing,
                    status=info.status,
                    started_at=info.started_at,
                )
            )
        except InvalidInput:  # another writer's lease no view can show
            unreadable["signals"] += 1
    return out


def _investigations(inputs: PlanningInputs, unreadable: Counter[str]) -> list[Investigation]:
    out = []
    for entity, agent, request_id, since in inputs.claims:
        if _own(inputs, agent, request_id):
            continue
        try:
            out.append(
                Investigation(
                    entity=entity, agent=agent, request_id=request_id, since=since or inputs.now
                )
            )
        except InvalidInput:  # another writer's lease no view can show
            unreadable["claims"] += 1
    return out


def render_planning(
    inputs: PlanningInputs,
    *,
    budget_bytes: int,
    coordination_limit: int,
    report: StageReport,
) -> PlanningContext:
    """Render both views; a rendering failure is reported and yields empty text.
    A signal or claim no view can show (another writer's lease with a blank or
    oversized agent, a blank request id, a naive time) is left out and counted in
    the report's `unreadable`; the others are shown."""
    memory_text = coordination_text = ""
    view_reports: dict[str, Any] = {}
    unreadable: Counter[str] = Counter()
    investigations = _investigations(inputs, unreadable)
    signals = _signals(inputs, unreadable)
    try:
        memory_view = render_agent_memory(
            domain=inputs.domain,
            as_of=inputs.now,
            request_id=inputs.request_id,
            digest=inputs.digest,
            events=inputs.events,
            entity=inputs.entity,
            entity_events=inputs.entity_history,
            investigations=investigations,
            knowledge=inputs.knowledge,
            budget_bytes=budget_bytes,
        )
        memory_text = memory_view.text
        view_reports["agent_memory"] = memory_view.report
    except Exception as exc:
        report.fail("render agent_memory", exc)
    try:
        coordination_view = render_coordination(
            signals,
            domain=inputs.domain,
            own_request_id=None,  # left out above, by agent and request id
            now=inputs.now,
            max_agents=coordination_limit,
            budget_bytes=budget_bytes,
        )
        coordination_text = coordination_view.text
        view_reports["agent_coordination"] = coordination_view.report
    except Exception as exc:
        report.fail("render agent_coordination", exc)
    report.details.update(
        {
            "events": len(inputs.events),
            "events_limited": inputs.events_limited,
            "entity_history": len(inputs.entity_history),
            "signals": len(inputs.signals),
            "claims": len(inputs.claims),
            "knowledge": len(inputs.knowledge),
        }
    )
    if unreadable:
        report.details["unreadable"] = {
            "signals": unreadable["signals"],
            "claims": unreadable["claims"],
        }
    return PlanningContext(
        agent_memory=memory_text,
        coordination=coordination_text,
        report=report,
        view_reports=view_reports,
    )
